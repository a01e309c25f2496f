"""The discrete-event engine: arrivals, one chooser's decisions, devices, completions.

Each device runs one task at a time, in the order tasks were committed to it; a task
starts when the device is free and its input has arrived (origin-to-device transfer).
A chooser with ``queue_order = "edf"`` (a deadline policy's agent) has its devices start
their waiting tasks earliest-deadline-first instead (``edge_agent.placement.edf``; a
running task is never pre-empted): a task's start is then decided when its device takes
it, and the chooser's ``job_started(job)`` is told. Such a device, like an agent's
``JobQueue``, holds a task only once its input has arrived: a task in transit joins its
queue then (taking it before, the device sat idle for the transfer while tasks already
there, due sooner, waited: at 80% on edge-mixed-published that made most of slo-first's
misses, tasks placed on a device estimated free that was held for a remote input). The
device judges a deadline feasible on the type's true mean time there (not the task's own
draw), as a device that has run that model knows it; ``free_at`` stays the FIFO tail
(running finish plus waiting and in-transit work).
Time is the event clock; choosers read the engine's state as of the event being handled.
A task needing an FPGA configuration (``config_id``) that its device will not hold when
the task starts first pays the device's ``reconfig_s``; the device then holds it. A
``Holder`` may defer a task's arrival to a later release time (peak shifting).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.truth import GroundTruth, TaskType
from cloud_hub.simulator.workload import Task
from edge_agent.placement.edf import Waiting, pop_next

_DONE, _ARRIVE, _READY = 0, 1, 2  # at equal times: completions, arrivals, inputs in


@dataclass(slots=True)
class Job:
    """A task committed to a device, with its true start and finish times."""

    task: Task
    dev: int
    start: float
    finish: float
    service: float


@dataclass
class FleetState:
    """What the engine knows about every device; choosers read it and never write it."""

    fleet: Fleet
    truth: GroundTruth
    feasible: dict[TaskType, list[int]]  # devices passing the kernel's hard constraints
    memory: dict[TaskType, float]  # bytes one task of a type holds on its device
    pending: list[deque[Job]] = field(default_factory=list)
    waiting: list[list[Waiting]] = field(default_factory=list)  # EDF devices only
    transit: list[list[Waiting]] = field(default_factory=list)  # EDF: input not yet in
    free_at: list[float] = field(default_factory=list)
    committed_mem: list[float] = field(default_factory=list)
    config: list[int] = field(default_factory=list)  # held after the last committed job
    reconfigs: list[int] = field(default_factory=list)  # configuration switches per device
    reconfig_busy_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.fleet.devices)
        self.pending = [deque() for _ in range(n)]
        self.waiting = [[] for _ in range(n)]
        self.transit = [[] for _ in range(n)]
        self.free_at = [0.0] * n
        self.committed_mem = [0.0] * n
        self.config = [sd.device.live.loaded_config for sd in self.fleet.devices]
        self.reconfigs = [0] * n
        self.reconfig_busy_s = [0.0] * n

    def reconfig_s(self, task: Task, dev: int) -> float:
        """Return the switch time ``task`` pays on ``dev`` after the work committed there."""
        if task.config_id == 0 or self.config[dev] == task.config_id:
            return 0.0
        return self.fleet.devices[dev].device.capability.reconfig_s

    def finish_if(self, task: Task, dev: int, now: float) -> tuple[float, float, float]:
        """Return (start, finish, service) the task would truly get if committed to ``dev`` now.

        ``finish - start`` includes any reconfiguration; ``service`` does not.
        """
        tt = (task.model, task.precision)
        ready = now + self.fleet.transfer_s(task.origin, dev, self.truth.input_bytes(tt))
        service = self.truth.service_s(task.index, tt, dev) * task.work
        start = max(self.free_at[dev], ready)
        return start, start + self.reconfig_s(task, dev) + service, service


def _switch(state: FleetState, task: Task, dev: int) -> float:
    """Return the reconfiguration ``task`` pays on ``dev`` now; ``dev`` then holds its config."""
    switch = state.reconfig_s(task, dev)
    if task.config_id:
        state.reconfigs[dev] += switch > 0
        state.reconfig_busy_s[dev] += switch
        state.config[dev] = task.config_id
    return switch


def _payload(w: Waiting) -> tuple[Task, float]:
    """Return the task an EDF device holds in ``w`` and its true service time."""
    return cast(tuple[Task, float], w.item)


def _start(
    state: FleetState, dev: int, w: Waiting, now: float, events: list[tuple[float, int, int]]
) -> Job:
    """Start the waiting task ``w`` on the EDF device ``dev`` now (or when its input is in)."""
    task, service = _payload(w)
    begin = max(now, w.ready)
    switch = _switch(state, task, dev)
    job = Job(task, dev, begin, begin + switch + service, service)
    state.pending[dev].append(job)
    heapq.heappush(events, (job.finish, _DONE, dev))
    return job


def _fifo_tail(state: FleetState, dev: int) -> float:
    """Return when an EDF device would be free running its work in commit order."""
    end = state.pending[dev][-1].finish if state.pending[dev] else 0.0
    for w in sorted(state.waiting[dev] + state.transit[dev], key=lambda w: w.seq):
        end = max(end, w.ready) + _payload(w)[1]
    return end


def _take_next(
    state: FleetState, dev: int, now: float, events: list[tuple[float, int, int]]
) -> Job | None:
    """Start the next task of the idle EDF device ``dev`` (None: nothing has arrived)."""
    if state.pending[dev] or not state.waiting[dev]:
        return None
    job = _start(state, dev, pop_next(state.waiting[dev], now), now, events)
    state.free_at[dev] = _fifo_tail(state, dev)
    return job


def _inputs_in(state: FleetState, dev: int, now: float) -> None:
    """Move the tasks whose input has reached ``dev`` by ``now`` into its queue (seq order)."""
    arrived = [w for w in state.transit[dev] if w.ready <= now]
    if arrived:
        state.transit[dev] = [w for w in state.transit[dev] if w.ready > now]
        state.waiting[dev].extend(arrived)
        state.waiting[dev].sort(key=lambda w: w.seq)


def _commit_fifo(
    state: FleetState, task: Task, dev: int, now: float, events: list[tuple[float, int, int]]
) -> float:
    """Queue ``task`` behind everything committed to ``dev``; return its service time."""
    start, finish, service = state.finish_if(task, dev, now)
    _switch(state, task, dev)
    state.free_at[dev] = finish
    state.pending[dev].append(Job(task, dev, start, finish, service))
    heapq.heappush(events, (finish, _DONE, dev))
    return service


def _commit_edf(
    state: FleetState, task: Task, dev: int, now: float, events: list[tuple[float, int, int]]
) -> tuple[float, Job | None]:
    """Queue ``task`` on the EDF device ``dev``; return (service, the job if it started).

    A task whose input is still in transit waits for it outside the queue (module doc).
    """
    tt = (task.model, task.precision)
    ready = now + state.fleet.transfer_s(task.origin, dev, state.truth.input_bytes(tt))
    service = state.truth.service_s(task.index, tt, dev) * task.work
    due = task.t + task.max_latency_s if task.max_latency_s > 0 else math.inf
    w = Waiting(task.index, due, state.truth.base[tt][dev] * task.work, ready, item=(task, service))
    job = None
    if ready > now:
        state.transit[dev].append(w)
        heapq.heappush(events, (ready, _READY, dev))
    elif state.pending[dev]:
        state.waiting[dev].append(w)
    else:
        job = _start(state, dev, w, now, events)
    state.free_at[dev] = _fifo_tail(state, dev)
    return service, job


class Chooser(Protocol):
    """A placement strategy: picks a device index for a task, or None to reject it."""

    name: str

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return the device for ``task`` arriving now, or None when it cannot be placed."""

    def finished(self, job: Job, now: float) -> None:
        """Learn from a completed job (its true service time)."""


