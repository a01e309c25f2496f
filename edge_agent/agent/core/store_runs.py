"""Tasks' starts and finishes, group-committed: many tasks' transitions in one write op.

The executor records a start when a job takes its slot and a finish when it leaves it, but
it does not hold the slot while those commits land (a device would otherwise serve one tiny
job per two fsyncs). Every start (finish) asked for while the writer is busy becomes one
``Database.persist`` op with one statement per kind of row (``Gather``), committed in the
writer's next transaction; each caller's future resolves only after that commit. So a task reads
``done`` in the store exactly when its result is durable, a full disk delays the writes and
loses none (``persist`` retries), and after a ``kill -9`` a task whose finish had not
committed is still ``placed`` or ``running`` and is run again (``Store.recover``).

A finish asked for while its task's start still waits for the writer (a tiny task ends
before its start's group was taken) takes that start with it: one write moves the row from
placed to done (or failed) with its ``started_at``, instead of a write for each move, and
the start's future resolves with the finish's commit. A reader sees placed, then done,
never ``running``: consistent, as the task's run had ended before its start was durable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import sqlite_utils

from edge_agent.agent.core import outbox
from edge_agent.agent.core.lifecycle import where
from edge_agent.storage.db import Database

I = TypeVar("I")  # an item to write
R = TypeVar("R")  # what its caller gets back

_IDS_AT_ONCE = 500  # task ids per statement (SQLite's variable limit: 999)
#: the longest a start waits to share a finish's transaction before it is written alone
START_LAG_S = 0.01
# the moves, checked against the lifecycle once. A start names its group's rows by id
# (``id IN (...)``), for which SQLite would rather search the state index: every placed
# task, thousands in a backlog, for each group (O(backlog) per start); by id it is O(1).
_START = where(("placed",), "running", by_state=False)
_FINISH = {state: where(("running",), state) for state in ("done", "failed")}
# a finish that took its start along (``RunLog.finished``): placed -> done/failed at once
_FOLDED = {state: where(("placed",), state) for state in ("done", "failed")}
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

    With a ``key``, an item the writer has not taken yet can be taken back (``withdraw``).
    With ``lag_s``, an item does not queue an op itself: the op is queued ``lag_s`` after
    the first pending item, or at once by ``kick``. A ``rider``'s pending items are taken
    by this Gather's op and written first, in its savepoint (their futures resolve first).
    """

    def __init__(
        self,
        db: Database,
        write: Callable[[sqlite_utils.Database, list[I]], list[R]],
        *,
        key: Callable[[I], Hashable] | None = None,
        lag_s: float = 0.0,
        rider: Gather[Any, Any] | None = None,
    ) -> None:
        self._db, self._write, self._key, self._lag_s = db, write, key, lag_s
        self._rider = rider
        self._lock = threading.Lock()
        self._pending: dict[Hashable, tuple[I, asyncio.Future[R]]] = {}  # in arrival order
        self._queued = False  # an op is queued that will take the pending items
        self._timer: asyncio.TimerHandle | None = None  # lag_s: the kick of the pending items
        self._writing: set[asyncio.Task[None]] = set()

    def add(self, item: I) -> asyncio.Future[R]:
        """Queue ``item``; the future resolves with its result once its group has committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        key: Hashable = id(future)
        with self._lock:
            if self._key is not None:
                key = self._key(item)
                if key in self._pending:  # never expected (a key twice): not withdrawable
                    key = id(future)
            self._pending[key] = (item, future)
            if self._queued:
                return future
            if not self._lag_s:
                self._queued = True
        if not self._lag_s:
            self._queue_op()
        elif self._timer is None:
            self._timer = loop.call_later(self._lag_s, self.kick)
        return future

    def kick(self) -> None:
        """Queue the op that writes the pending items now (``lag_s``: without waiting)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with self._lock:
            if self._queued or not self._pending:
                return
            self._queued = True
        self._queue_op()

    def withdraw(self, key: Hashable) -> tuple[I, asyncio.Future[R]] | None:
        """Take back the item of ``key`` if the writer has not taken it yet; else None.

        Its future is the caller's to resolve from then on.
        """
        with self._lock:
            return self._pending.pop(key, None)

    def _queue_op(self) -> None:
        task = asyncio.ensure_future(self._persist())
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    def _take(self) -> list[tuple[I, asyncio.Future[R]]]:
        with self._lock:
            group, self._pending, self._queued = list(self._pending.values()), {}, False
        return group

    async def _persist(self) -> None:
        group: list[tuple[I, asyncio.Future[R]]] | None = None
        riding: list[tuple[Any, asyncio.Future[Any]]] = []
        rider = self._rider

        def op(db: sqlite_utils.Database) -> tuple[list[Any], list[R]]:
            nonlocal group, riding
            if group is None:  # the first attempt; a retry writes the same groups again
                group = self._take()
                riding = [] if rider is None else rider._take()
            carried: list[Any] = []
            if rider is not None and riding:
                carried = rider._write(db, [item for item, _ in riding])
            return carried, self._write(db, [item for item, _ in group])

        try:
            carried, results = await self._db.persist(op)
        except BaseException as err:
            if group is None:  # never ran (the store closed): fail what it would have taken
                group = self._take()
            for _, future in riding:
                if not future.done():
                    future.set_exception(err)
            for item, future in group:
                self.settled(item, None, err)
                if not future.done():
                    future.set_exception(err)
            if isinstance(err, asyncio.CancelledError):
                raise
            return
        assert group is not None
        for (_, future), result in zip(riding, carried, strict=True):
            if not future.done():
                future.set_result(result)
        for (item, future), result in zip(group, results, strict=True):
            self.settled(item, result, None)
            if not future.done():
                future.set_result(result)

    def settled(self, item: I, result: R | None, err: BaseException | None) -> None:
        """Called for each item as its write commits (or fails), before its future resolves."""

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` until every item added so far has been written (or failed).

        Past it (the storage still failing) the writes are left: their tasks stay placed or
        running in the file and run again after the restart, as after a crash.
        """
        self.kick()
        if self._writing:
            await asyncio.wait(list(self._writing), timeout=timeout_s)


@dataclass(slots=True)
class Finish:
    """A task's outcome, its telemetry sample (None: none) and nothing else."""

    task_id: str
    state: str  # done or failed
    result: dict[str, Any] | None
    error: str | None
    telemetry: dict[str, Any] | None
    # when its start was asked for, if this finish took that start along (the task is
    # still placed in the file; ``RunLog.finished``); None: its start was written on its own
    started_at: float | None = None
    start: asyncio.Future[bool] | None = None  # that start's future, resolved with this write


class _Finishes(Gather[Finish, bool]):
    """The finishes' Gather: a start taken along resolves just before its finish."""

    def settled(self, item: Finish, result: bool | None, err: BaseException | None) -> None:
        start = item.start
        if start is None or start.done():
            return
        if err is not None:
            start.set_exception(err)
        else:
            start.set_result(bool(result))


def write_started(db: sqlite_utils.Database, starts: Sequence[tuple[str, float]]) -> list[bool]:
    """Mark placed tasks (id, asked at) running; per task, False where it is no longer placed."""
    now = time.time()
    task_ids = [task_id for task_id, _ in starts]
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
) -> list[bool]:
    """Record outcomes, their telemetry rows and one outbox record each (one op).

    Per finish, False where its task was no longer running (placed, for a finish that took
    its start along): never expected, its row is left as it was.
    """
    now = time.time()
    asked = finishes
    encoded = [_encoded(f) for f in finishes]
    moved = 0
    for state in ("done", "failed"):
        rows = [
            (f, result)
            for f, (result, _) in zip(finishes, encoded, strict=True)
            if f.state == state
        ]
        if not rows:
            continue
        plain = [
            (state, now, result, f.error, f.task_id) for f, result in rows if f.started_at is None
        ]
        folded = [
            (state, f.started_at, now, result, f.error, f.task_id)
            for f, result in rows
            if f.started_at is not None
        ]
        if plain:
            cur = db.conn.executemany(
                "UPDATE tasks SET state = ?, finished_at = ?, result = ?, error = ? "
                f"WHERE id = ? AND {_FINISH[state]}",
                plain,
            )
            moved += max(cur.rowcount, 0)
        if folded:
            cur = db.conn.executemany(
                "UPDATE tasks SET state = ?, started_at = ?, finished_at = ?, result = ?, "
                f"error = ? WHERE id = ? AND {_FOLDED[state]}",
                folded,
            )
            moved += max(cur.rowcount, 0)
    if moved != len(finishes):  # never expected: a task finishes only once it is running
        _log.error(
            "%s of %s finished tasks were no longer running", len(finishes) - moved, len(finishes)
        )
        written = _finished_now(db, [f.task_id for f in finishes], now)
        kept = [(f, e) for f, e in zip(finishes, encoded, strict=True) if f.task_id in written]
        finishes, encoded = [f for f, _ in kept], [e for _, e in kept]
    else:
        written = None
    shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}  # telemetry rows by columns
    for f in finishes:
        if f.telemetry is not None:
            row = {"ts": now, "task_id": f.task_id, **f.telemetry}
            shapes.setdefault(tuple(row), []).append(tuple(row.values()))
    for columns, rows in shapes.items():
        marks = ", ".join("?" for _ in columns)
        db.conn.executemany(f"INSERT INTO telemetry ({', '.join(columns)}) VALUES ({marks})", rows)
    outbox.append_encoded(db, [("task", record) for _, record in encoded], now, outbox_limit)
    if written is None:
        return [True] * len(finishes)
    return [f.task_id in written for f in asked]


def _finished_now(db: sqlite_utils.Database, task_ids: Sequence[str], now: float) -> set[str]:
    """Return which of ``task_ids`` this op moved (their ``finished_at`` is its ``now``)."""
    moved: set[str] = set()
    for i in range(0, len(task_ids), _IDS_AT_ONCE):
        part = task_ids[i : i + _IDS_AT_ONCE]
        marks = ", ".join("?" for _ in part)
        cur = db.execute(
            f"SELECT id FROM tasks WHERE finished_at = ? AND id IN ({marks})", [now, *part]
        )
        moved.update(row[0] for row in cur.fetchall())
    return moved


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
    head = outbox.encode({"id": f.task_id, "state": f.state})
    tail = outbox.encode({"error": f.error, **measured})
    return row, f'{head[:-1]}, "result": {spliced}, {tail[1:]}'


class RunLog:
    """Starts and finishes of tasks on the devices, written a group at a time."""

    def __init__(self, db: Database, outbox_limit: int) -> None:
        self._starts: Gather[tuple[str, float], bool] = Gather(
            db, write_started, key=lambda start: start[0], lag_s=START_LAG_S
        )
        self._finishes = _Finishes(
            db,
            lambda conn, items: write_finished(conn, items, outbox_limit),
            rider=self._starts,
        )

    def started(self, task_id: str) -> asyncio.Future[bool]:
        """Record the start (placed -> running); resolves False if it was no longer placed.

        It is written by the next finish's op, or ``START_LAG_S`` after it was asked for
        when no finish comes sooner.
        """
        return self._starts.add((task_id, time.time()))

    def finished(self, finish: Finish) -> asyncio.Future[bool]:
        """Record the outcome; resolves once it is durable (False: the task was no longer
        running, nothing written).

        The task's start, when it still waits for the writer, is taken along: one write
        moves the task from placed to its final state, and the start's future resolves
        (just before this one) with its commit. The starts still waiting when the writer
        runs this finish's op are written by it, first (no op of their own).
        """
        start = self._starts.withdraw(finish.task_id)
        if start is not None:
            (_, finish.started_at), finish.start = start
        return self._finishes.add(finish)

    async def drain(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s`` each) for the starts and finishes recorded so far."""
        await self._starts.drain(timeout_s)
        await self._finishes.drain(timeout_s)
