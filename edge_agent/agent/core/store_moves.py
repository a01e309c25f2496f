"""The store's single-task moves: each a named method, each checked against the lifecycle.

``move_row`` is the one way a single task row changes state: inside the write's
transaction it reads the row, returns None when the row is gone or has moved on meanwhile
(not in ``expect``: cancelled, released, ...), raises ``IllegalTransition`` for a move the
lifecycle does not have (the op's savepoint is undone: nothing is written), and otherwise
writes the new state with its columns. ``Store`` takes these methods as a base class; the
set-at-a-time moves (placing, starting, finishing, recovering) are in store_batch.py and
store_runs.py, their statements checked against the same table when built.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import sqlite_utils

from edge_agent.agent.core import lifecycle, outbox
from edge_agent.agent.core.store_batch import decision_record
from edge_agent.storage.db import Database

Row = dict[str, Any]
_JSON_COLUMNS = ("contract", "command", "result", "chain", "deferral")


def decode_row(row: Row) -> Row:
    """Return a task row with its JSON columns decoded."""
    for key in _JSON_COLUMNS:
        if row.get(key) is not None:
            row[key] = json.loads(row[key])
    row["emulated"] = bool(row.get("emulated"))
    return row


def select_task(db: sqlite_utils.Database, task_id: str) -> Row | None:
    """Return the task's stored (undecoded) row, or None."""
    cur = db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,))
    found = cur.fetchone()
    if found is None:
        return None
    return dict(zip((c[0] for c in cur.description), found, strict=True))


def move_row(
    db: sqlite_utils.Database,
    task_id: str,
    after: str,
    columns: dict[str, Any] | None = None,
    expect: Sequence[str] | None = None,
) -> Row | None:
    """Move one task to ``after``, setting ``columns``; return its row as it was before.

    None: no such task, or it is no longer in one of ``expect`` (None: any state). A move
    the lifecycle does not have raises IllegalTransition and writes nothing.
    """
    for source in expect or ():
        lifecycle.check(task_id, source, after)
    found = select_task(db, task_id)
    if found is None:
        return None
    before = str(found["state"])
    if expect is not None and before not in expect:
        return None
    lifecycle.check(task_id, before, after)
    sets = {"state": after, **(columns or {})}
    db.execute(
        f"UPDATE tasks SET {', '.join(f'{name} = ?' for name in sets)} WHERE id = ?",
        [*sets.values(), task_id],
    )
    return found


def insert_decision(db: sqlite_utils.Database, task_id: str, at: float, row: Row) -> None:
    """Insert a ``decisions`` row (``scheduler.decision_row``'s columns) for ``task_id``."""
    record = {"task_id": task_id, "decided_at": at, **row}
    db.execute(
        f"INSERT INTO decisions ({', '.join(record)}) VALUES ({', '.join('?' for _ in record)})",
        list(record.values()),
    )


