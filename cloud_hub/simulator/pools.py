"""Resource pools under a flooding tenant: does a well-behaved tenant still get its quota?

One emulated board (its CPU devices), two tenants: ``steady`` submits at a modest Poisson
rate, ``flood`` submits far more than the box can serve for a window in the middle. Tasks
are placed with the agent's ``Placer`` and admitted through the agent's own pool rules
(``edge_agent.placement.pools``: ``Pools`` and ``admit_placed``), so the simulator and the
agent share one place for the rule. Each device runs its queue first in, first out, one
task at a time, for the placer's estimated service time; borrowed work that has not
started yields to its owner exactly as in the agent (it goes back to waiting).

``pool_isolation_violations`` counts the steady tenant's tasks that

1. were *entitled*: by arrivals alone (so the same tasks in every run), the steady
   tenant's tasks that arrived within one entitled wait plus one service time before it,
   itself included, were no more than its ``cpu_cores`` quota (``entitle``);
2. arrived while the flooding tenant held more than its own quota on the devices; and
3. started later than the *entitled wait* after arriving: every pool's full quota served
   plus one task already running, ``(sum of cpu_cores quotas) x service time``; tenants
   keeping within their quotas cannot make a task wait longer than that.

Without pools (admission takes everything; the quotas still define entitlement) the flood
fills the device queues and such tasks are counted; with pools the flood waits in its own
pool. ``compare_pools`` also runs the flood with ``borrow = true``: borrowed work that has
not started yields to the steady tenant; borrowed work already running is not stopped.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from edge_agent.placement import Decision, Placer, Policy, devices_from_profiles
from edge_agent.placement.pools import Pools, PoolSpec, admit_placed
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract

STEADY, FLOOD = "steady", "flood"


@dataclass(frozen=True)
class FloodScenario:
    """Arrival rates (tasks/s), the flood's window, the task size and the pools."""

    profile: str = "rk3588"
    duration_s: float = 60.0
    steady_rate: float = 4.0
    flood_rate: float = 150.0
    flood_window: tuple[float, float] = (10.0, 50.0)
    gflops: float = 1.0  # ~26 ms on the RK3588's CPU (its roofline)
    pools: Mapping[str, PoolSpec] = field(
        default_factory=lambda: {STEADY: PoolSpec(cpu_cores=2), FLOOD: PoolSpec(cpu_cores=2)}
    )
    seed: int = 7


@dataclass(eq=False)
class _Task:
    task_id: str
    tenant: str
    arrival: float
    contract: TaskContract
    entitled: bool = False
    flood_over: bool = False
    decision: Decision | None = None
    device: int = -1
    start: float = -1.0
    attempts: int = 0


def arrivals(s: FloodScenario) -> list[_Task]:
    """Return the seeded arrivals of both tenants, in time order."""
    rng = random.Random(s.seed)
    req = Requirements(kinds=("cpu",), model_format=None)
    out: list[_Task] = []
    for tenant, rate, (begin, end) in (
        (STEADY, s.steady_rate, (0.0, s.duration_s)),
        (FLOOD, s.flood_rate, s.flood_window),
    ):
        t = begin + rng.expovariate(rate)
        while t < end:
            c = TaskContract(Semantics(s.gflops), req, tenant=tenant, task_class=tenant)
            out.append(_Task(f"{tenant}-{len(out)}", tenant, t, c))
            t += rng.expovariate(rate)
    out.sort(key=lambda task: task.arrival)
    return out


class _Box:
    """The devices of one board, FIFO each, behind the agent's placer and pools."""

    def __init__(self, s: FloodScenario, pooled: bool) -> None:
        devices = devices_from_profiles([s.profile])
        self.placer = Placer(devices, Policy.template("balanced"))
        self.quotas = Pools(s.pools, 0)  # entitlement, whether or not admission enforces it
        self.pools = Pools.for_devices(s.pools if pooled else {}, devices)
        self.queues: list[deque[_Task]] = [deque() for _ in devices]
        self.running: list[_Task | None] = [None] * len(devices)
        self.waiting: dict[str, deque[_Task]] = {STEADY: deque(), FLOOD: deque()}
        self.queued: dict[str, _Task] = {}  # placed, not started (may yield)
        self.events: list[tuple[float, int, int]] = []  # (finish time, seq, device)
        self.seq = itertools.count()
        self.done: list[_Task] = []

    def outstanding(self, tenant: str) -> float:
        """CPU devices held by ``tenant``'s placed and running tasks."""
        n = sum(1 for t in self.queued.values() if t.tenant == tenant)
        return float(n + sum(1 for t in self.running if t is not None and t.tenant == tenant))

    def arrive(self, task: _Task, now: float) -> None:
        task.flood_over = self.outstanding(FLOOD) > self.quotas.quota(FLOOD).cores
        self.waiting[task.tenant].append(task)

    def schedule(self, now: float) -> None:
        """Admit waiting tasks, the heads of each tenant's queue in turn, until none fits."""
        progress = True
        while progress:
            progress = False
            for tenant in (STEADY, FLOOD):
                queue = self.waiting[tenant]
                if queue and self._try(queue[0], now):
                    queue.popleft()
                    progress = True

    def _try(self, task: _Task, now: float) -> bool:
        decision = self.placer.place_one(task.contract)
        if not decision.placed:
            return False
        verdict, decision = admit_placed(
            self.pools, self.placer, task.task_id, decision, self.queued.__contains__
        )
        if not verdict.admit:
            return False
        for victim_id in verdict.yield_ids:  # borrowed, not started: back to waiting
            victim = self.queued.pop(victim_id)
            self.queues[victim.device].remove(victim)
            assert victim.decision is not None
            self.placer.release(victim.decision)
            self.waiting[victim.tenant].appendleft(victim)
        task.decision, task.device = decision, decision.device_indices[0]
        task.attempts += 1
        self.queued[task.task_id] = task
        self.queues[task.device].append(task)
        self._start(task.device, now)
        return True

    def _start(self, device: int, now: float) -> None:
        if self.running[device] is not None or not self.queues[device]:
            return
        task = self.queues[device].popleft()
        self.queued.pop(task.task_id)
        task.start = now
        self.running[device] = task
        assert task.decision is not None
        heapq.heappush(self.events, (now + task.decision.service_s, next(self.seq), device))

    def finish(self, device: int, now: float) -> None:
        task = self.running[device]
        assert task is not None and task.decision is not None
        self.running[device] = None
        self.placer.release(task.decision)
        self.pools.release(task.task_id)
        self.done.append(task)
        self._start(device, now)