class Holder(Protocol):
    """Decides when an arriving task is released to the chooser (now, or later)."""

    def hold(self, task: Task, now: float, state: FleetState) -> float:
        """Return the release time of ``task`` arriving now (``now`` = place at once)."""


@dataclass
class Outcome:
    """Per-task results of one run (index = task index); device -1 means rejected."""

    device: list[int]
    latency_s: list[float]
    service_s: list[float]
    energy_j: list[float]
    finish_s: list[float]
    choose_s: float = 0.0  # wall time spent in the chooser, all decisions


def simulate(
    tasks: list[Task],
    state: FleetState,
    chooser: Chooser,
    progress: Callable[[int], None] | None = None,
    holder: Holder | None = None,
) -> Outcome:
    """Run ``tasks`` through ``chooser`` over ``state``'s fleet; every task ends exactly once.

    With a ``holder`` every arrival is first offered to it; a task it holds arrives
    again, once, at the release time it returned.
    """
    n = len(tasks)
    out = Outcome([-2] * n, [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n)
    events: list[tuple[float, int, int]] = [(t.t, _ARRIVE, t.index) for t in tasks]
    heapq.heapify(events)
    by_index = {t.index: t for t in tasks}
    done = reported = 0
    step = max(1, n // 100)  # report about every 1% of the tasks
    clock = time.perf_counter
    held: set[int] = set()
    edf = getattr(chooser, "queue_order", "fifo") == "edf"
    on_start: Callable[[Job], None] | None = getattr(chooser, "job_started", None) if edf else None
    while events:
        now, kind, key = heapq.heappop(events)
        if kind == _DONE:
            job = state.pending[key].popleft()
            i = job.task.index
            out.latency_s[i] = job.finish - job.task.t
            out.finish_s[i] = job.finish
            state.committed_mem[key] -= state.memory[(job.task.model, job.task.precision)]
            chooser.finished(job, now)
            done += 1
        if kind == _READY:
            _inputs_in(state, key, now)
        if kind != _ARRIVE:
            taken = _take_next(state, key, now, events) if edf else None
            if taken is not None and on_start is not None:
                on_start(taken)
        else:
            task = by_index[key]
            if holder is not None and key not in held:
                held.add(key)
                release = holder.hold(task, now, state)
                if release > now:
                    heapq.heappush(events, (release, _ARRIVE, key))
                    continue
            t0 = clock()
            dev = chooser.choose(task, now, state)
            out.choose_s += clock() - t0
            if dev is None:
                out.device[key] = -1
                out.finish_s[key] = now
                done += 1
            else:
                if edf:
                    service, started = _commit_edf(state, task, dev, now, events)
                    if started is not None and on_start is not None:
                        on_start(started)
                else:
                    service = _commit_fifo(state, task, dev, now, events)
                state.committed_mem[dev] += state.memory[(task.model, task.precision)]
                out.device[key] = dev
                out.service_s[key] = service
                out.energy_j[key] = state.truth.energy_j(dev, service)
        if progress is not None and done != reported and (done % step == 0 or done == n):
            progress(done)
            reported = done
    return out
