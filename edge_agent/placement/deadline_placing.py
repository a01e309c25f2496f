"""A Placer's deadline-ordered placement (the ``DeadlinePlacing`` mixin; order: ``edf``).

Under a deadline policy a device runs its waiting work earliest-deadline-first, so a new
task with a deadline counts ahead of it only the work ``edf.WaitingWork`` says runs first.
Work still waiting past its latest start counts as hopeless there (``edf.WaitingWork``).
A task no device can finish in time keeps the earliest finish of that view (often a fast
device, where it then runs after the feasible work, using little of it): placed on its
earliest finish with every queue counted in full, it went to idle slow devices instead,
and bench_sim_slo's edge-mixed at 80% (seeds 1-3) met fewer deadlines (75.7% vs 77.3% on
average) for 1.3x the energy (its mean latency was lower on the published fleets: slo-published
74 vs 121 ms, the same deadlines met within a point). One more rule keeps the estimate honest:

- **An unmeasured estimate is not trusted twice at once.** A (task class, device) pair
  whose estimate is still the roofline (no published figure, no measurement yet) takes one
  task at a time until its first measurement (``FirstFlights``): the roofline can be an
  order of magnitude off, and a slow device would otherwise collect every task that
  arrives while its first one runs. Once measured (or when the pair's estimate is a
  published figure) the gate is gone. When every candidate is gated, none is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

from edge_agent.placement import layout as L
from edge_agent.placement.codec import PreparedTask, prepare
from edge_agent.placement.decision import Decision
from edge_agent.placement.edf import WaitingWork
from edge_agent.placement.explore import Explorer
from edge_agent.placement.priors import ROOFLINE
from edge_agent.placement.running import RunningWork
from edge_agent.placement.workspace import Workspace
from edge_agent.tasks.contract import TaskContract


class FirstFlights:
    """Pairs with an unmeasured roofline estimate and a task in flight (one at a time)."""

    def __init__(self) -> None:
        self._busy: dict[tuple[int, int], int] = {}  # (class, device) -> tasks in flight
        self._of: dict[Decision, tuple[tuple[int, int], ...]] = {}

    def __bool__(self) -> bool:
        return bool(self._busy)

    def gated(self, cls: int) -> list[int]:
        """Return the devices a task of ``cls`` may not go to now (a first task in flight)."""
        return [d for (c, d) in self._busy if c == cls]

    def add(self, decision: Decision, untrusted: Sequence[int]) -> None:
        """Record a placed decision on the ``untrusted`` devices among its own."""
        pairs = tuple((decision.task_class_index, d) for d in untrusted)
        if pairs:
            self._of[decision] = pairs
            for pair in pairs:
                self._busy[pair] = self._busy.get(pair, 0) + 1

    def discard(self, decision: Decision) -> None:
        """Forget a finished (or released) decision; a no-op when unknown."""
        for pair in self._of.pop(decision, ()):
            left = self._busy[pair] - 1
            if left:
                self._busy[pair] = left
            else:
                del self._busy[pair]


class DeadlinePlacing:
    """``Placer._place_edf``: a decision under earliest-deadline-first device queues."""

    _ws: Workspace
    _running: RunningWork
    _overrun: Callable[[Decision, float], None]  # DevicePooling's
    _started: dict[Decision, tuple[float, list[float]]]
    _waiting: WaitingWork
    _first: FirstFlights
    _sources: list[tuple[str, ...] | None]
    _samples: dict[tuple[int, int], int]
    device_ids: tuple[str, ...]
    exploration: Explorer
    _place: Callable[..., Decision]  # Placer's: (task, candidates, *, explore=True)

    def _place_edf(
        self, task: TaskContract | PreparedTask, candidates: Collection[str] | None
    ) -> Decision:
        """Place as ``_place`` with only the work that runs first ahead (module doc)."""
        prepared = task if isinstance(task, PreparedTask) else prepare(task)
        bound_s = prepared.contract.requirements.deadline_s
        now = self._running.clock()
        due = now + bound_s if bound_s > 0 else math.inf
        if self._started:
            self._running.credit(self._ws.devices, self._overrun)
        before = self._ws.devices.copy() if self._first else None
        decision = self._edf_once(prepared, candidates, now, due)
        if before is not None and decision.placed and not decision.probe:
            narrower = self._ungated(decision, candidates)
            if narrower is not None:  # an unmeasured pair already has its task in flight
                after = self._ws.devices.copy()
                self._ws.devices[:] = before
                retry = self._edf_once(prepared, narrower, now, due, explore=False)
                if retry.placed:
                    decision = retry
                else:
                    self._ws.devices[:] = after
        if decision.placed and not self.exploration.paused:  # a preview commits nothing
            self._waiting.add(decision, due, bound_s, now)
            self._first.add(decision, self._untrusted(decision))
        return decision

    def _edf_once(
        self,
        prepared: PreparedTask,
        candidates: Collection[str] | None,
        now: float,
        due: float,
        *,
        explore: bool = True,
    ) -> Decision:
        """Decide (and commit) once with the work that runs after the task lifted off."""
        if not (self._waiting and due < math.inf):
            return self._place(prepared, candidates, explore=explore)
        window = prepared.contract.requirements.deadline_s
        lifted = self._waiting.lift(self._ws.devices, due, window, now)
        try:
            return self._place(prepared, candidates, explore=explore)
        finally:  # self._ws: a new class may have grown the workspace
            self._ws.devices[:, L.DEV_QUEUE_S] += lifted

    def _ungated(
        self, decision: Decision, candidates: Collection[str] | None
    ) -> Collection[str] | None:
        """Return the candidates without the gated devices when ``decision`` chose one.

        None when it chose none, or when no candidate would be left (module doc).
        """
        gated = self._first.gated(decision.task_class_index)
        if not gated or not set(gated) & set(decision.device_indices):
            return None
        ids = self.device_ids
        out = frozenset(ids if candidates is None else candidates) - {ids[d] for d in gated}
        return out or None

    def _untrusted(self, decision: Decision) -> list[int]:
        """Return the decision's devices whose estimate is an unmeasured roofline."""
        cls = decision.task_class_index
        sources = self._sources[cls]
        return [
            d
            for d in decision.device_indices
            if (sources is None or sources[d] == ROOFLINE) and not self._samples.get((cls, d))
        ]
