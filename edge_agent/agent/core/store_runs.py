"""Tasks' starts and finishes, group-committed: many tasks' transitions in one write op.

The executor records a start when a job takes its slot and a finish when it leaves it, but
it does not hold the slot while those commits land (a device would otherwise serve one tiny
job per two fsyncs). Every start (finish) asked for in one turn of the event loop becomes
one ``Database.persist`` op with one statement per kind of row, committed in the writer's
next transaction; each caller's future resolves only after that commit. So a task reads
``done`` in the store exactly when its result is durable, a full disk delays the writes and
loses none (``persist`` retries), and after a ``kill -9`` a task whose finish had not
committed is still ``placed`` or ``running`` and is run again (``Store.recover``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import sqlite_utils

from edge_agent.agent.core import outbox
from edge_agent.agent.core.lifecycle import where
from edge_agent.storage.db import Database

I = TypeVar("I")  # an item to write
R = TypeVar("R")  # what its caller gets back

_IDS_AT_ONCE = 500  # task ids per statement (SQLite's variable limit: 999)
_START = where(("placed",), "running")  # the moves, checked against the lifecycle once
_FINISH = {state: where(("running",), state) for state in ("done", "failed")}
_log = logging.getLogger(__name__)


class Gather(Generic[I, R]):
    """Collects the items added in one loop turn and writes them with one persisted op."""

    def __init__(
        self, db: Database, write: Callable[[sqlite_utils.Database, list[I]], list[R]]
    ) -> None:
        self._db, self._write = db, write
        self._pending: list[tuple[I, asyncio.Future[R]]] = []
        self._writing: set[asyncio.Task[None]] = set()

    def add(self, item: I) -> asyncio.Future[R]:
        """Queue ``item``; the future resolves with its result once its group has committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append((item, future))
        return future

    def _flush(self) -> None:
        group, self._pending = self._pending, []
        task = asyncio.ensure_future(self._persist(group))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _persist(self, group: list[tuple[I, asyncio.Future[R]]]) -> None:
        items = [item for item, _ in group]
        try:
            results = await self._db.persist(lambda db: self._write(db, items))
        except BaseException as err:
            for _, future in group:
                if not future.done():
                    future.set_exception(err)
            if isinstance(err, asyncio.CancelledError):
                raise
            return
        for (_, future), result in zip(group, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` until every item added so far has been written (or failed).

        Past it (the storage still failing) the writes are left: their tasks stay placed or
        running in the file and run again after the restart, as after a crash.
        """
        if self._pending:
            self._flush()
        if self._writing:
            await asyncio.wait(list(self._writing), timeout=timeout_s)


@dataclass(frozen=True, slots=True)
class Finish:
    """A task's outcome, its telemetry sample (None: none) and nothing else."""

    task_id: str
    state: str  # done or failed
    result: dict[str, Any] | None
    error: str | None
    telemetry: dict[str, Any] | None


def write_started(db: sqlite_utils.Database, task_ids: Sequence[str]) -> list[bool]:
    """Mark placed tasks running; per task, False where it is no longer placed."""
    now = time.time()
    moved: set[str] = set()
    for i in range(0, len(task_ids), _IDS_AT_ONCE):
        part = task_ids[i : i + _IDS_AT_ONCE]
        cur = db.execute(
            f"UPDATE tasks SET state = 'running', started_at = ? WHERE {_START} "
            f"AND id IN ({', '.join('?' for _ in part)}) RETURNING id",
            [now, *part],
        )
        moved.update(row[0] for row in cur.fetchall())
    return [task_id in moved for task_id in task_ids]


def write_finished(
    db: sqlite_utils.Database, finishes: Sequence[Finish], outbox_limit: int
) -> list[None]:
    """Record outcomes, their telemetry rows and one outbox record each (one op)."""
    now = time.time()
    moved = 0
    for state, condition in _FINISH.items():
        cur = db.conn.executemany(
            f"UPDATE tasks SET state = ?, finished_at = ?, result = ?, error = ? "
            f"WHERE id = ? AND {condition}",
            [
                (state, now, None if f.result is None else json.dumps(f.result), f.error, f.task_id)
                for f in finishes
                if f.state == state
            ],
        )
        moved += max(cur.rowcount, 0)
    if moved != len(finishes):  # never expected: a task finishes only once it is running
        _log.error(
            "%s of %s finished tasks were no longer running", len(finishes) - moved, len(finishes)
        )
    shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}  # telemetry rows by columns
    records: list[tuple[str, dict[str, Any]]] = []
    for f in finishes:
        sample = f.telemetry or {}
        if f.telemetry is not None:
            row = {"ts": now, "task_id": f.task_id, **sample}
            shapes.setdefault(tuple(row), []).append(tuple(row.values()))
        measured = {k: v for k, v in sample.items() if k != "kind"}
        record = {"id": f.task_id, "state": f.state, "result": f.result, "error": f.error}
        records.append(("task", {**record, **measured}))
    for columns, rows in shapes.items():
        marks = ", ".join("?" for _ in columns)
        db.conn.executemany(f"INSERT INTO telemetry ({', '.join(columns)}) VALUES ({marks})", rows)
    outbox.append_many(db, records, now, outbox_limit)
    return [None] * len(finishes)


class RunLog:
    """Starts and finishes of tasks on the devices, written a group at a time."""

    def __init__(self, db: Database, outbox_limit: int) -> None:
        self._starts: Gather[str, bool] = Gather(db, write_started)
        self._finishes: Gather[Finish, None] = Gather(
            db, lambda conn, items: write_finished(conn, items, outbox_limit)
        )

    def started(self, task_id: str) -> asyncio.Future[bool]:
        """Record the start (placed -> running); resolves False if it was no longer placed."""
        return self._starts.add(task_id)

    def finished(self, finish: Finish) -> asyncio.Future[None]:
        """Record the outcome; resolves once it is durable."""
        return self._finishes.add(finish)

    async def drain(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s`` each) for the starts and finishes recorded so far."""
        await self._starts.drain(timeout_s)
        await self._finishes.drain(timeout_s)
