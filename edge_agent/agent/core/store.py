"""The agent's durable state: tasks, decisions, telemetry, hub outbox, policy and model versions.

Writes go through ``db.Database`` (one writer thread); a submit resolves only after its
commit, so an accepted task survives ``kill -9``. The writes that move an accepted task on
(placed, started, finished, failed, released) are ``persist``ed: retried until they land,
so a full disk delays them and strands none. A row that cannot be decoded is skipped in a
listing (logged, counted in ``bad_rows``) rather than failing the whole listing.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from edge_agent.agent.core import outbox, store_batch, store_runs
from edge_agent.agent.core.lifecycle import FINAL, STATES, WAITING, where
from edge_agent.agent.core.store_moves import TaskMoves, decode_row
from edge_agent.errors import InvalidInput
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import Database, StoreError, decode_each

if TYPE_CHECKING:
    from edge_agent.agent.core.intake import NewTask

#: Rows kept in the hub outbox (oldest dropped first) unless the store is told otherwise.
OUTBOX_LIMIT = 10_000
__all__ = ["FINAL", "STATES", "WAITING", "IdempotencyConflict", "Store"]
# the restart's moves, checked against the lifecycle here, once
_FORWARDED_CUT = where(("placed", "running"), "failed")
_CUT = where(("placed", "running", "offloaded"), "interrupted")
_WAITING = f"state IN ({', '.join(repr(s) for s in WAITING)})"


class IdempotencyConflict(InvalidInput):
    """An Idempotency-Key was reused with a different request body."""


def _insert(db: sqlite_utils.Database, table: str, row: dict[str, Any]) -> None:
    """Insert ``row`` into ``table`` with plain SQL (the column names are ours, not input)."""
    db.execute(
        f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
        list(row.values()),
    )


class Store(TaskMoves):
    """Task and decision records over one SQLite file (single-task moves: ``TaskMoves``)."""

    def __init__(self, path: Path, outbox_limit: int = OUTBOX_LIMIT) -> None:
        self.db = Database(path, MIGRATIONS, repair=f"edge-agent repair --data-dir {path.parent}")
        self.outbox = outbox.Outbox(self.db)
        self.outbox_limit = outbox_limit
        self.runs = store_runs.RunLog(self.db, outbox_limit)  # starts and finishes, grouped
        self.bad_rows = 0  # task rows skipped in listings because they cannot be decoded

    def _decoded(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Return ``rows`` decoded, skipping (logged, counted) any that cannot be."""
        out, bad = decode_each(rows, decode_row, "task")
        self.bad_rows += bad
        return out

    def _outbox(
        self, db: sqlite_utils.Database, kind: str, payload: dict[str, Any], now: float
    ) -> None:
        outbox.append(db, kind, payload, now, self.outbox_limit)

    def open(self) -> None:
        """Open and migrate the database (blocking)."""
        self.db.open()

    def close(self) -> None:
        """Flush queued writes and close (blocking)."""
        self.db.close()

    # --- writes ---------------------------------------------------------------------
    async def submit(self, tasks: list[NewTask]) -> list[tuple[dict[str, Any], bool]]:
        """Store ``tasks`` atomically; return (task row, created) each (created False: a retry).

        New rows of equal contracts share one parsed ``contract`` dict: read it, never change
        it (the API encodes it once per response for that reason).
        """

        def op(db: sqlite_utils.Database) -> list[tuple[dict[str, Any], bool]]:
            keys = [t.idempotency_key for t in tasks if t.idempotency_key is not None]
            known = store_batch.existing_keys(db, keys) if keys else {}
            planned = store_batch.new_rows(tasks, time.time(), known)
            fresh = [row for _, row in planned if row is not None]
            if fresh:
                store_batch.insert_new(db, fresh)
            out: list[tuple[dict[str, Any], bool]] = []
            parsed: dict[str, Any] = {}  # equal contracts are parsed once (read-only)
            for i, row in planned:
                task = tasks[i]
                if row is None:  # a retry: the key's first request answers it
                    found = known[str(task.idempotency_key)]
                    if found["request_hash"] != task.request_hash:
                        raise IdempotencyConflict(
                            f"Idempotency-Key {task.idempotency_key!r} was already used "
                            "with a different request"
                        )
                    out.append((decode_row(dict(found)), False))
                    continue
                row = dict(row)
                text = row["contract"]
                contract = parsed.get(text)
                if contract is None:  # the document that text encodes (a fifth of a parse)
                    contract = parsed[text] = task.contract.to_dict()
                row.update(contract=contract, emulated=False, deferral=task.deferral)
                if task.command is not None:
                    row["command"] = list(task.command)
                out.append((row, True))
            return out

        return await self.db.write(op)

    async def placed(
        self, entries: list[tuple[str, dict[str, Any], bool]], requeued: Sequence[str] = ()
    ) -> None:
        """Record (task id, decision row, emulated?); placed tasks move on, the others fail.

        ``requeued`` tasks (preempted before they started) go back from placed to queued.
        """

        def op(db: sqlite_utils.Database) -> None:
            store_batch.record_placed(db, entries, requeued, self.outbox_limit)

        await self.db.persist(op)

    def started(self, task_id: str) -> asyncio.Future[bool]:
        """Mark a placed task running (group-committed); False if it is no longer placed."""
        return self.runs.started(task_id)

    def take_back_start(self, started: asyncio.Future[bool]) -> float | None:
        """Withdraw a start (``started``'s) not yet taken by the writer, to be written with
        the task's finish (``finished(..., started_at=)``); return when it was asked, or None
        (being or already written). Its future is then the caller's to resolve."""
        return self.runs.take_back_start(started)

    def finished(
        self,
        task_id: str,
        state: str,
        result: dict[str, Any] | None,
        error: str | None,
        telemetry: dict[str, Any] | None,
        started_at: float | None = None,
    ) -> asyncio.Future[bool]:
        """Record a task's outcome, its telemetry sample and an outbox entry for the hub.

        Group-committed with the other finishes of the moment; the future resolves once
        durable (a future, not a coroutine: no frame per task around the wait) with whether
        the row moved. ``started_at``: its start was taken back (``take_back_start``) and is
        written with it, in one row write (placed -> ``state``).
        """
        return self.runs.finished(
            store_runs.Finish(task_id, state, result, error, telemetry, started_at)
        )

    def finished_then(self, finish: store_runs.Finish, then: store_runs.Then[bool]) -> None:
        """``finished`` without a future (the executor's callbacks): ``then(moved, None)``
        once durable, or ``then(None, error)``."""
        self.runs.finished_then(finish, then)

    async def samples(self, rows: Sequence[dict[str, Any]]) -> None:
        """Store one telemetry sample's rows (kind ``sample``)."""

        def op(db: sqlite_utils.Database) -> None:
            now = time.time()
            for row in rows:
                _insert(db, "telemetry", {"ts": now, **row})
            keep = ("device", "utilization", "energy_j", "emulated")
            devices = [{k: row.get(k) for k in keep} for row in rows]
            self._outbox(db, "telemetry", {"ts": now, "devices": devices}, now)

        await self.db.write(op)

    async def recover(self) -> list[dict[str, Any]]:
        """Mark placed/running tasks interrupted; return every waiting task, oldest first."""

        def op(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            # a task a peer forwarded to us is not ours to resume: its origin places it again
            db.execute(
                "UPDATE tasks SET state = 'failed', finished_at = ?, error = ? "
                f"WHERE {_FORWARDED_CUT} AND origin IS NOT NULL",
                (time.time(), "interrupted by a restart; the origin agent places it again"),
            )
            db.execute(f"UPDATE tasks SET state = 'interrupted' WHERE {_CUT}")
            return list(db.table("tasks").rows_where(_WAITING, order_by="rowid"))

        return self._decoded(await self.db.write(op))

    async def deferred(self) -> list[dict[str, Any]]:
        """Return every task held as deferred, earliest release first."""
        rows = await self.db.read(
            lambda db: list(
                db.table("tasks").rows_where("state = 'deferred'", order_by="not_before")
            )
        )
        return self._decoded(rows)

    async def work_history(self, since: float) -> list[tuple[float, float]]:
        """Return (time, estimated seconds) of the tasks finished since ``since`` (telemetry)."""
        rows = await self.db.read(
            lambda db: db.execute(
                "SELECT ts, estimate_s FROM telemetry WHERE kind = 'task' AND ts >= ? "
                "AND estimate_s IS NOT NULL",
                (since,),
            ).fetchall()
        )
        return [(float(ts), float(est)) for ts, est in rows]

    async def accept_policy(self, document: dict[str, Any], source: str = "config") -> None:
        """Record ``document`` (from ``source``: config or hub) as the policy in force."""

        def op(db: sqlite_utils.Database) -> None:
            last = list(db.table("policy_versions").rows_where(order_by="id desc", limit=1))
            text = json.dumps(document, sort_keys=True)
            if not last or last[0]["document"] != text or last[0]["source"] != source:
                db.table("policy_versions").insert(
                    {
                        "name": document["name"],
                        "version": document["version"],
                        "document": text,
                        "accepted_at": time.time(),
                        "source": source,
                    }
                )

        await self.db.write(op)

    async def last_policy(self, source: str) -> dict[str, Any] | None:
        """Return the policy document last accepted from ``source``, or None."""
        rows = await self.db.read(
            lambda db: db.execute(
                "SELECT document FROM policy_versions WHERE source = ? ORDER BY id DESC LIMIT 1",
                (source,),
            ).fetchall()
        )
        return dict(json.loads(rows[0][0])) if rows else None

    async def model_added(self, name: str, sha256: str, path: str, size: int) -> None:
        """Record an uploaded model version."""
        row = {"sha256": sha256, "name": name, "path": path, "size": size, "added_at": time.time()}
        await self.db.write(lambda db: db.table("model_versions").upsert(row, pk="sha256"))

    # --- reads ----------------------------------------------------------------------
    async def get(self, task_id: str) -> dict[str, Any] | None:
        """Return the task row, or None."""
        rows = await self.db.read(
            lambda db: list(db.table("tasks").rows_where("id = ?", [task_id]))
        )
        if not rows:
            return None
        try:
            return decode_row(rows[0])
        except (ValueError, TypeError) as err:
            self.bad_rows += 1
            raise StoreError(f"task {task_id}'s stored row is damaged: {err}") from err

    async def ids_starting(self, prefix: str, limit: int) -> list[str]:
        """Return up to ``limit`` task ids that start with ``prefix`` (``prefix`` itself first)."""

        def read(db: Any) -> list[str]:
            exact = db.execute("SELECT id FROM tasks WHERE id = ?", [prefix]).fetchall()
            if exact:  # a whole id is never ambiguous, even where it prefixes another
                return [exact[0][0]]
            sql = "SELECT id FROM tasks WHERE id >= ? AND id < ? ORDER BY id LIMIT ?"
            rows = db.execute(sql, [prefix, prefix + "\U0010ffff", limit]).fetchall()
            return [r[0] for r in rows]

        return await self.db.read(read)

    async def list(self, state: str | None, limit: int) -> list[dict[str, Any]]:
        """Return up to ``limit`` tasks (of ``state``), newest first."""
        where, args = ("state = ?", [state]) if state else (None, [])
        rows = await self.db.read(
            lambda db: list(
                db.table("tasks").rows_where(where, args, order_by="rowid desc", limit=limit)
            )
        )
        return self._decoded(rows)

    async def decision(self, task_id: str) -> dict[str, Any] | None:
        """Return the task's latest decision row with JSON columns decoded, or None."""
        rows = await self.db.read(
            lambda db: list(
                db.table("decisions").rows_where(
                    "task_id = ?", [task_id], order_by="id desc", limit=1
                )
            )
        )
        if not rows:
            return None
        row = rows[0]
        for key in ("devices", "components", "rejections", "why_not", "spilled_from"):
            row[key] = json.loads(row[key]) if row[key] is not None else None
        row["placed"] = bool(row["placed"])
        row["why_not"] = store_batch.why_not_of(row)
        for key in ("device_order", "reasons", "excluded"):  # the why-not's compact source
            row.pop(key, None)
        return row

    async def counts(self) -> dict[str, int]:
        """Return the number of tasks in each state."""
        rows = await self.db.read(
            lambda db: db.execute("SELECT state, count(*) FROM tasks GROUP BY state").fetchall()
        )
        return {state: 0 for state in STATES} | {str(s): int(n) for s, n in rows}
