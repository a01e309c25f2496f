"""The discrete-event engine: arrivals, one chooser's decisions, devices, completions.

Each device runs one task at a time (a running task is never pre-empted) and, like an
agent's ``JobQueue``, holds a task only once its input has arrived (origin-to-device
transfer): a task in transit waits for it outside the queue, and an idle device starts
the next task already there, never waiting on a transfer while arrived work waits. A
FIFO device starts its waiting tasks in input-arrival order; a chooser with
``queue_order = "edf"`` (a deadline policy's agent) has its devices start them
earliest-deadline-first instead (``edge_agent.placement.edf``), judging a deadline
feasible on the type's true mean time there (not the task's own draw), as a device that
has run that model knows it. A task's start is decided when its device takes it, and
the chooser's ``job_started(job)`` (when it has one) is told. (Holding a remote task's
slot for its transfer instead left the device idle while tasks already there waited: at
80% on edge-mixed-published that made most of slo-first's misses under EDF.)
``free_at`` is when a device would be free running its committed work with nothing more
coming (the true remaining work the oracles see): in input-arrival order on a FIFO
device, in commit order on an EDF one; ``finish_if`` puts a task behind all of it.
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
    pending: list[deque[Job]] = field(default_factory=list)  # the running job, if any
    waiting: list[list[Waiting]] = field(default_factory=list)  # input in, not started
    transit: list[list[Waiting]] = field(default_factory=list)  # input not yet in
    free_at: list[float] = field(default_factory=list)
    committed_mem: list[float] = field(default_factory=list)
    config: list[int] = field(default_factory=list)  # held after the last committed job
    reconfigs: list[int] = field(default_factory=list)  # configuration switches per device
    reconfig_busy_s: list[float] = field(default_factory=list)
    edf: bool = False  # devices start earliest-deadline-first (set by ``simulate``)

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

    def reconfig_s(self, task: Task, dev: int, held: int | None = None) -> float:
        """Return the switch time ``task`` pays on ``dev`` holding ``held`` (default: now)."""
        held = self.config[dev] if held is None else held
        if task.config_id == 0 or held == task.config_id:
            return 0.0
        return self.fleet.devices[dev].device.capability.reconfig_s

    def queue_len(self, dev: int) -> int:
        """Return the number of unfinished tasks committed to ``dev`` (running included)."""
        return len(self.pending[dev]) + len(self.waiting[dev]) + len(self.transit[dev])

    def queued_tasks(self, dev: int) -> list[Task]:
        """Return the tasks committed to ``dev`` that have not started (arrived or not)."""
        return [_payload(w)[0] for w in self.waiting[dev] + self.transit[dev]]

    def ready_at(self, task: Task, dev: int, now: float) -> float:
        """Return when ``task``'s input, sent now, reaches ``dev``."""
        size = self.truth.input_bytes((task.model, task.precision))
        return now + self.fleet.transfer_s(task.origin, dev, size)

    def finish_if(self, task: Task, dev: int, now: float) -> tuple[float, float, float]:
        """Return (start, finish, service) the task would truly get behind all the work
        committed to ``dev`` (``free_at``; on a FIFO device its input may arrive before
        some of that work's and start sooner, delaying it: module doc).

        ``finish - start`` includes any reconfiguration; ``service`` does not.
        """
        service = self.truth.service_s(task.index, (task.model, task.precision), dev) * task.work
        if self.edf:
            free, held = self.free_at[dev], self.config[dev]
        else:
            free, held = _arrival_walk(self, dev)
        start = max(free, self.ready_at(task, dev, now))
        return start, start + self.reconfig_s(task, dev, held) + service, service


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


def _by_arrival(w: Waiting) -> tuple[float, int]:
    return w.ready, w.seq


def _arrival_walk(state: FleetState, dev: int) -> tuple[float, int]:
    """Return (free, config held) once the FIFO ``dev`` ran all its committed work, in
    input-arrival order."""
    end = state.pending[dev][-1].finish if state.pending[dev] else 0.0
    held = state.config[dev]
    for w in sorted(state.waiting[dev] + state.transit[dev], key=_by_arrival):
        task, service = _payload(w)
        end = max(end, w.ready) + state.reconfig_s(task, dev, held) + service
        held = task.config_id or held
    return end, held


def _tail(state: FleetState, dev: int) -> float:
    """Return ``free_at`` for ``dev``: its committed work run in its device's order."""
    if not state.edf:
        return _arrival_walk(state, dev)[0]
    end = state.pending[dev][-1].finish if state.pending[dev] else 0.0
    for w in sorted(state.waiting[dev] + state.transit[dev], key=lambda w: w.seq):
        end = max(end, w.ready) + _payload(w)[1]  # commit order, as the EDF Placer counts
    return end


def _start(
    state: FleetState, dev: int, w: Waiting, now: float, events: list[tuple[float, int, int]]
) -> Job:
    """Start the arrived task ``w`` on the idle device ``dev`` now."""
    task, service = _payload(w)
    switch = _switch(state, task, dev)
    job = Job(task, dev, now, now + switch + service, service)
    state.pending[dev].append(job)
    heapq.heappush(events, (job.finish, _DONE, dev))
    return job


def _take_next(
    state: FleetState, dev: int, now: float, events: list[tuple[float, int, int]]
) -> Job | None:
    """Start the next arrived task of the idle device ``dev`` (None: busy, or none in)."""
    waiting = state.waiting[dev]
    if state.pending[dev] or not waiting:
        return None
    if state.edf:
        w = pop_next(waiting, now)
    else:
        w = waiting.pop(min(range(len(waiting)), key=lambda i: _by_arrival(waiting[i])))
    job = _start(state, dev, w, now, events)
    state.free_at[dev] = _tail(state, dev)
    return job


def _inputs_in(state: FleetState, dev: int, now: float) -> None:
    """Move the tasks whose input has reached ``dev`` by ``now`` into its queue (seq order)."""
    arrived = [w for w in state.transit[dev] if w.ready <= now]
    if arrived:
        state.transit[dev] = [w for w in state.transit[dev] if w.ready > now]
        state.waiting[dev].extend(arrived)
        state.waiting[dev].sort(key=lambda w: w.seq)


def _commit(
    state: FleetState, task: Task, dev: int, now: float, events: list[tuple[float, int, int]]
) -> tuple[float, Job | None]:
    """Queue ``task`` on ``dev``; return (its service time, the job if it started now).

    A task whose input is still in transit waits for it outside the queue (module doc).
    """
    tt = (task.model, task.precision)
    ready = state.ready_at(task, dev, now)
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
    state.free_at[dev] = _tail(state, dev)
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
    state.edf = getattr(chooser, "queue_order", "fifo") == "edf"
    on_start: Callable[[Job], None] | None = getattr(chooser, "job_started", None)
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
            taken = _take_next(state, key, now, events)
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
                service, started = _commit(state, task, dev, now, events)
                if started is not None and on_start is not None:
                    on_start(started)
                state.committed_mem[dev] += state.memory[(task.model, task.precision)]
                out.device[key] = dev
                out.service_s[key] = service
                out.energy_j[key] = state.truth.energy_j(dev, service)
        if progress is not None and done != reported and (done % step == 0 or done == n):
            progress(done)
            reported = done
    return out