class TaskMoves:
    """The named single-task moves of ``Store`` (over its ``db``)."""

    db: Database
    outbox_limit: int

    def _record(self, db: sqlite_utils.Database, record: Row, now: float) -> None:
        outbox.append(db, "task", record, now, self.outbox_limit)

    async def transition(self, task_id: str, after: str, **columns: Any) -> Row | None:
        """Move ``task_id`` to ``after`` from whatever state it is in (None: no such task).

        IllegalTransition (nothing written) when the lifecycle has no such move.
        """
        return await self.db.write(lambda db: move_row(db, task_id, after, columns))

    async def fail(self, task_id: str, error: str) -> None:
        """Fail a waiting task that cannot be placed."""

        def op(db: sqlite_utils.Database) -> None:
            now = time.time()
            cols = {"finished_at": now, "error": error}
            if move_row(db, task_id, "failed", cols, lifecycle.WAITING) is not None:
                self._record(db, {"id": task_id, "state": "failed"}, now)

        await self.db.persist(op)

    async def cancel(self, task_id: str, states: tuple[str, ...]) -> tuple[Row, str] | None:
        """Cancel the task if its state is one of ``states``; return (row, state before)."""

        def op(db: sqlite_utils.Database) -> tuple[Row, str] | None:
            now = time.time()
            found = move_row(db, task_id, "cancelled", {"finished_at": now}, states)
            if found is not None:
                self._record(db, {"id": task_id, "state": "cancelled"}, now)
                row = {**found, "state": "cancelled", "finished_at": now}
                return decode_row(row), str(found["state"])
            found = select_task(db, task_id)
            return None if found is None else (decode_row(found), str(found["state"]))

        return await self.db.write(op)

    async def release_deferred(self, task_id: str) -> bool:
        """Move a deferred task to queued (its hour came); False if it is no longer deferred."""
        op = lambda db: move_row(db, task_id, "queued", expect=("deferred",))  # noqa: E731
        return await self.db.persist(op) is not None

    async def store_deferral(self, task_id: str, plan: Row, not_before: float) -> bool:
        """Replace a deferred task's plan (the hub moved it); False if no longer deferred."""

        def op(db: sqlite_utils.Database) -> bool:
            cur = db.execute(
                "UPDATE tasks SET deferral = ?, not_before = ? WHERE id = ? AND state = 'deferred'",
                (json.dumps(plan), not_before, task_id),
            )
            return cur.rowcount == 1

        return await self.db.write(op)

    # --- the mesh ----------------------------------------------------------------------
    async def mark_offloaded(self, task_id: str, decision: Row) -> bool:
        """Hand a waiting task to the mesh with its local decision; False if it moved on."""

        def op(db: sqlite_utils.Database) -> bool:
            now = time.time()
            if move_row(db, task_id, "offloaded", {"placed_at": now}, lifecycle.WAITING) is None:
                return False  # cancelled meanwhile
            insert_decision(db, task_id, now, decision)
            return True

        return await self.db.write(op)

    async def record_peer_result(
        self, task_id: str, outcome: Row, peer: str | None, chain: list[Row]
    ) -> bool:
        """Record where an offloaded task ran (``peer``: another agent, None: here) and its
        decision chain; settle it done or failed unless a run here recorded its own outcome.

        ``outcome``: state (done/failed), result, error, device (None: unchanged), emulated.
        Returns whether it settled the task.
        """
        result = outcome.get("result")
        text = None if result is None else json.dumps(result)

        def op(db: sqlite_utils.Database) -> bool:
            now = time.time()
            db.execute(
                "UPDATE tasks SET chain = ?, ran_on = ? WHERE id = ?",
                (json.dumps(chain), peer, task_id),
            )
            found = select_task(db, task_id)
            if found is None or found["state"] != "offloaded":
                return False
            device, emulated = outcome.get("device"), outcome.get("emulated")
            cols = {
                "finished_at": now,
                "result": text,
                "error": outcome.get("error"),
                "device": found["device"] if device is None else device,
                "emulated": found["emulated"] if emulated is None else emulated,
            }
            state = str(outcome["state"])
            move_row(db, task_id, state, cols, ("offloaded",))
            record = {"id": task_id, "state": state, "result": result, "error": cols["error"]}
            self._record(db, {**record, "ran_on": peer}, now)
            return True

        return await self.db.write(op)

    async def record_duplicate(self, task_id: str, link: Row) -> None:
        """Append a lost attempt that completed elsewhere too to the task's decision chain."""

        def op(db: sqlite_utils.Database) -> None:
            found = db.execute("SELECT chain FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if found is None:
                return
            chain = json.loads(found[0]) if found[0] else []
            chain.append(link)
            db.execute("UPDATE tasks SET chain = ? WHERE id = ?", (json.dumps(chain), task_id))

        await self.db.write(op)

    async def take_back(
        self, task_id: str, device: str | None, emulated: bool, decision: Row
    ) -> bool:
        """Place our own offloaded task here after all; False if it is no longer offloaded."""

        def op(db: sqlite_utils.Database) -> bool:
            now = time.time()
            found = select_task(db, task_id)
            attempts = 0 if found is None else int(found["attempts"] or 0)
            cols = {"placed_at": now, "device": device, "emulated": int(emulated)}
            cols["attempts"] = attempts + 1
            if move_row(db, task_id, "placed", cols, ("offloaded",)) is None:
                return False
            insert_decision(db, task_id, now, decision)
            # the hub sees this placement like any other (store_batch.record_placed)
            record = decision_record(task_id, decision)
            outbox.append(db, "decision", record, now, self.outbox_limit)
            return True

        return await self.db.write(op)

    async def place_forwarded(
        self, task_id: str, device: str | None, emulated: bool, origin: str, decision: Row
    ) -> None:
        """Place a peer's just-stored forwarded attempt (``origin``: its agent) here."""

        def op(db: sqlite_utils.Database) -> None:
            now = time.time()
            cols = {"placed_at": now, "device": device, "emulated": int(emulated)}
            cols.update(attempts=1, origin=origin)
            move_row(db, task_id, "placed", cols, ("queued",))
            insert_decision(db, task_id, now, decision)

        await self.db.write(op)

    async def refuse_forwarded(self, task_id: str, error: str) -> bool:
        """Fail a peer's placed task its pool here refused; False if it is no longer placed."""

        def op(db: sqlite_utils.Database) -> bool:
            now = time.time()
            cols = {"finished_at": now, "error": error}
            if move_row(db, task_id, "failed", cols, ("placed",)) is None:
                return False
            self._record(
                db, {"id": task_id, "state": "failed", "result": None, "error": error}, now
            )
            return True

        return await self.db.write(op)
