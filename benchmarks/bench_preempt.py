"""Preemption's cost for a batch of late urgent tasks behind a queue; the last line is JSON.

    python benchmarks/bench_preempt.py [--sizes 100,200,400]

For each size N: N different low-priority contracts are queued (placed, not started) on
the emulated RK3588 (CPU + NPU), then a batch of N different contracts of priority 1-2,
each with a deadline its share of the queue makes it miss, is placed with one kernel call
and handed to the scheduler's preemption step (``Scheduler._preempt``, its real call site).
Printed per size: ``tries`` (``place_one`` calls the preemption step made, the fallback
placements of the tasks it gave up on not counted), ``late`` (tasks that wanted preemption),
``preempted_tasks`` (those it placed on time), ``skipped`` (not tried: the pass's budget was
spent) and ``seconds`` (wall time of the step, one sample: compare sizes within a run).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from edge_agent.agent.core import preempt, scheduler
from edge_agent.agent.core.executor import Job
from edge_agent.agent.core.fleet import build_fleet
from edge_agent.agent.core.scheduler import Scheduler
from edge_agent.agent.core.store import Store
from edge_agent.agent.core.waiting import Waiting
from edge_agent.agent.web.metrics import AgentMetrics
from edge_agent.placement import Placer, Requirements, Semantics, TaskContract, tiers


class Queue:
    """The scheduler's Dispatcher holding placed, never started jobs."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}

    def dispatch(self, job: Job) -> None:
        self.jobs[job.task_id] = job

    def busy(self) -> int:
        return len(self.jobs)

    def queued(self) -> list[Job]:
        return [j for j in self.jobs.values() if not j.cancelled]

    def withdraw(self, job: Job) -> None:
        job.cancelled = True
        self.jobs.pop(job.task_id, None)


def waiting(task_id: str, contract: TaskContract) -> Waiting:
    return Waiting(task_id, contract, None, 0.0, math.inf, "queued")


def step(n: int, data_dir: Path) -> dict[str, Any]:
    """Queue ``n`` low-priority tasks, then preempt for a batch of ``n`` late ones."""
    placer = Placer(build_fleet("rk3588").devices)
    queue = Queue()
    for i in range(n):
        low = TaskContract(Semantics(5.0 + i * 1e-3), priority=0)
        queue.dispatch(Job(waiting(f"low{i}", low), placer.place_one(low)))
    service = next(iter(queue.jobs.values())).decision.service_s
    urgent = [
        TaskContract(
            Semantics(0.05 + i * 1e-5),
            Requirements(deadline_s=(2 + i % 7) * service),
            priority=1 + i % 2,
        )
        for i in range(n)
    ]
    batch = [waiting(f"urgent{i}", c) for i, c in enumerate(urgent)]
    metrics = AgentMetrics()
    sched = Scheduler(placer, Store(data_dir / "unused.db"), metrics, queue, batch_size=n)
    decisions = tiers.place(placer, urgent)
    late = sum(preempt.wants_preemption(d) for d in decisions)
    counts = {"tries": 0, "found": 0}
    place_one, preempt_for = tiers.place_one, preempt.preempt_for

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts["tries"] += 1
        return place_one(*args, **kwargs)

    def preempting(*args: Any, **kwargs: Any) -> Any:  # counts only preemption's calls
        tiers.place_one = counted
        try:
            found = preempt_for(*args, **kwargs)
        finally:
            tiers.place_one = place_one
        counts["found"] += found is not None
        return found

    scheduler.preempt_for = preempting  # type: ignore[attr-defined]  # the name it calls
    try:
        start = time.perf_counter()
        victims = sched._preempt(batch, urgent, decisions)
        seconds = time.perf_counter() - start
    finally:
        scheduler.preempt_for = preempt_for  # type: ignore[attr-defined]
    skipped = metrics.registry.get_sample_value("hetmesh_agent_preemptions_skipped_total")
    return {
        "n": n,
        "late": late,
        "tries": counts["tries"],
        "preempted_tasks": counts["found"],
        "victims": len(victims),
        "skipped": int(skipped or 0),
        "seconds": round(seconds, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,200,400")
    args = parser.parse_args()
    steps = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            steps.append(step(n, Path(tmp)))
            print(steps[-1], flush=True)
    print(json.dumps({"steps": steps}))


if __name__ == "__main__":
    main()
