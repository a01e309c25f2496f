"""Where the agent's CPU per task goes AFTER placement, step by step; the last line is JSON.

    python benchmarks/bench_agent_run_steps.py [--tasks 6000] [--wave 16] [--every-ms 5]

Runs ``bench_agent_run.py``'s load once (an in-process agent, emulated RK3588, tasks placed
before the clock starts) with each step of a task's run wrapped in a thread-CPU-time
counter, and prints the CPU microseconds per task of each step, the process total, and the
rest (``event_loop_rest_us``: the event loop, coroutines, tasks, futures and timers between
the steps, the writer thread's transaction and fsync calls outside the two row writers).
A wrapper costs about a microsecond itself (a thread-time read on entry and exit), so the
total is a little above ``bench_agent_run.py``'s. Steps that an older tree lacks are left
out, so the same script measures a before and an after.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_agent_run import one_run

from edge_agent.agent.core import executor, jobs, store_runs

try:  # the emulated run's own module (session 8); an older tree calls ``checked`` from executor
    from edge_agent.agent.core import emulation
except ImportError:
    emulation = None
from edge_agent.agent.core.fleet import Fleet
from edge_agent.agent.web.metrics import AgentMetrics
from edge_agent.placement import Placer
from edge_agent.storage.db import Database
from edge_agent.tasks.contract import TaskContract

#: step name -> (owner, attribute): every call of it counts toward the step
STEPS: dict[str, list[tuple[Any, str]]] = {
    "queue_submit": [(executor.Executor, "submit")],
    "queue_pick": [(executor.Executor, "_pick")],
    "start_record_ask": [(store_runs.RunLog, "started")],
    "start_rows_writer": [(store_runs, "write_started")],
    "placer_started": [(Placer, "started")],
    "emulate_lookups": [(Fleet, "published_ms"), (TaskContract, "precision")],
    "emulate_checked": [(executor, "checked"), (emulation, "checked")],
    "placer_feedback": [(Placer, "feedback"), (Placer, "release")],
    "telemetry_doc": [(jobs.Jobs, "_telemetry")],
    "finish_record_ask": [(store_runs.RunLog, "finished"), (store_runs.RunLog, "finished_then")],
    "finish_rows_writer": [(store_runs, "write_finished")],
    "metrics": [(AgentMetrics, "move"), (AgentMetrics, "served")],
    "writer_transactions": [(Database, "_commit")],
}


def instrument() -> dict[str, float]:
    """Wrap every step's callables; return the step -> CPU seconds counters."""
    spent = dict.fromkeys(STEPS, 0.0)
    depth: dict[str, int] = dict.fromkeys(STEPS, 0)

    def wrap(step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if depth[step]:  # a step calling itself (feedback -> release): counted once
                return fn(*args, **kwargs)
            depth[step] += 1
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[step] += time.thread_time() - start
                depth[step] -= 1

        return counted

    for step, targets in STEPS.items():
        for owner, name in targets:
            fn = getattr(owner, name, None)
            if fn is not None:
                setattr(owner, name, wrap(step, fn))
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=6000)
    parser.add_argument("--wave", type=int, default=16)
    parser.add_argument("--every-ms", type=float, default=5.0)
    args = parser.parse_args()
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    spent = instrument()
    marks: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="hetmesh-bench-steps-") as tmp:
        every_s = args.every_ms / 1e3

        def on_clock(mark: str) -> None:
            marks[mark] = dict(spent)

        totals = run(one_run(Path(tmp) / "data", args.tasks, args.wave, every_s, on_clock))
    n = args.tasks
    window = {k: marks["end"][k] - marks["start"][k] for k in STEPS}
    per_task = {k: round(v / n * 1e6, 1) for k, v in window.items()}
    writer_rest = per_task["writer_transactions"] - (
        per_task["start_rows_writer"] + per_task["finish_rows_writer"]
    )
    steps = {k: v for k, v in per_task.items() if k != "writer_transactions"}
    steps["writer_commit_rest"] = round(writer_rest, 1)
    result: dict[str, Any] = {
        "tasks": n,
        "cpu_us_per_task": round(totals["cpu_us"], 1),
        **{f"{k}_us": v for k, v in steps.items()},
        "event_loop_rest_us": round(totals["cpu_us"] - sum(steps.values()), 1),
    }
    for key, value in result.items():
        print(f"{key:>28}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
