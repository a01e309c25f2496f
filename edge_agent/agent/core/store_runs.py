"""Tasks' starts and finishes, group-committed: many tasks' transitions in one write op.

The executor records a start when a job takes its slot and a finish when it leaves it, but
it does not hold the slot while those commits land (a device would otherwise serve one tiny
job per two fsyncs). Every start (finish) asked for while the writer is busy becomes one
``Database.persist`` op with one statement per kind of row (``Gather``), committed in the
writer's next transaction; each caller's future resolves only after that commit. So a task reads
``done`` in the store exactly when its result is durable, a full disk delays the writes and
loses none (``persist`` retries), and after a ``kill -9`` a task whose finish had not
committed is still ``placed`` or ``running`` and is run again (``Store.recover``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _string  # the encoder's own, in C
from typing import Any, Generic, TypeVar

import sqlite_utils

from edge_agent.agent.core import outbox
from edge_agent.agent.core.lifecycle import where
from edge_agent.storage.db import Database

I = TypeVar("I")  # an item to write
R = TypeVar("R")  # what its caller gets back

_IDS_AT_ONCE = 500  # task ids per statement (SQLite's variable limit: 999)
# the moves, checked against the lifecycle once. A start names its group's rows by id
# (``id IN (...)``), for which SQLite would rather search the state index: every placed
# task, thousands in a backlog, for each group (O(backlog) per start); by id it is O(1).
_START = where(("placed",), "running", by_state=False)
_FINISH = {state: where(("running",), state) for state in ("done", "failed")}
_RECORD_KEYS = frozenset({"id", "state", "result", "error"})
_log = logging.getLogger(__name__)


class Gather(Generic[I, R]):
    """Collects items and writes them with as few persisted ops as the writer allows.

    At most one op of a ``Gather`` waits in the writer's queue: the first item added
    queues one, and that op takes every item added until the writer runs it (under a lock:
    the writer runs it on its own thread); an item added after that queues the next op.
    So a busy writer (a commit's fsync) writes everything that arrived meanwhile as one op,
    and an idle one writes an item at once. Each item's future resolves once the
    transaction holding it has committed, as before.
    """

    def __init__(
        self, db: Database, write: Callable[[sqlite_utils.Database, list[I]], list[R]]
    ) -> None:
        self._db, self._write = db, write
        self._lock = threading.Lock()
        self._pending: list[tuple[I, asyncio.Future[R]]] = []
        self._queued = False  # an op is queued that will take the pending items
        self._writing: set[asyncio.Task[None]] = set()

    def add(self, item: I) -> asyncio.Future[R]:
        """Queue ``item``; the future resolves with its result once its group has committed."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._pending.append((item, future))
            if self._queued:
                return future
            self._queued = True
        task = asyncio.ensure_future(self._persist())
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)
        return future

    def _take(self) -> list[tuple[I, asyncio.Future[R]]]:
        with self._lock:
            group, self._pending, self._queued = self._pending, [], False
        return group

    async def _persist(self) -> None:
        group: list[tuple[I, asyncio.Future[R]]] | None = None

        def op(db: sqlite_utils.Database) -> list[R]:
            nonlocal group
            if group is None:  # the first attempt; a retry writes the same group again
                group = self._take()
            return self._write(db, [item for item, _ in group])

        try:
            results = await self._db.persist(op)
        except BaseException as err:
            if group is None:  # never ran (the store closed): fail what it would have taken
                group = self._take()
            for _, future in group:
                if not future.done():
                    future.set_exception(err)
            if isinstance(err, asyncio.CancelledError):
                raise
            return
        assert group is not None
        for (_, future), result in zip(group, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` until every item added so far has been written (or failed).

        Past it (the storage still failing) the writes are left: their tasks stay placed or
        running in the file and run again after the restart, as after a crash.
        """
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
        cur = db.execute(start_statement(len(part)), [now, *part])
        moved.update(row[0] for row in cur.fetchall())
    return [task_id in moved for task_id in task_ids]


def start_statement(n: int) -> str:
    """Return the statement that marks ``n`` placed tasks (by id) running (started_at: ?)."""
    marks = ", ".join("?" for _ in range(n))
    return (
        f"UPDATE tasks SET state = 'running', started_at = ? WHERE {_START} "
        f"AND id IN ({marks}) RETURNING id"
    )


def write_finished(
    db: sqlite_utils.Database, finishes: Sequence[Finish], outbox_limit: int
) -> list[None]:
    """Record outcomes, their telemetry rows and one outbox record each (one op)."""
    now = time.time()
    encoded = [_encoded(f) for f in finishes]
    moved = 0
    for state, condition in _FINISH.items():
        cur = db.conn.executemany(
            f"UPDATE tasks SET state = ?, finished_at = ?, result = ?, error = ? "
            f"WHERE id = ? AND {condition}",
            [
                (state, now, result, f.error, f.task_id)
                for f, (result, _) in zip(finishes, encoded, strict=True)
                if f.state == state
            ],
        )
        moved += max(cur.rowcount, 0)
    if moved != len(finishes):  # never expected: a task finishes only once it is running
        _log.error(
            "%s of %s finished tasks were no longer running", len(finishes) - moved, len(finishes)
        )
    shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}  # telemetry rows by columns
    for f in finishes:
        if f.telemetry is not None:
            row = {"ts": now, "task_id": f.task_id, **f.telemetry}
            shapes.setdefault(tuple(row), []).append(tuple(row.values()))
    for columns, rows in shapes.items():
        marks = ", ".join("?" for _ in columns)
        db.conn.executemany(f"INSERT INTO telemetry ({', '.join(columns)}) VALUES ({marks})", rows)
    outbox.append_encoded(db, [("task", record) for _, record in encoded], now, outbox_limit)
    return [None] * len(finishes)


def task_record(f: Finish) -> dict[str, Any]:
    """Return the hub's ``task`` record of a finish: the outcome and what was measured."""
    measured = {k: v for k, v in (f.telemetry or {}).items() if k != "kind"}
    return {"id": f.task_id, "state": f.state, "result": f.result, "error": f.error, **measured}


def _encoded(f: Finish) -> tuple[str | None, str]:
    """Return the result's JSON (the task's row) and the ``task_record`` JSON (the outbox).

    The result, the largest part of both, is encoded once and spliced into the record; a
    result with a non-finite float (JSON has none) keeps it in the row, as ``json.dumps``
    writes it, and has null in the record, as ``outbox.encode`` writes it.
    """
    measured = {k: v for k, v in (f.telemetry or {}).items() if k != "kind"}
    if _RECORD_KEYS & measured.keys():  # never expected: a sample naming a record field
        row = None if f.result is None else json.dumps(f.result)
        return row, outbox.encode(task_record(f))
    if f.result is None:
        row, spliced = None, "null"
    else:
        try:
            row = spliced = outbox.strict_json(f.result)
        except ValueError:
            row, spliced = json.dumps(f.result), json.dumps(outbox.plain(f.result))
    head = f'{{"id": {_string(f.task_id)}, "state": {_string(f.state)}'  # as ``encode`` writes
    tail = outbox.encode({"error": f.error, **measured})
    return row, f'{head}, "result": {spliced}, {tail[1:]}'


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
