"""An unmeasured estimate is not trusted twice at once (the ``FirstFlightGate`` mixin).

A (task class, device) pair whose estimate nobody has measured yet (the roofline; the
roofline times the device's factor on other models, or calibrated on its profile's
published figures for other models: ``pooling``) is a guess that can be several times
optimistic. Two rules keep work from queueing behind it:

- under a deadline policy (``deadline_placing``) such a pair takes one task at a time
  until its first measurement: a device that looks fast on paper would otherwise collect
  every task that arrives while its first one runs. Once a measurement is in (or when the
  pair's estimate is a published figure, or a factor given by ``import_corrections``) the
  gate is gone. When every candidate of a call is gated, none is (the task must go
  somewhere). An exploration probe is never re-decided: it is itself such a first task;
- under every policy, a task started on such an estimate holds its device at least as
  long again as it has run (``running.remaining_s``): reaching its estimate says little
  about its end, so the device is not taken as free for the next task of any class.

The gate is not used under other policies: on bench_sim_slo's edge-mixed scenario,
latency-first / oracle over seeds 1-7 averaged 1.067 (50% load) and 1.144 (80%) before;
with the gate (and the running rule, calibrated and drift-scaled cold estimates) 1.066 /
1.143; with the running rule and those estimates alone 1.054 / 1.103 (seeds 1-3 at 80%:
1.206 / 1.550 / 1.074 -> 1.225 / 1.340 / 1.059). One task at a time leaves a right
estimate's capacity unused while its first result is out, which at 50% costs more than the
wrong ones it stops; under a deadline policy a task's deadline is at stake instead.
``tools/lat_first_gap.py`` splits the remaining gap: a backlog built in the first fifth
of the run at 80%.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from edge_agent.placement.decision import Decision
from edge_agent.placement.explore import CALIBRATED, POOLED, Explorer
from edge_agent.placement.priors import ROOFLINE
from edge_agent.placement.workspace import Workspace

#: estimate sources that nobody has measured (a published figure is someone's measurement)
UNMEASURED = frozenset({ROOFLINE, POOLED})


def _unmeasured(source: str) -> bool:
    """Return whether an estimate source is a guess nobody has measured."""
    return source in UNMEASURED or source.startswith(CALIBRATED)


#: one decision over the call's candidates (None: every device); explore=False re-decides
Once = Callable[[Collection[str] | None, bool], Decision]


class FirstFlights:
    """Pairs with an unmeasured estimate and a task in flight (one at a time)."""

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


class FirstFlightGate:
    """``Placer._gated``: one decision, re-decided off the gated pairs (module doc)."""

    _ws: Workspace
    _first: FirstFlights
    _sources: list[tuple[str, ...] | None]
    _samples: dict[tuple[int, int], int]
    _imported: set[tuple[int, int]]
    device_ids: tuple[str, ...]
    exploration: Explorer

    def _gated(self, once: Once, candidates: Collection[str] | None) -> Decision:
        """Decide (and commit) with ``once``; again without the gated devices if it chose one.

        The caller records the returned decision (``_first.add``) once committed for good.
        """
        before = self._ws.devices.copy() if self._first else None
        decision = once(candidates, True)
        if before is None or not decision.placed or decision.probe:
            return decision
        narrower = self._ungated(decision, candidates)
        if narrower is None:
            return decision
        after = self._ws.devices.copy()
        self._ws.devices[:] = before
        retry = once(narrower, False)
        if not retry.placed:
            self._ws.devices[:] = after
            return decision
        self.exploration.finished(decision, None)  # the first choice is not placed after all
        return retry

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
        """Return the decision's devices whose estimate nobody has measured yet."""
        cls = decision.task_class_index
        sources = self._sources[cls]
        return [
            d
            for d in decision.device_indices
            if (sources is None or _unmeasured(sources[d]))
            and not self._samples.get((cls, d))
            and (cls, d) not in self._imported
        ]
