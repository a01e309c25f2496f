"""A Placer's deadline-ordered placement (the ``DeadlinePlacing`` mixin; order: ``edf``).

Under a deadline policy a device runs its waiting work earliest-deadline-first, so a new
task with a deadline counts ahead of it only the work ``edf.WaitingWork`` says runs first.
Work still waiting past its latest start counts as hopeless there (``edf.WaitingWork``).
A task no device can finish in time keeps the earliest finish of that view (often a fast
device, where it then runs after the feasible work, using little of it): placed on its
earliest finish with every queue counted in full, it went to idle slow devices instead,
and bench_sim_slo's edge-mixed at 80% (seeds 1-3) met fewer deadlines (75.7% vs 77.3% on
average) for 1.3x the energy (its mean latency was lower on the published fleets: slo-published
74 vs 121 ms, the same deadlines met within a point). Every placement goes through
``first_flights.FirstFlightGate`` (an unmeasured estimate takes one task at a time).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

from edge_agent.placement import layout as L
from edge_agent.placement.codec import PreparedTask, prepare
from edge_agent.placement.decision import Decision
from edge_agent.placement.edf import WaitingWork
from edge_agent.placement.first_flights import FirstFlightGate
from edge_agent.placement.running import RunningWork
from edge_agent.placement.workspace import Workspace
from edge_agent.tasks.contract import TaskContract


class DeadlinePlacing(FirstFlightGate):
    """``Placer._place_edf``: a decision under earliest-deadline-first device queues."""

    _ws: Workspace
    _running: RunningWork
    _overrun: Callable[[Decision, float], None]  # DevicePooling's
    _started: dict[Decision, tuple[float, list[float]]]
    _waiting: WaitingWork
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
        decision = self._gated(
            lambda among, explore: self._edf_once(prepared, among, now, due, explore=explore),
            candidates,
        )
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
