"""The idempotency ledger: every forwarded task's attempts, in SQLite, one writer thread.

A partial unique index lets at most one row per (key, role) reach ``done``: the database
itself refuses a second completion, whatever the code above it does.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from edge_agent.mesh.errors import MeshError

SCHEMA = """
CREATE TABLE IF NOT EXISTS mesh_ledger (
    key TEXT NOT NULL, role TEXT NOT NULL, attempt INTEGER NOT NULL,
    target TEXT NOT NULL, state TEXT NOT NULL, result TEXT, updated REAL NOT NULL,
    PRIMARY KEY (key, role, attempt)
);
CREATE UNIQUE INDEX IF NOT EXISTS mesh_ledger_one_done
    ON mesh_ledger (key, role) WHERE state = 'done';
"""
ROLES = ("origin", "peer")


class DuplicateCompletion(MeshError):
    """A second completion of one idempotency key was refused."""


class Ledger:
    """Attempts per idempotency key and role (``origin`` forwards, ``peer`` executes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mesh-ledger")
        self._db: sqlite3.Connection | None = None

    async def open(self) -> None:
        """Open (and create) the database."""
        await self._run(self._open)

    def _open(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA)
        self._db = db

    async def close(self) -> None:
        """Close the database and the writer thread."""
        if self._db is not None:
            await self._run(self._db.close)
            self._db = None
        self._pool.shutdown(wait=True)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise MeshError(f"ledger {self.path} is not open")
        return self._db

    async def begin(self, key: str, role: str, attempt: int, target: str) -> None:
        """Record an attempt as running (a no-op if it is already recorded)."""
        sql = (
            "INSERT OR IGNORE INTO mesh_ledger (key, role, attempt, target, state, updated)"
            " VALUES (?, ?, ?, ?, 'running', ?)"
        )
        await self._run(
            lambda: self._conn().execute(sql, (key, role, attempt, target, time.time()))
        )

    async def finish(
        self, key: str, role: str, attempt: int, state: str, result: Any = None
    ) -> None:
        """Set an attempt's final state; DuplicateCompletion if ``done`` twice for a key."""

        def write() -> None:
            try:
                self._conn().execute(
                    "UPDATE mesh_ledger SET state = ?, result = ?, updated = ?"
                    " WHERE key = ? AND role = ? AND attempt = ?",
                    (state, json.dumps(result), time.time(), key, role, attempt),
                )
            except sqlite3.IntegrityError:
                raise DuplicateCompletion(
                    f"task {key}: a second completion ({role}, attempt {attempt}) was refused"
                ) from None

        await self._run(write)

    async def attempts(self, key: str, role: str | None = None) -> list[dict[str, Any]]:
        """Return the attempts recorded for ``key`` (optionally one role), oldest first."""

        def read() -> list[dict[str, Any]]:
            sql = "SELECT key, role, attempt, target, state, result FROM mesh_ledger WHERE key=?"
            args: tuple[Any, ...] = (key,)
            if role is not None:
                sql, args = sql + " AND role = ?", (key, role)
            rows = self._conn().execute(sql + " ORDER BY attempt, role", args).fetchall()
            cols = ("key", "role", "attempt", "target", "state", "result")
            out = [dict(zip(cols, r, strict=True)) for r in rows]
            for row in out:
                row["result"] = None if row["result"] is None else json.loads(row["result"])
            return out

        result: list[dict[str, Any]] = await self._run(read)
        return result

    async def lost(self) -> list[tuple[str, str, int]]:
        """Return (peer, key, attempt) of every origin attempt given up as ``lost``."""
        sql = (
            "SELECT target, key, attempt FROM mesh_ledger WHERE role = 'origin' AND state = 'lost'"
        )
        rows = await self._run(lambda: self._conn().execute(sql).fetchall())
        return [(str(t), str(k), int(a)) for t, k, a in rows]

    async def done(self, key: str, role: str) -> dict[str, Any] | None:
        """Return the completed attempt of ``key`` in ``role``, if any."""
        rows = await self.attempts(key, role)
        return next((r for r in rows if r["state"] == "done"), None)
