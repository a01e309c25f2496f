"""hetmesh for the deadline benchmark: one Placer placing a site's tasks, as an agent would.

One ``Placer`` over the whole fleet places every task, re-homed before each decision to
the box the task arrives at (``update_live(link_latency_s=..., link_bw_gbs=...)``: the
devices of that box are local, the others carry the link), so its own queue accounting
sees every commit, as an agent's does: a decision's charge counts until ``feedback``
(or, when the Placer has ``started``, its remaining work shrinks from the task's start).
Nothing outside the API is pushed into it. On top of that this chooser

- gives a deadline-aware policy the task's deadline (``Requirements.deadline_s``); when a
  kernel still leaves such a task unplaced, it places it again without the deadline, as a
  caller must, and counts it (``deadline_retries``);
- restricts each task to the devices it may run on (where the scenario has a time for
  the pair): ``place_one(..., candidates=...)`` when the Placer has it, else by marking
  the other devices offline for that one decision (the only way the older API offers);
- calls ``started(decision)`` at the task's simulated start when the Placer has it (the
  Placer then runs on the simulated clock: ``Placer(clock=...)``, ``started(now=...)``);
- counts the learned (task class, device) corrections sitting at a clamp;
- with ``queue_order="edf"`` its devices run waiting work earliest-deadline-first (as an
  agent's do under a deadline policy; ``engine``) and its Placer estimates that order
  (``Placer(deadline_order=True)``; with "fifo", every queue in full); on either, each
  start is reported when the device takes it (its input in: ``engine``).

Every optional API is detected once from the signatures; nothing assumes a version.
"""

from __future__ import annotations

import dataclasses
import heapq
import inspect
import time
from collections.abc import Iterable
from typing import Any

from cloud_hub.simulator.engine import FleetState, Job
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.truth import TaskType
from cloud_hub.simulator.workload import Task
from edge_agent.errors import InvalidInput
from edge_agent.placement import Decision, Placer, Policy, PreparedTask
from edge_agent.placement import placer as placer_module
from edge_agent.placement.codec import prepare
from edge_agent.resources.vocab import Health

HAS_CANDIDATES = "candidates" in inspect.signature(Placer.place_one).parameters
HAS_CLOCK = "clock" in inspect.signature(Placer.__init__).parameters


def _started_clock() -> str | None:
    """Return how ``Placer.started`` takes the time ("" = it does not), or None if absent.

    A call that needs more than the decision is not made at all.
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


class StartEvents:
    """Tells each Placer when its committed tasks start, on the simulated clock.

    A start is reported lazily, at the first event the engine hands over at or after it
    (before any decision or feedback that could see it), with the true start time.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Placer, Decision]] = []
        self._seq = 0  # ties in time keep commit order

    def commit(self, start: float, placer: Placer, decision: Decision) -> None:
        """Remember a committed task that starts at ``start``; a no-op without ``started``."""
        if HAS_STARTED:
            heapq.heappush(self._heap, (start, self._seq, placer, decision))
            self._seq += 1

    def report(self, now: float) -> None:
        """Call ``started`` for every remembered task that has started by ``now``."""
        while self._heap and self._heap[0][0] <= now:
            start, _, placer, decision = heapq.heappop(self._heap)
            started = getattr(placer, "started", None)
            if callable(started):
                started(decision, **({STARTED_CLOCK: start} if STARTED_CLOCK else {}))


def report_finished(fleet: Fleet, placer: Placer, decision: Decision, job: Job) -> None:
    """Give ``placer`` the true service time and energy of a finished job."""
    power = fleet.devices[job.dev].device.capability.max_power_w
    placer.feedback(decision, latency_s=job.service, energy_j=power * job.service)


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


