"""The SQLite writer's CPU per task for a run's row writes; the last line is JSON.

    python benchmarks/bench_run_rows.py [--tasks 3000] [--group 50] [--repeat 4]

A store file (WAL, ``synchronous = FULL``, as the agent's writer opens it) holds ``--tasks``
placed tasks; their runs' rows are then written ``--group`` tasks a transaction, the three
ways ``store_runs`` can write them, alternating, each on a fresh file:

- ``two_commits``: a group's starts (placed -> running) in one transaction, its finishes
  (result row, telemetry row, outbox record) in the next: a tiny task's run when its finish
  waits for its start's commit;
- ``one_commit``: both in one transaction (a start and a finish that share a commit);
- ``taken_along``: one write per task, placed -> done with its ``started_at``
  (``RunLog.finished`` taking the start along).

The figures are this thread's CPU time per task (the statements, the commit and its fsync),
the median of ``--repeat`` files each; no event loop, no other thread, so it is the writer's
share of a run alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from edge_agent.agent.core import store_runs
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.store import Store
from edge_agent.agent.core.store_runs import Finish
from edge_agent.placement import Semantics, TaskContract
from edge_agent.storage.db import _connect

#: a benchmark task's telemetry sample and emulated result (as ``Jobs`` builds them)
SAMPLE: dict[str, Any] = {
    "kind": "task",
    "device": "rk3588/cpu",
    "task_class": "bench",
    "latency_s": 2.6e-5,
    "estimate_s": 2.6e-5,
    "energy_j": None,
    "emulated": 1,
    "g_per_kwh": 400.0,
    "carbon_g": 0.0,
}
RESULT: dict[str, Any] = {
    "emulated": True,
    "service_source": "roofline estimate",
    "latency_s": 2.6e-5,
    "wall_s": 5e-5,
    "note": "opaque task (no model, no command): service time emulated",
}
WAYS = ("two_commits", "one_commit", "taken_along")


async def placed_tasks(path: Path, n: int) -> list[str]:
    """Store ``n`` placed tasks in a new file at ``path``; return their ids."""
    store = Store(path)
    await asyncio.to_thread(store.open)
    contract = TaskContract(Semantics(0.001), task_class="bench")
    rows = [r for r, _ in await store.submit([NewTask(contract, "bench")] * n)]
    decision = {"placed": 1, "device": "rk3588/cpu", "summary": "rk3588/cpu"}
    await store.placed([(r["id"], decision, False) for r in rows])
    await asyncio.to_thread(store.close)
    return [r["id"] for r in rows]


def one_file(way: str, n: int, group: int) -> float:
    """Write ``n`` runs' rows ``way`` on a fresh file; return CPU microseconds per task."""
    with tempfile.TemporaryDirectory(prefix="hetmesh-bench-rows-") as tmp:
        path = Path(tmp) / "agent.db"
        ids = asyncio.run(placed_tasks(path, n))
        db = _connect(path, readonly=False)
        try:
            start = time.thread_time()
            for i in range(0, n, group):
                part = ids[i : i + group]
                asked = time.time()
                if way != "taken_along":
                    db.execute("BEGIN")
                    store_runs.write_started(db, [(task_id, asked) for task_id in part])
                    if way == "two_commits":
                        db.execute("COMMIT")
                        db.execute("BEGIN")
                else:
                    db.execute("BEGIN")
                along = asked if way == "taken_along" else None
                finishes = [
                    Finish(task_id, "done", RESULT, None, SAMPLE, started_at=along)
                    for task_id in part
                ]
                if store_runs.write_finished(db, finishes, 100_000) != [True] * len(part):
                    raise RuntimeError(f"{way}: not every task moved")
                db.execute("COMMIT")
            spent = time.thread_time() - start
        finally:
            db.close()
    return spent / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--group", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(args.repeat):  # alternating, so a change of load hits every way alike
        for way in WAYS:
            runs[way].append(one_file(way, args.tasks, args.group))
    result: dict[str, Any] = {"tasks": args.tasks, "group": args.group, "files": args.repeat}
    for way in WAYS:
        result[f"{way}_cpu_us_per_task"] = round(statistics.median(runs[way]), 1)
        result[f"{way}_each"] = [round(v, 1) for v in runs[way]]
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
