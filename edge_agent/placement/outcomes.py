"""A Placer's run-path bookkeeping: started, feedback, release (the ``OutcomeRecording`` mixin).

What happens to a placed task after the decision: it starts (its remaining work, not its
full charge, then counts in its devices' queues), it finishes with a measurement (the
(class, device) correction moves toward it in log space, see ``learning``), or it is let go
without one (its charge and memory go back). The device rows and corrections are read and
written through flat views of Python floats (``Placer._bind``), not numpy scalars: this is
on every task's path.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from edge_agent.errors import InvalidInput
from edge_agent.placement import layout as L
from edge_agent.placement import learning
from edge_agent.placement.decision import Decision
from edge_agent.placement.edf import WaitingWork
from edge_agent.placement.explore import Explorer
from edge_agent.placement.first_flights import FirstFlights
from edge_agent.placement.priors import ROOFLINE
from edge_agent.placement.running import RunningWork
from edge_agent.placement.workspace import Workspace

_FIELDS, _QUEUE, _MAX_W = L.DEV_FIELDS, L.DEV_QUEUE_S, L.DEV_MAX_W
_MEM_FREE, _MEM_TOTAL = L.DEV_MEM_FREE, L.DEV_MEM_TOTAL
_NOTHING_CREDITED = (0.0,) * L.MAX_GANG  # a release of a decision that never started


class OutcomeRecording:
    """``Placer.started``, ``feedback`` and ``release`` over its workspace's rows."""

    _ws: Workspace
    _lr: float
    device_ids: tuple[str, ...]
    exploration: Explorer
    _samples: dict[tuple[int, int], int]
    _sources: list[tuple[str, ...] | None]
    _running: RunningWork
    _started: dict[Decision, tuple[float, list[float]]]
    _waiting: WaitingWork
    _first: FirstFlights
    _device_cells: memoryview[float]  # devices[d, f] at d * DEV_FIELDS + f
    _correction_cells: memoryview[float]  # corrections[cls, d] at cls * n + d

    _learned: Callable[[int, int, int, float], None]  # DevicePooling's: re-pool cold classes
    _untrusted: Callable[[Decision], list[int]]  # FirstFlightGate's: unmeasured devices

    def feedback(
        self, decision: Decision, *, latency_s: float, energy_j: float | None = None
    ) -> None:
        """Record a finished task's measured service time (and energy); release its devices.

        The (task class, device) correction moves, in log space, toward measured / the
        uncorrected estimate made at decision time (see ``learning``): stable with any
        number of tasks in flight, so a device slower than its datasheet stops being chosen.
        """
        if not decision.placed:
            raise InvalidInput("feedback: the decision placed nothing")
        if not (math.isfinite(latency_s) and latency_s > 0):
            raise InvalidInput("feedback: latency_s must be a finite number > 0")
        if energy_j is not None and not (math.isfinite(energy_j) and energy_j >= 0):
            raise InvalidInput("feedback: energy_j must be a finite number >= 0")
        target = latency_s / max(decision.base_s, 1e-12)
        cls = decision.task_class_index
        cells = self._correction_cells  # corrections[cls, d] at cls * n + d
        row = cls * len(self.device_ids)
        samples, sources, lr = self._samples, self._sources, self._lr
        indices = decision.device_indices
        probe = decision.probe
        power = 0.0 if energy_j is None else energy_j / len(indices) / latency_s
        for d in indices:
            n = samples.get((cls, d), 0) + 1
            samples[(cls, d)] = n
            # a probe re-measures a pinned factor; the first samples are averaged (1/n)
            rate = 1.0 if probe else max(lr, 1.0 / n)
            factor = cells[row + d] = learning.toward(cells[row + d], target, rate)
            self._learned(cls, d, n, factor)  # before the pair is marked: its source is pooled
            marks = sources[cls]
            if marks is None or not marks[d].startswith("learned"):
                self._mark_learned(cls, d)
            self.exploration.tried(cls, d)
            if energy_j is not None:
                at = d * _FIELDS + _MAX_W
                self._device_cells[at] += lr * (power - self._device_cells[at])
        if probe:
            self.exploration.finished(decision, latency_s)
        self.release(decision)

    def _mark_learned(self, cls: int, d: int) -> None:
        """Label (cls, d)'s estimate learned (``feedback`` calls it only when it is not yet)."""
        sources = self._sources[cls] or (ROOFLINE,) * len(self.device_ids)
        self._sources[cls] = (
            *sources[:d],
            f"learned from measurements (prior: {sources[d]})",
            *sources[d + 1 :],
        )

    def started(self, decision: Decision, *, now: float | None = None) -> None:
        """Record that a placed task began running (at ``now`` on the clock, default now).

        From then on its remaining work, not its full charge, counts in its devices'
        queues: the queue shrinks with the run time until ``feedback``/``release``.
        """
        if not decision.placed:
            raise InvalidInput("started: the decision placed nothing")
        if now is not None and not math.isfinite(now):
            raise InvalidInput("started: now must be a finite clock reading")
        cls, samples = decision.task_class_index, self._samples
        # a pair with a measurement is trusted: only a device without one is looked up further
        unmeasured = False
        for d in decision.device_indices:
            if not samples.get((cls, d)):
                unmeasured = bool(self._untrusted(decision))
                break
        self._running.start(decision, now, unmeasured=unmeasured)
        if self._waiting.entries:
            self._waiting.discard(decision)

    def release(self, decision: Decision) -> None:
        """Return a decision's charged queue time and memory to its devices."""
        self.exploration.finished(decision, None)  # a no-op after feedback, or not measuring
        mem = decision.task.memory_needed()
        if self._waiting.entries:
            self._waiting.discard(decision)
        self._first.discard(decision)
        # the run time already credited per device (none when it never started)
        credited = self._running.finish(decision) if self._started else _NOTHING_CREDITED
        cells = self._device_cells  # devices[d, f] at d * DEV_FIELDS + f, Python floats
        charges = decision.charges  # one per device; _NOTHING_CREDITED is longer (MAX_GANG)
        for d, charge, done in zip(decision.device_indices, charges, credited, strict=False):
            at = d * _FIELDS
            queue = cells[at + _QUEUE] - (charge - done)
            cells[at + _QUEUE] = queue if queue > 0.0 else 0.0  # max(0, queue), NaN -> 0
            free, total = cells[at + _MEM_FREE] + mem, cells[at + _MEM_TOTAL]
            cells[at + _MEM_FREE] = free if free < total else total  # min(total, free)