def simulate(s: FloodScenario, pooled: bool) -> dict[str, Any]:
    """Run the scenario with pools enforced (or not); return its figures."""
    box = _Box(s, pooled)
    pending = deque(entitle(arrivals(s), s, _service(box.placer, s)))
    while pending or box.events:
        if box.events and (not pending or box.events[0][0] <= pending[0].arrival):
            now, _, device = heapq.heappop(box.events)
            box.finish(device, now)
        else:
            task = pending.popleft()
            now = task.arrival
            box.arrive(task, now)
        box.schedule(now)
    return _figures(s, box)


def _figures(s: FloodScenario, box: _Box) -> dict[str, Any]:
    entitled_wait = _entitled_wait(s, _service(box.placer, s))
    steady = [t for t in box.done if t.tenant == STEADY]
    waits = sorted(t.start - t.arrival for t in steady)
    violations = [
        t for t in steady if t.entitled and t.flood_over and t.start - t.arrival > entitled_wait
    ]
    return {
        "pool_isolation_violations": len(violations),
        "steady_tasks": len(steady),
        "steady_entitled": sum(t.entitled for t in steady),
        "steady_wait_p50_ms": round(_pct(waits, 0.50) * 1e3, 3),
        "steady_wait_p99_ms": round(_pct(waits, 0.99) * 1e3, 3),
        "steady_wait_max_ms": round((waits[-1] if waits else 0.0) * 1e3, 3),
        "entitled_wait_ms": round(entitled_wait * 1e3, 3),
        "flood_tasks_done": sum(1 for t in box.done if t.tenant == FLOOD),
        "yielded": sum(1 for t in box.done if t.attempts > 1),
    }


def _service(placer: Placer, s: FloodScenario) -> float:
    """Return the estimated service time of the scenario's (identical) CPU tasks."""
    probe = TaskContract(Semantics(s.gflops), Requirements(kinds=("cpu",), model_format=None))
    return placer.preview(probe).service_s


def _entitled_wait(s: FloodScenario, service: float) -> float:
    """Every pool's full quota served, plus one task already running, one after another."""
    return sum(spec.cpu_cores for spec in s.pools.values()) * service


def entitle(tasks: list[_Task], s: FloodScenario, service: float) -> list[_Task]:
    """Mark the tasks within their tenant's quota: by arrivals alone, the same in every run.

    A task is entitled when its tenant's tasks that arrived within one entitled wait plus
    one service time before it (itself included) are no more than its ``cpu_cores``: had
    the tenant's work been served as its quota promises, it would hold no more than that.
    """
    span = _entitled_wait(s, service) + service
    recent: dict[str, deque[float]] = {}
    for task in tasks:
        window = recent.setdefault(task.tenant, deque())
        while window and window[0] < task.arrival - span:
            window.popleft()
        window.append(task.arrival)
        quota = s.pools.get(task.tenant, PoolSpec()).cpu_cores
        task.entitled = len(window) <= quota
    return tasks


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


def compare_pools(s: FloodScenario | None = None) -> dict[str, dict[str, Any]]:
    """Return the figures without pools, with pools, and with the flood allowed to borrow."""
    s = s or FloodScenario()
    borrowing = {**s.pools, FLOOD: PoolSpec(cpu_cores=s.pools[FLOOD].cpu_cores, borrow=True)}
    return {
        "without_pools": simulate(s, pooled=False),
        "pools": simulate(s, pooled=True),
        "pools_flood_borrows": simulate(
            FloodScenario(**{**s.__dict__, "pools": borrowing}), pooled=True
        ),
    }
