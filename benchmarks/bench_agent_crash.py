"""Crash benchmark: ``kill -9`` an agent during a 1,000-task burst; the last line is JSON.

    python benchmarks/bench_agent_crash.py [--tasks 1000] [--kill-after 100]

Starts a real agent process (emulated RK3588, loopback), POSTs ``--tasks`` tasks at once
with an Idempotency-Key each, and sends SIGKILL as soon as ``--kill-after`` of them have
been answered 202 (the rest are in flight: read, parsed, being committed or answered).
Restarts the agent on the same data directory and checks that every task id that was
acknowledged exists (``crash_lost_tasks``, target 0), that retrying an acknowledged key
returns the same task, and how long the restarted agent takes to finish the resumed work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
import urllib.request
from pathlib import Path

from bench_agent_harness import FAST_TASK, burst, get, spawn, workdir


def retry(port: int, key: str) -> str:
    """Submit the same body with ``key`` again; return the task id the agent answers with."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/tasks",
        json.dumps(FAST_TASK).encode(),
        {"Content-Type": "application/json", "Idempotency-Key": key},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return str(json.loads(resp.read())["task"]["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--kill-after", type=int, default=100)
    args = parser.parse_args()
    with workdir() as tmp:
        data = Path(tmp) / "data"
        proc, port = spawn(data)
        killed_at: list[float] = []

        def kill(n_acked: int) -> None:
            if n_acked >= args.kill_after and not killed_at:
                os.kill(proc.pid, signal.SIGKILL)
                killed_at.append(time.time())

        acked = asyncio.run(burst(port, args.tasks, "crash", kill))
        proc.wait(timeout=30)
        restart = time.monotonic()
        proc, port = spawn(data)
        try:
            started_s = time.monotonic() - restart
            rows = {r["id"]: r for r in get(port, "/v1/tasks?limit=10000")["tasks"]}
            lost = [a[1] for a in acked if a[1] not in rows]
            same = sum(retry(port, key) == task_id for key, task_id, _, _ in acked[:50])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                states = get(port, "/v1/tasks?limit=10000")["tasks"]
                if all(r["state"] in ("done", "failed") for r in states):
                    break
                time.sleep(0.1)
            resumed_s = time.monotonic() - restart
            done = sum(r["state"] == "done" for r in states)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    result = {
        "tasks": args.tasks,
        "acknowledged": len(acked),
        "stored_after_restart": len(rows),
        "stored_unacknowledged": len(rows) - (len(acked) - len(lost)),
        "crash_lost_tasks": len(lost),
        "retries_same_task": f"{same}/{min(50, len(acked))}",
        "done_after_restart": done,
        "restart_s": round(started_s, 2),
        "all_finished_s": round(resumed_s, 2),
        "target_crash_lost_tasks": 0,
    }
    for key, value in result.items():
        print(f"{key:>24}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
