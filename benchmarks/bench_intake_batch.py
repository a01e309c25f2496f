"""CPU per task of a batch's intake and 202 documents, in process; the last line is JSON.

    python benchmarks/bench_intake_batch.py [--tasks 1000] [--passes 15]

The two parts of a ``POST /v1/tasks:batch`` that grow with the number of *different*
contracts, timed without HTTP, SQLite or a loaded box's scheduling in the figure: the
intake (``Intake.task`` per item: cache lookup or parse, range check, canonical text,
request hash, stored JSON) and the 202 (``api._task_json`` per task, over the rows
``store_batch.new_rows`` builds). Each pass is a fresh ``Intake`` (nothing of the batch seen
before), timed with ``time.process_time``; the figure is the least of ``--passes`` (the
pass the shared machine disturbed least), as µs per task, for a batch of copies of one
contract (``identical``, the burst benchmark's batch) and of ``--tasks`` different ones
(``distinct``: ``bench_agent_harness.distinct_task``). End to end, with HTTP and SQLite:
``bench_agent_burst.py --modes batch,batchdistinct``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench_agent_harness import FAST_TASK, distinct_task

from edge_agent.agent.core import store_batch
from edge_agent.agent.core.intake import Intake, NewTask
from edge_agent.agent.web import api
from edge_agent.http_errors import parse_json_body


def stored_rows(tasks: list[NewTask]) -> list[dict[str, Any]]:
    """Return the rows ``Store.submit`` hands back for new tasks (contract parsed)."""
    rows = []
    for _, row in store_batch.new_rows(tasks, time.time(), {}):
        assert row is not None
        rows.append(row | {"contract": json.loads(row["contract"]), "emulated": False})
    return rows


def one_pass(body: str) -> tuple[float, float]:
    """Return the CPU seconds of the intake and of the 202 documents of one batch."""
    items = parse_json_body(body.encode(), whole=True)["tasks"]  # as the batch route reads it
    intake = Intake([], [])
    start = time.process_time()
    tasks = [intake.task(item, f"key#{i}", f"tasks[{i}]") for i, item in enumerate(items)]
    parsed = time.process_time()
    rows = stored_rows(tasks)
    shapes: dict[Any, str] = {}
    encode = time.process_time()
    text = ", ".join(api._task_json(r, t, True, shapes) for t, r in zip(tasks, rows, strict=True))
    done = time.process_time()
    assert len(json.loads(f"[{text}]")) == len(items)
    return parsed - start, done - encode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=15)
    args = parser.parse_args()
    result: dict[str, Any] = {"tasks": args.tasks, "passes": args.passes}
    for kind in ("identical", "distinct"):
        items = [distinct_task(i) if kind == "distinct" else FAST_TASK for i in range(args.tasks)]
        body = json.dumps({"tasks": items})
        times = [one_pass(body) for _ in range(args.passes)]
        per_task = 1e6 / args.tasks
        result[f"{kind}_intake_us_per_task"] = round(min(t[0] for t in times) * per_task, 1)
        result[f"{kind}_202_us_per_task"] = round(min(t[1] for t in times) * per_task, 1)
    for key, value in result.items():
        print(f"{key:>32}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
