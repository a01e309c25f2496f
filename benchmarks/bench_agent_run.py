"""The agent's CPU per task AFTER placement (executor, start, run, finish); last line JSON.

    python benchmarks/bench_agent_run.py [--tasks 4000] [--wave 16] [--every-ms 5] [--repeat 3]

An in-process agent (``service.Agent``, emulated RK3588, its real SQLite file, no HTTP) gets
``--tasks`` tiny tasks (the burst benchmark's ``FAST_TASK``) stored and placed BEFORE the
clock starts; then they are handed to its executor ``--wave`` at a time every
``--every-ms`` (about the arrival rate of issue 15's 3,000 tasks/s) and the process's CPU
time (every thread: the event loop and the SQLite writer) is read from the first hand-over
until every outcome is committed. What that covers per task: the device queue's pick, the
start (its group-committed row, the placer's start), the emulated run, the finish (placer
feedback, telemetry, the group-committed result row, its telemetry row and outbox record,
the metrics). ``run_loop_cpu_us_per_task`` is the event loop's thread's share of it,
``run_writer_cpu_us_per_task`` the rest (the SQLite writer thread, mostly). Intake and
placement are not in it (``bench_agent_burst.py`` measures the whole
path over HTTP). The figure is ``run_cpu_us_per_task``: the median of ``--repeat`` runs, each
with its own agent; CPU time, not wall time, so a loaded machine disturbs it little.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_agent_harness import FAST_TASK

from edge_agent.agent.config.settings import AgentConfig
from edge_agent.agent.core.executor import Job
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.scheduler import decision_row
from edge_agent.agent.core.waiting import waiting_from_row
from edge_agent.agent.service import Agent
from edge_agent.placement import TaskContract


def _done_count(metrics: Any) -> Callable[[], float]:
    """Return a reader of the tasks-by-state gauge's ``done`` (an older tree: its Gauge)."""
    if hasattr(metrics, "tasks_in"):
        return lambda: metrics.tasks_in("done")
    child = metrics.tasks.labels("done")
    return lambda: child._value.get()


async def one_run(
    data_dir: Path,
    n: int,
    wave: int,
    every_s: float,
    on_clock: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Run ``n`` placed tasks through a fresh agent; return CPU and wall time per task.

    ``on_clock`` is called with "start" and "end" as the clock starts and stops.
    """
    config = AgentConfig(data_dir=data_dir, port=0, profile="rk3588", telemetry_interval_s=0.0)
    agent = Agent(config)
    await agent.start()
    try:
        contract = TaskContract.from_dict(FAST_TASK)
        stored = await agent.store.submit([NewTask(contract, "bench")] * n)
        jobs: list[Job] = []
        for row, _ in stored:
            decision = agent.placer.place_one(contract)
            jobs.append(Job(waiting_from_row(row, contract), decision))
        await agent.store.placed([(j.task_id, decision_row(j.decision), True) for j in jobs])
        agent.metrics.move("queued", "placed", n)
        if on_clock is not None:
            on_clock("start")
        cpu, loop_cpu, wall = time.process_time(), time.thread_time(), time.perf_counter()
        for i in range(0, n, wave):
            for job in jobs[i : i + wave]:
                agent.jobs.dispatch(job)
            await asyncio.sleep(every_s)
        done = _done_count(agent.metrics)  # moved once a finish has committed
        deadline = time.monotonic() + 120
        while done() < n and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        loop_cpu = time.thread_time() - loop_cpu  # this coroutine runs on the loop's thread
        if on_clock is not None:
            on_clock("end")
        counts = await agent.store.counts()
    finally:
        await agent.stop()
    if counts.get("done") != n:
        raise RuntimeError(f"not every task finished: {counts}")
    return {"cpu_us": cpu / n * 1e6, "loop_cpu_us": loop_cpu / n * 1e6, "wall_us": wall / n * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--wave", type=int, default=16)
    parser.add_argument("--every-ms", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:  # the event loop the daemon runs on (daemon.py), where installed
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    runs: list[dict[str, float]] = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="hetmesh-bench-run-") as tmp:
            every_s = args.every_ms / 1e3
            runs.append(run(one_run(Path(tmp) / "data", args.tasks, args.wave, every_s)))
    result: dict[str, Any] = {
        "tasks": args.tasks,
        "wave": args.wave,
        "every_ms": args.every_ms,
        "runs": args.repeat,
        "run_cpu_us_per_task": round(statistics.median(r["cpu_us"] for r in runs), 1),
        "run_cpu_us_per_task_each": [round(r["cpu_us"], 1) for r in runs],
        # the event loop's thread alone (the rest: the SQLite writer thread, mostly)
        "run_loop_cpu_us_per_task": round(statistics.median(r["loop_cpu_us"] for r in runs), 1),
        "run_writer_cpu_us_per_task": round(
            statistics.median(r["cpu_us"] - r["loop_cpu_us"] for r in runs), 1
        ),
        "run_wall_us_per_task": round(statistics.median(r["wall_us"] for r in runs), 1),
    }
    for key, value in result.items():
        print(f"{key:>28}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