class SloAgentChooser:
    """Places every task with one site Placer under ``policy`` (see the module doc)."""

    def __init__(
        self,
        fleet: Fleet,
        policy: Policy,
        *,
        deadline_aware: bool,
        candidates: dict[TaskType, list[int]] | None = None,
        queue_order: str = "fifo",
    ) -> None:
        self.name = policy.name
        self.queue_order = queue_order
        self.fleet = fleet
        self.deadline_aware = deadline_aware
        self.candidates = candidates
        self.use_candidates = HAS_CANDIDATES
        self.now = 0.0  # the simulated clock, as of the event being handled
        extra: dict[str, Any] = {"clock": lambda: self.now} if HAS_CLOCK else {}
        extra["deadline_order"] = queue_order == "edf"
        self.placer = Placer(fleet.devices_from(0), policy, keep_reasons=False, **extra)
        self._links = [
            [(d.capability.link_latency_s, d.capability.link_bw_gbs) for d in fleet.devices_from(b)]
            for b in range(len(fleet.boxes))
        ]
        self._live = list(self._links[0])  # each device's link as the Placer has it
        self._health = [Health.ONLINE] * len(fleet.devices)
        self._prepared: dict[tuple[str, str, float, int, str, float], PreparedTask] = {}
        self._open: dict[int, Decision] = {}
        self._starts = StartEvents()
        self._cands: dict[TaskType, tuple[str, ...]] = {}
        self.deadline_retries = 0
        self.place_s = 0.0  # wall time inside Placer.place_one only
        self.decisions = 0

    def _contract(self, task: Task, deadline: bool) -> PreparedTask:
        bound = task.max_latency_s if deadline else 0.0
        key = (task.model, task.precision, bound, task.priority, task.tenant, task.work)
        prepared = self._prepared.get(key)
        if prepared is None:
            contract = model_info(task.model).contract(
                task.precision, 0.0, task.priority, task.tenant, task.work
            )
            if bound > 0:
                req = dataclasses.replace(contract.requirements, deadline_s=bound)
                contract = dataclasses.replace(contract, requirements=req)
            prepared = self._prepared[key] = prepare(contract)
        return prepared

    def _allowed(self, task: Task) -> list[int] | None:
        if self.candidates is None:
            return None
        return self.candidates[(task.model, task.precision)]

    def _sync(self, task: Task) -> None:
        """Re-home the Placer to the task's box; mark non-candidates offline if must."""
        allowed = None if self.use_candidates else self._allowed(task)
        links = self._links[task.origin]
        for dev, device_id in enumerate(self.placer.device_ids):
            health = Health.ONLINE if allowed is None or dev in allowed else Health.OFFLINE
            if links[dev] != self._live[dev] or health != self._health[dev]:
                latency, bw = links[dev]
                self.placer.update_live(
                    device_id, link_latency_s=latency, link_bw_gbs=bw, health=health
                )
                self._live[dev], self._health[dev] = links[dev], health

    def _decide(self, task: Task, prepared: PreparedTask) -> Decision:
        allowed = self._allowed(task)
        t0 = time.perf_counter()
        try:
            if allowed is not None and self.use_candidates:
                tt = (task.model, task.precision)
                ids = self._cands.setdefault(tt, tuple(self.placer.device_ids[d] for d in allowed))
                try:
                    return self.placer.place_one(prepared, **{"candidates": ids})
                except (TypeError, InvalidInput):
                    self.use_candidates = False  # an API we do not understand: use health
                    self._sync(task)
            return self.placer.place_one(prepared)
        finally:
            self.place_s += time.perf_counter() - t0
            self.decisions += 1

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Place ``task`` arriving at its box now; None when the Placer places nothing."""
        self.now = now
        self._starts.report(now)
        self._sync(task)
        deadline = self.deadline_aware and task.max_latency_s > 0
        decision = self._decide(task, self._contract(task, deadline))
        if not decision.placed and deadline:
            self.deadline_retries += 1  # the older API only filters by deadline
            decision = self._decide(task, self._contract(task, False))
        if not decision.placed:
            return None
        dev = decision.device_indices[0]
        allowed = self._allowed(task)
        if allowed is not None and dev not in allowed:
            raise RuntimeError(
                f"{decision.device_ids[0]} is outside the candidates of {task.model}: "
                "the Placer ignored the restriction"
            )
        self._open[task.index] = decision
        return dev

    def job_started(self, job: Job) -> None:
        """Remember when its device took ``job`` (reported at the next event from then)."""
        self._starts.commit(job.start, self.placer, self._open[job.task.index])

    def finished(self, job: Job, now: float) -> None:
        """Report the start (if not yet), then the true service time and energy."""
        self.now = now
        self._starts.report(now)
        report_finished(self.fleet, self.placer, self._open.pop(job.task.index), job)

    def clamped(self) -> int | None:
        """Return the number of learned factors at a clamp at the end of the run."""
        return corrections_at_clamp([self.placer])
