"""hetmesh agents for the deadline benchmark: the public Placer API, used as an agent would.

On top of ``agents.AgentChooser`` (one Placer per box, live queues pushed before each
decision, ``feedback`` with the true service time and energy on completion) this chooser

- gives a deadline-aware policy the task's deadline (``Requirements.deadline_s``); when a
  kernel still leaves such a task unplaced, it places it again without the deadline, as a
  caller must, and counts it (``deadline_retries``);
- restricts each task to the devices it may run on (where the scenario has a published
  time): with ``place_one(..., candidates=...)`` when the Placer has it, else by marking
  the other devices offline for that one decision (the only way the older API offers);
- calls ``Placer.started(decision)`` when the task starts, when the Placer has it
  (lazily: at the next event the engine hands over, which is before any decision);
- counts the learned (task class, device) corrections sitting at a clamp.

Every optional API is detected once; nothing is assumed about a version.
"""

from __future__ import annotations

import dataclasses
import heapq
import inspect
import time
from collections.abc import Iterable

from cloud_hub.simulator.agents import AgentChooser
from cloud_hub.simulator.engine import FleetState, Job
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.truth import TaskType
from cloud_hub.simulator.workload import Task
from edge_agent.errors import InvalidInput
from edge_agent.placement import Decision, Placer, Policy, PreparedTask
from edge_agent.placement import placer as placer_module
from edge_agent.placement.codec import prepare
from edge_agent.resources.vocab import Health

HAS_CANDIDATES = "candidates" in inspect.signature(Placer.place_one).parameters


def _started_clock() -> str | None:
    """Return how ``Placer.started`` takes the time ("" = it does not), or None if absent.

    The simulator's clock is not the wall clock: when ``started`` accepts a time by a
    name it is given the simulated one; a call that needs more than the decision is
    not made at all.
    """
    fn = getattr(Placer, "started", None)
    if not callable(fn):
        return None
    params = list(inspect.signature(fn).parameters.values())[1:]  # after self
    required = [p for p in params if p.default is p.empty and p.kind != p.VAR_KEYWORD]
    if len(required) != 1 or required[0].kind == required[0].KEYWORD_ONLY:
        return None
    return next((p.name for p in params if p.name in ("now", "at", "now_s", "t")), "")


STARTED_CLOCK = _started_clock()
HAS_STARTED = STARTED_CLOCK is not None


def clamp_bounds() -> tuple[float, float] | None:
    """Return the Placer's (lowest, highest) correction factor, or None if it has none."""
    low = getattr(placer_module, "CORRECTION_MIN", None)
    high = getattr(placer_module, "CORRECTION_MAX", None)
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        return float(low), float(high)
    return None


def corrections_at_clamp(placers: Iterable[Placer]) -> int | None:
    """Return how many (Placer, task class, device) factors sit at either clamp."""
    bounds = clamp_bounds()
    if bounds is None:
        return None
    low, high = bounds
    return sum(
        f <= low * (1 + 1e-9) or f >= high * (1 - 1e-9)
        for p in placers
        for row in p.export_corrections().values()
        for f in row.values()
    )


class SloAgentChooser(AgentChooser):
    """An ``AgentChooser`` with deadlines, candidate sets and start events (module doc)."""

    def __init__(
        self,
        fleet: Fleet,
        policy: Policy,
        *,
        deadline_aware: bool,
        candidates: dict[TaskType, list[int]] | None = None,
    ) -> None:
        super().__init__(fleet, policy)
        self.deadline_aware = deadline_aware
        self.candidates = candidates
        self.use_candidates = HAS_CANDIDATES
        self.deadline_retries = 0
        self._waiting: list[tuple[float, int]] = []  # (start, task index), not yet reported
        self._cands: dict[tuple[int, TaskType], tuple[str, ...]] = {}
        self._with_deadline: dict[tuple[str, str, float, float], PreparedTask] = {}

    def _contract(self, task: Task) -> PreparedTask:
        plain = super()._contract(task)
        if not self.deadline_aware or task.max_latency_s <= 0:
            return plain
        key = (task.model, task.precision, task.max_latency_s, task.work)
        prepared = self._with_deadline.get(key)
        if prepared is None:
            contract = plain.contract
            req = dataclasses.replace(contract.requirements, deadline_s=task.max_latency_s)
            prepared = prepare(dataclasses.replace(contract, requirements=req))
            self._with_deadline[key] = prepared
        return prepared

    def _allowed(self, task: Task) -> list[int] | None:
        if self.candidates is None:
            return None
        return self.candidates[(task.model, task.precision)]

    def _sync(self, placer: Placer, task: Task, state: FleetState, now: float) -> None:
        allowed = None if self.use_candidates else self._allowed(task)
        for dev, device_id in enumerate(placer.device_ids):
            health = None
            if allowed is not None:
                health = Health.ONLINE if dev in allowed else Health.OFFLINE
            placer.update_live(device_id, queued_s=self._queued(state, dev, now), health=health)

    def _decide(
        self, placer: Placer, task: Task, state: FleetState, now: float, prepared: PreparedTask
    ) -> Decision:
        allowed = self._allowed(task)
        t0 = time.perf_counter()
        try:
            if allowed is not None and self.use_candidates:
                key = (task.origin, (task.model, task.precision))
                ids = self._cands.setdefault(key, tuple(placer.device_ids[d] for d in allowed))
                try:
                    return placer.place_one(prepared, **{"candidates": ids})
                except (TypeError, InvalidInput):
                    self.use_candidates = False  # an API we do not understand: use health
                    self._sync(placer, task, state, now)
            return placer.place_one(prepared)
        finally:
            self.place_s += time.perf_counter() - t0
            self.decisions += 1

    def _report_started(self, now: float) -> None:
        while self._waiting and self._waiting[0][0] <= now:
            start, index = heapq.heappop(self._waiting)
            placer, decision = self._open[index]
            started = getattr(placer, "started", None)
            if callable(started):
                started(decision, **({STARTED_CLOCK: start} if STARTED_CLOCK else {}))

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Place ``task`` with its origin box's Placer (see the module doc)."""
        self._report_started(now)
        placer = self.placers[task.origin]
        self._sync(placer, task, state, now)
        decision = self._decide(placer, task, state, now, self._contract(task))
        if not decision.placed and self.deadline_aware and task.max_latency_s > 0:
            self.deadline_retries += 1  # the older API only filters by deadline
            decision = self._decide(placer, task, state, now, super()._contract(task))
        if not decision.placed:
            return None
        dev = decision.device_indices[0]
        allowed = self._allowed(task)
        if allowed is not None and dev not in allowed:
            raise RuntimeError(
                f"{decision.device_ids[0]} is outside the candidates of {task.model}: "
                "the Placer ignored the restriction"
            )
        self._open[task.index] = (placer, decision)
        self._charge[task.index] = decision.charges[0]
        if HAS_STARTED:
            heapq.heappush(self._waiting, (state.finish_if(task, dev, now)[0], task.index))
        return dev

    def finished(self, job: Job, now: float) -> None:
        """Report the start (if not yet) and then the outcome to the deciding agent."""
        self._report_started(now)
        super().finished(job, now)

    def clamped(self) -> int | None:
        """Return the number of learned factors at a clamp over every agent's Placer."""
        return corrections_at_clamp(self.placers)
