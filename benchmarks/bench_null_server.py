"""The floor the agent's intake is measured against (not a benchmark): aiohttp + SQLite only.

    python benchmarks/bench_null_server.py DATA_DIR

A null task server: ``POST /v1/tasks`` parses the JSON body and inserts one row in a SQLite
file (WAL, ``synchronous = FULL``, one commit per request, as durable as the agent's 202),
``POST /v1/tasks:batch`` inserts a batch in one transaction. Each row records ``placed_at``,
the time its commit returned, so the benchmarks read both servers' rows the same way. Like
the agent it writes ``DATA_DIR/agent.json`` (pid, port) once listening on 127.0.0.1:0.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
import uuid
from pathlib import Path

from aiohttp import web

DB = web.AppKey("db", sqlite3.Connection)


def _insert(db: sqlite3.Connection, docs: list[object]) -> list[str]:
    """Insert one row per document in one transaction; return the ids."""
    now = time.time()
    rows = [(uuid.uuid4().hex, json.dumps(doc), now) for doc in docs]
    with db:
        db.executemany("INSERT INTO tasks (id, body, submitted_at) VALUES (?, ?, ?)", rows)
        db.execute("UPDATE tasks SET placed_at = ? WHERE placed_at IS NULL", (time.time(),))
    return [r[0] for r in rows]


async def submit(request: web.Request) -> web.Response:
    """Store one task."""
    [task_id] = _insert(request.app[DB], [json.loads(await request.read())])
    return web.json_response({"ok": True, "task": {"id": task_id}}, status=202)


async def submit_batch(request: web.Request) -> web.Response:
    """Store a batch of tasks in one transaction."""
    ids = _insert(request.app[DB], json.loads(await request.read())["tasks"])
    return web.json_response({"ok": True, "tasks": [{"id": i} for i in ids]}, status=202)


async def serve(data: Path) -> None:
    """Serve until SIGTERM."""
    db = sqlite3.connect(data / "agent.db", isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute(
        "CREATE TABLE tasks (id TEXT PRIMARY KEY, body TEXT, submitted_at REAL, placed_at REAL)"
    )
    db.isolation_level = "DEFERRED"
    app = web.Application()
    app[DB] = db
    app.router.add_post("/v1/tasks", submit)
    app.router.add_post("/v1/tasks:batch", submit_batch)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=2048)
    await site.start()
    port = runner.addresses[0][1]
    (data / "agent.json").write_text(json.dumps({"pid": os.getpid(), "port": port}))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()
    db.close()


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(serve(target))
