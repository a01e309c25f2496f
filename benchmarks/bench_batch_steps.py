"""Where one ``POST /v1/tasks:batch`` spends its time, step by step; the last line is JSON.

    python benchmarks/bench_batch_steps.py [--tasks 1000] [--repeat 5]

Runs the real agent daemon (``daemon.serve``: aiohttp, its SQLite file in WAL with
``synchronous = FULL``, emulated RK3588) in this process with each step of the batch path
wrapped in a probe that records its wall-clock span and the CPU time of its thread, then
sends ``--repeat`` batches of ``--tasks`` copies of one contract (``copies``, the burst
benchmark's ``batch``) and as many of different contracts (``distinct``, its
``batchdistinct``; each batch its own, so the intake has seen none) over a loopback socket,
one at a time, each once the one before has run.
Per mode it prints, as the median over the batches:

- ``MODE_e2e_ms``: the send to the last ``placed_at`` (what ``batch_1000_p99_ms`` reads);
- ``MODE_cpu_us``: per step, the CPU microseconds per task of the step's own thread;
- ``MODE_at_ms``: per step, when it started and ended, in ms after the send (the critical
  path: a gap between one step's end and the next one's start is a thread hop or a wait).

The client shares this process, but none of its work is inside a probe; a probe costs about
a microsecond (two clock reads), so steps called once per task (``intake``,
``decision_rows``, ``docs_202``) read a little high. Steps an older tree lacks are left out,
so the same script measures a before and an after.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import inspect
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_agent_harness import batch, busy, keepalive, placed_at

from edge_agent.agent import daemon, service
from edge_agent.agent.config.settings import AgentConfig
from edge_agent.agent.core import intake, outbox, scheduler, store_batch
from edge_agent.agent.web import api
from edge_agent.placement import tiers
from edge_agent.storage.db import Database

#: step -> (owner, attribute) callables whose calls count toward the step, in path order
STEPS: dict[str, list[tuple[Any, str]]] = {
    "request_json": [(api, "_json")],  # body read + JSON parse (wall only: it awaits)
    "json_parse": [(api, "parse_json_body")],  # whole numbers read by the parser itself
    "intake": [(intake.Intake, "task"), (intake.Intake, "tasks")],
    "accept_rows": [(store_batch, "existing_keys"), (store_batch, "new_rows")],
    "accept_op": [],  # the Store.submit op on the writer thread (probed through write)
    "accept_commit": [],  # its transaction: the op, savepoints and the commit (fsync)
    "queue_for_placement": [
        (service, "waiting_from_row"),
        (scheduler.Scheduler, "add_many"),
        (scheduler.Scheduler, "add"),
    ],
    "next_batch": [(scheduler.Scheduler, "_next_batch")],
    "kernel": [(tiers, "place")],
    "decision_rows": [(scheduler, "decision_row"), (scheduler, "decision_rows")],
    "placed_queued": [],  # the scheduler queues the placements' write (a moment: wall only)
    "record_placed": [(store_batch, "record_placed")],
    "outbox_rows": [(outbox, "append_many")],
    "placed_commit": [],  # the placements' transaction, commit included
    "docs_202": [(api, "_task_json")],
    "gc": [],  # the garbage collector's pauses, any thread (gc.callbacks)
}

#: (owner, name) -> the callable that supersedes it where the tree has both (it calls that
#: one: probing both would count its time twice)
SUPERSEDED = {(scheduler.Scheduler, "add"): "add_many"}

Event = tuple[str, float, float, float]  # step, wall start, wall end, thread CPU seconds


def steps_unprobed() -> list[str]:
    """Return the steps none of whose callables this tree has (a step may name an older
    tree's callable beside the current one; a step with none found would time nothing)."""
    return [
        step
        for step, targets in STEPS.items()
        if targets and all(getattr(owner, name, None) is None for owner, name in targets)
    ]


def instrument(events: list[Event]) -> None:
    """Wrap every step's callables so that each call appends an ``Event``."""

    def wrap(step: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                start = time.time()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    events.append((step, start, time.time(), 0.0))

            return timed_async

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start, cpu = time.time(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                events.append((step, start, time.time(), time.thread_time() - cpu))

        return timed

    for step, targets in STEPS.items():
        for owner, name in targets:
            if hasattr(owner, SUPERSEDED.get((owner, name), "")):
                continue
            fn = getattr(owner, name, None)
            if fn is not None:
                setattr(owner, name, wrap(step, fn))

    started: list[tuple[float, float]] = []

    def collecting(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append((time.time(), time.thread_time()))
        elif started:
            start, cpu = started.pop()
            events.append(("gc", start, time.time(), time.thread_time() - cpu))

    gc.callbacks.append(collecting)
    write, commit = Database.write, Database._commit
    ops = {"Store.submit.<locals>.op": "accept_op"}

    def probed_write(self: Database, op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        name = getattr(op, "__qualname__", "")
        if name == "Store.placed.<locals>.op":
            now = time.time()
            events.append(("placed_queued", now, now, 0.0))
        step = ops.get(name)
        return write(self, op if step is None else wrap(step, op), *args, **kwargs)

    def probed_commit(self: Database, db: Any, group: list[Any]) -> None:
        names = {getattr(op, "__qualname__", "") for op, *_ in group}
        if "Store.submit.<locals>.op" in names:
            step = "accept_commit"
        elif "Store.placed.<locals>.op" in names:
            step = "placed_commit"
        else:
            commit(self, db, group)
            return
        wrap(step, commit)(self, db, group)

    Database.write = probed_write  # type: ignore[method-assign]
    Database._commit = probed_commit  # type: ignore[method-assign]


def quiesce(data_dir: Path, timeout_s: float = 60) -> None:
    """Wait until the agent has run every task it holds (so a batch does not pay for runs)."""
    deadline = time.monotonic() + timeout_s
    while busy(data_dir) and time.monotonic() < deadline:
        time.sleep(0.05)


async def one_batch(
    port: int, data_dir: Path, n: int, salt: int | None, events: list[Event]
) -> dict[str, Any]:
    """Send one batch (``salt``: of different contracts, ``distinct_task``'s; None: copies);
    return its end-to-end time and per-step CPU and span."""
    await asyncio.to_thread(quiesce, data_dir)
    await asyncio.sleep(0.2)
    events.clear()
    cpu = time.process_time()
    acked = await batch(port, n, salt is not None, salt or 0)
    sent = acked[0][1]
    wanted = {task_id for task_id, _ in acked}
    deadline = time.monotonic() + 120
    while True:
        placed = await asyncio.to_thread(placed_at, data_dir)
        stamps = [placed[t] for t in wanted if placed.get(t) is not None]
        if len(stamps) == len(wanted):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(wanted) - len(stamps)} tasks not placed after 120 s")
        await asyncio.sleep(0.02)
    cpu = time.process_time() - cpu
    end = max(s for s in stamps if s is not None)
    steps: dict[str, list[float]] = {}
    for step, start, stop, used in list(events):
        if start < sent or start > end + 0.5:
            continue
        span = steps.setdefault(step, [start, stop, 0.0])
        span[0], span[1], span[2] = min(span[0], start), max(span[1], stop), span[2] + used
    pauses = [(stop - start) for step, start, stop, _ in list(events) if step == "gc"]
    before = [
        min(stop, end) - start
        for step, start, stop, _ in list(events)
        if step == "gc" and sent <= start < end
    ]
    return {
        "e2e_ms": (end - sent) * 1e3,
        "gc_ms": sum(pauses) * 1e3,  # the collector's pauses from the send on
        "gc_before_placed_ms": sum(before) * 1e3,  # of which before the last placed_at
        "process_cpu_us": cpu / n * 1e6,
        "cpu_us": {k: v[2] / n * 1e6 for k, v in steps.items() if v[2] > 0},
        "at_ms": {k: ((v[0] - sent) * 1e3, (v[1] - sent) * 1e3) for k, v in steps.items()},
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the per-key medians of several batches' figures."""
    steps = [s for s in STEPS if any(s in r["at_ms"] for r in runs)]
    return {
        "e2e_ms": round(statistics.median(r["e2e_ms"] for r in runs), 1),
        "e2e_ms_each": [round(r["e2e_ms"], 1) for r in runs],
        "process_cpu_us": round(statistics.median(r["process_cpu_us"] for r in runs), 1),
        "gc_ms": round(statistics.median(r["gc_ms"] for r in runs), 1),
        "gc_before_placed_ms": round(statistics.median(r["gc_before_placed_ms"] for r in runs), 1),
        "cpu_us": {
            s: round(statistics.median(r["cpu_us"].get(s, 0.0) for r in runs), 1)
            for s in steps
            if any(s in r["cpu_us"] for r in runs)
        },
        "at_ms": {
            s: [
                round(statistics.median(r["at_ms"][s][i] for r in runs if s in r["at_ms"]), 1)
                for i in (0, 1)
            ]
            for s in steps
        },
    }


async def run(data_dir: Path, n: int, repeat: int, events: list[Event]) -> dict[str, Any]:
    """Start the daemon here, warm it, and measure ``repeat`` batches of each mode."""
    config = AgentConfig(data_dir=data_dir, port=0, profile="rk3588", host="127.0.0.1")
    stop = asyncio.Event()
    settle = getattr(daemon, "settle_gc", None)  # what ``daemon.run`` does first (if it does)
    if settle is not None:
        settle()
    server = asyncio.create_task(daemon.serve(config, stop))
    while not config.state_path.exists():
        await asyncio.sleep(0.02)
    port = int(json.loads(config.state_path.read_text())["port"])
    await keepalive(port, 16, 4)  # warm: code paths, connections, pages
    for salt in (None, 0):  # salt 0: contracts no measured batch sends
        await batch(port, n, salt is not None)
        await asyncio.to_thread(quiesce, data_dir)
    out: dict[str, Any] = {"tasks": n, "batches_per_mode": repeat}
    try:
        for mode in ("copies", "distinct"):
            runs = [
                await one_batch(port, data_dir, n, None if mode == "copies" else k + 1, events)
                for k in range(repeat)
            ]
            for key, value in medians(runs).items():
                out[f"{mode}_{key}"] = value
    finally:
        stop.set()
        await server
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    events: list[Event] = []
    instrument(events)
    try:
        import uvloop

        runner: Callable[..., Any] = uvloop.run
    except ImportError:
        runner = asyncio.run
    with tempfile.TemporaryDirectory(prefix="hetmesh-bench-batch-") as tmp:
        result = runner(run(Path(tmp) / "data", args.tasks, args.repeat, events))
    for mode in ("copies", "distinct"):
        print(f"{mode}: send -> last placed_at {result[f'{mode}_e2e_ms']} ms (median)")
        cpu, at = result[f"{mode}_cpu_us"], result[f"{mode}_at_ms"]
        for step, (start, end) in at.items():
            used = f"{cpu[step]:7.1f} us/task" if step in cpu else " " * 15
            print(f"  {step:>20}: {used}  {start:7.1f} .. {end:7.1f} ms")
    result["steps_unprobed"] = steps_unprobed()  # timed as nothing: say which
    print(json.dumps(result))


if __name__ == "__main__":
    main()
