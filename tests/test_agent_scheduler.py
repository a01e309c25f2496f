"""Scheduling: weighted tenant fair share and preemption of queued lower-priority work."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core import preempt
from edge_agent.agent.core.executor import Job
from edge_agent.agent.core.fairshare import FairQueue
from edge_agent.agent.core.fleet import build_fleet
from edge_agent.agent.core.preempt import preempt_for
from edge_agent.agent.core.scheduler import Scheduler
from edge_agent.agent.core.store import Store
from edge_agent.agent.core.waiting import Waiting
from edge_agent.agent.web.api import make_app
from edge_agent.agent.web.metrics import AgentMetrics
from edge_agent.placement import Placer, Policy, Requirements, Semantics, TaskContract, tiers
from tests.support.jobs import placed_job

#: ~65 ms on the emulated RK3588 CPU (its roofline: no published latency for an opaque task).
CPU_TASK = {"semantics": {"gflops": 2.5}, "requirements": {"kinds": ["cpu"], "model_format": None}}


def contract(priority: int = 0, tenant: str = "default", deadline_s: float = 0.0) -> TaskContract:
    req = Requirements(kinds=("cpu",), model_format=None, deadline_s=deadline_s)
    return TaskContract(Semantics(5.0), req, priority=priority, tenant=tenant)


def test_fair_queue_weights_priority_and_no_banked_credit() -> None:
    alive: set[str] = set()
    q = FairQueue(alive.__contains__, {"a": 3, "b": 1, "zero": 0})
    for i in range(40):
        for tenant in ("a", "b"):
            alive.add(f"{tenant}{i}")
            q.push(f"{tenant}{i}", tenant, 0, math.inf)
    first = [q.pop() or "" for _ in range(40)]
    assert sum(t.startswith("a") for t in first) == 30  # 3:1
    alive.add("urgent")
    q.push("urgent", "b", 5, math.inf)
    assert q.pop() == "urgent"  # priority before fairness
    alive.discard("a35")  # cancelled: skipped
    rest = [q.pop() for _ in range(39)]
    assert "a35" not in rest and None not in rest and q.pop() is None
    # a tenant idle while others were served starts level with them, not ahead by its idle time
    alive.update({"c0", "c1", "a100", "a101"})
    q.push("a100", "a", 0, math.inf)
    q.push("a101", "a", 0, math.inf)
    q.push("c0", "c", 0, math.inf)
    q.push("c1", "c", 0, math.inf)
    assert q.served()["c"] == q.served()["a"] < q.served()["b"]
    assert q.share("zero") > 0 and q.share("unnamed") == 1.0


def test_batch_push_and_pop_take_the_order_single_pushes_and_pops_take() -> None:
    """``push_many`` and ``pop_many`` (a batch's one queue update and one take) give the same
    order and the same weighted service as a push and a pop per task, whether one tenant or
    several wait, with cancelled entries, re-activated tenants and batches short and long."""
    rng = random.Random(7)
    alive: set[str] = set()
    one = FairQueue(alive.__contains__, {"a": 3, "b": 1})
    many = FairQueue(alive.__contains__, {"a": 3, "b": 1})
    taken_one: list[str] = []
    taken_many: list[str] = []
    n = 0
    for tenants in (("a",), ("a", "b", "c"), ("b",), ("c", "a"), ("a",)):
        for size in (1, 40, 700):
            entries = []
            for _ in range(size):
                n += 1
                deadline = rng.choice([math.inf, rng.uniform(0, 10)])
                entries.append((f"t{n}", rng.choice(tenants), rng.randint(0, 2), deadline))
                alive.add(f"t{n}")
            for entry in entries:
                one.push(*entry)
            many.push_many(entries)
            for task_id, *_ in entries[::7]:  # cancelled while waiting
                alive.discard(task_id)
            want = rng.randint(1, size + 5)
            got = [one.pop() for _ in range(want)]
            taken_one += [t for t in got if t is not None]
            taken_many += many.pop_many(want)
            assert taken_many == taken_one
            assert many.served() == one.served()
    assert len(set(taken_one)) == len(taken_one) > 1000


@pytest.mark.asyncio
async def test_scheduler_batches_follow_tenant_shares(tmp_path: Path) -> None:
    fleet = build_fleet("rk3588")
    rules = {**Policy.template("balanced").rules, "tenant_shares": {"vision": 3, "batch": 1}}
    placer = Placer(fleet.devices, Policy.from_dict({"template": "balanced", "rules": rules}))
    store = Store(tmp_path / "a.db")
    await asyncio.to_thread(store.open)
    jobs: list[Job] = []

    class Collect:  # the scheduler's Dispatcher: keeps the jobs, never busy, none preemptible
        def dispatch(self, job: Job) -> None:
            jobs.append(job)

        def busy(self) -> int:
            return 0

        def queued(self) -> list[Job]:
            return []

        def withdraw(self, job: Job) -> None:
            raise AssertionError("nothing is preempted here")

    sched = Scheduler(placer, store, AgentMetrics(), Collect(), batch_size=4)
    rows = await store.submit([_new(contract(tenant=t)) for t in ["batch"] * 8 + ["vision"] * 8])
    for row, _ in rows:
        sched.add(_waiting(row))
    runner = asyncio.create_task(sched.run())
    try:
        async with asyncio.timeout(5):
            while len(jobs) < 16:
                await asyncio.sleep(0.001)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await asyncio.to_thread(store.close)
    tenants = [job.decision.task.tenant for job in jobs]
    assert tenants[:4].count("vision") == 3 and tenants[:8].count("vision") == 6


def test_preempt_for_takes_only_what_the_deadline_needs_and_restores_otherwise() -> None:
    fleet = build_fleet("rk3588")
    placer = Placer(fleet.devices)
    low = [placer.place_one(contract()) for _ in range(8)]
    assert all(d.placed for d in low)
    queued = [placed_job(f"low{i}", d) for i, d in enumerate(low)]
    service = low[0].service_s
    before = {d: placer.live(d) for d in placer.device_ids}
    urgent = contract(priority=10, deadline_s=3.5 * service)
    assert placer.preview(urgent).late  # 8 tasks ahead: it would miss its deadline
    assert {d: placer.live(d) for d in placer.device_ids} == before
    found = preempt_for(placer, urgent, queued)
    assert found is not None
    decision, victims = found
    assert decision.placed and decision.latency_s <= 3.5 * service
    assert 4 <= len(victims) <= 6  # enough to fit, not the whole queue
    assert [v.task_id for v in victims] == [f"low{i}" for i in range(7, 7 - len(victims), -1)]
    # equal priority is never preempted; a failed attempt leaves every device as it was
    placer2 = Placer(fleet.devices)
    same = [placed_job(f"s{i}", placer2.place_one(contract(10))) for i in range(8)]
    snapshot = {d: placer2.live(d) for d in placer2.device_ids}
    assert preempt_for(placer2, urgent, same) is None
    assert {d: placer2.live(d) for d in placer2.device_ids} == snapshot


class Tried:
    """Counts preemption's placement tries: ``preempt``'s view of ``tiers``, counting."""

    def __init__(self) -> None:
        self.n = 0
        self.rules_of = tiers.rules_of

    def place_one(self, *args: Any, **kwargs: Any) -> Any:
        self.n += 1
        return tiers.place_one(*args, **kwargs)


def test_preemption_bisects_for_the_fewest_victims(monkeypatch: pytest.MonkeyPatch) -> None:
    """64 queued jobs: the fewest that are enough, found in 2 + log2(64) tries, not one a job."""
    monkeypatch.setattr(preempt, "tiers", tried := Tried())
    placers = [Placer(build_fleet("rk3588").devices) for _ in range(2)]  # and its twin
    queued = [placed_job(f"low{i}", placers[0].place_one(contract())) for i in range(64)]
    for job in queued:
        placers[1].place_one(job.decision.task)
    service = queued[0].decision.service_s
    urgent = contract(priority=10, deadline_s=20.5 * service)
    found = preempt_for(placers[0], urgent, queued)
    assert found is not None
    decision, victims = found
    assert decision.placed and not decision.late
    on_device = [j for j in queued if j.decision.device_id == decision.device_id]
    assert [v.task_id for v in victims] == [j.task_id for j in on_device[::-1][: len(victims)]]
    assert 1 < len(victims) < len(on_device) - 1
    for victim in victims[:-1]:  # one fewer is not enough
        placers[1].release(victim.decision)
    assert placers[1].preview(urgent).late
    assert tried.n <= 2 + math.ceil(math.log2(len(on_device)))  # a linear scan: len(victims)


@pytest.mark.parametrize("tries_per_pass", [preempt.TRIES_PER_PASS, 50])
def test_a_batch_of_hopeless_urgent_tasks_costs_bounded_tries(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tries_per_pass: int
) -> None:
    """The reported denial of service, scaled down: 300 late urgent tasks behind 300 queued
    lower-priority jobs (each different) once cost up to 256 tries a task (76,800 here, and
    minutes of CPU at 1,000); now at most one a device for a task hopeless there, and never
    more than the pass's budget, the tasks past it counted as skipped."""
    monkeypatch.setattr(preempt, "TRIES_PER_PASS", tries_per_pass)
    placer = Placer(build_fleet("rk3588").devices)
    queued = {}
    for i in range(300):
        low = contract(priority=0, deadline_s=0.0)
        low = TaskContract(Semantics(5.0 + i * 1e-3), low.requirements)
        queued[f"low{i}"] = placed_job(f"low{i}", placer.place_one(low))
    service = queued["low0"].decision.service_s
    urgent = [
        TaskContract(
            Semantics(5.0 + i * 1e-3),
            Requirements(kinds=("cpu",), model_format=None, deadline_s=(2 + i % 7) * service),
            priority=1 + i % 2,
        )
        for i in range(300)
    ]

    class Queue:  # the scheduler's Dispatcher: the queued jobs, none started
        def dispatch(self, job: Job) -> None:
            raise AssertionError("only the preemption step runs here")

        def busy(self) -> int:
            return len(queued)

        def queued(self) -> list[Job]:
            return list(queued.values())

        def withdraw(self, job: Job) -> None:
            raise AssertionError("nothing can be preempted for these")

    metrics = AgentMetrics()
    sched = Scheduler(placer, Store(tmp_path / "unused.db"), metrics, Queue(), batch_size=300)
    decisions = tiers.place(placer, urgent)
    late = sum(d.late for d in decisions)
    assert late == 300  # each is behind the queue and the batch's other tasks
    monkeypatch.setattr(preempt, "tiers", tried := Tried())
    batch = [Waiting(f"u{i}", c, None, 0.0, math.inf, "queued") for i, c in enumerate(urgent)]
    assert sched._preempt(batch, urgent, decisions) == []
    assert all(d.placed and d.late for d in decisions)  # placed on the earliest finish
    devices = len({j.decision.device_id for j in queued.values()})
    assert tried.n <= min(late * devices, tries_per_pass)
    skipped = metrics.registry.get_sample_value("hetmesh_agent_preemptions_skipped_total")
    if tries_per_pass >= late * devices:
        assert skipped == 0
    else:  # every task tried costs at least one try: the others were skipped
        assert tried.n == tries_per_pass and skipped is not None
        assert late - tries_per_pass <= skipped < late


@pytest.mark.asyncio
async def test_urgent_task_preempts_queued_work_end_to_end(
    aiohttp_client: Any, emulated_agent: Callable[..., AgentConfig]
) -> None:
    config = emulated_agent()
    client = await aiohttp_client(make_app(config))
    resp = await client.post("/v1/tasks:batch", json={"tasks": [CPU_TASK] * 8})
    assert resp.status == 202
    lows = [t["id"] for t in (await resp.json())["tasks"]]
    urgent_body = {**CPU_TASK, "priority": 10}
    urgent_body["requirements"] = {**CPU_TASK["requirements"], "deadline_s": 0.25}
    resp = await client.post("/v1/tasks", json=urgent_body)
    assert resp.status == 202
    urgent = (await resp.json())["task"]["id"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        tasks = {t["id"]: t for t in (await (await client.get("/v1/tasks")).json())["tasks"]}
        if all(tasks[i]["state"] in ("done", "failed") for i in [*lows, urgent]):
            break
        await asyncio.sleep(0.01)
    assert {tasks[i]["state"] for i in [*lows, urgent]} == {"done"}, [
        (tasks[i]["error"], tasks[i]["state"]) for i in [*lows, urgent]
    ][-3:]
    assert any(tasks[i]["attempts"] == 2 for i in lows)  # preempted, placed again
    assert tasks[urgent]["finished_at"] < max(tasks[i]["finished_at"] for i in lows)
    metrics = await (await client.get("/metrics")).text()
    line = next(x for x in metrics.splitlines() if x.startswith("hetmesh_agent_preemptions_total"))
    assert float(line.split()[1]) >= 1


def _new(c: TaskContract) -> Any:
    from edge_agent.agent.core.intake import NewTask

    return NewTask(c, "hash")


def _waiting(row: dict[str, Any]) -> Waiting:
    from edge_agent.agent.core.waiting import waiting_from_row

    return waiting_from_row(row)
