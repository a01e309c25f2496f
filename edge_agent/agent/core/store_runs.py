"""Tasks' starts and finishes, group-committed: many tasks' transitions in one write op.

The executor records a start when a job takes its slot and a finish when it leaves it, but
it does not hold the slot while those commits land (a device would otherwise serve one tiny
job per two fsyncs). Every start (finish) asked for while the writer is busy becomes one
``Database.persist`` op with one statement per kind of row (``Gather``), committed in the
writer's next transaction; each caller's future resolves only after that commit. So a task reads
``done`` in the store exactly when its result is durable, a full disk delays the writes and
loses none (``persist`` retries), and after a ``kill -9`` a task whose finish had not
committed is still ``placed`` or ``running`` and is run again (``Store.recover``).

Write-combining: a task that finishes before the writer has taken its start (a tiny job,
a busy writer) has its start taken back (``RunLog.take_back_start``) and written with its
finish, one row write (placed -> done or failed, ``started_at`` the time the start was
asked) in the finish's transaction. A ``kill -9`` before that commit leaves the task
``placed``, as a start not yet committed does: it runs again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii as _string  # the encoder's own, in C
from typing import Any, Generic, NamedTuple, TypeVar

import sqlite_utils

from edge_agent.agent.core import outbox
from edge_agent.agent.core.lifecycle import where
from edge_agent.storage.db import Database

I = TypeVar("I")  # an item to write
R = TypeVar("R")  # what its caller gets back
#: an ``add_then`` callback: (the item's result, None) once committed, or (None, the error)
Then = Callable[[R | None, BaseException | None], None]

_IDS_AT_ONCE = 500  # task ids per statement (SQLite's variable limit: 999)
# the moves, checked against the lifecycle once. A start names its group's rows by id
# (``id IN (...)``), for which SQLite would rather search the state index: every placed
# task, thousands in a backlog, for each group (O(backlog) per start); by id it is O(1).
_START = where(("placed",), "running", by_state=False)
_FINISH = {state: where(("running",), state) for state in ("done", "failed")}
#: a finish's row update by (final state, written with its start); written with it
#: (write-combined), the row moves from placed, named by id
_FINISH_SQL = {
    **{
        (state, False): f"UPDATE tasks SET state = '{state}', finished_at = ?, result = ?, "
        f"error = ? WHERE id = ? AND {condition}"
        for state, condition in _FINISH.items()
    },
    **{
        (state, True): f"UPDATE tasks SET state = '{state}', started_at = ?, finished_at = ?, "
        f"result = ?, error = ? WHERE id = ? AND {where(('placed',), state, by_state=False)}"
        for state in _FINISH
    },
}
_RECORD_KEYS = frozenset({"id", "state", "result", "error"})
_log = logging.getLogger(__name__)


class Gather(Generic[I, R]):
    """Collects items and writes them with as few persisted ops as the writer allows.

    At most one op of a ``Gather`` waits in the writer's queue: the first item added
    queues one, and that op takes every item added until the writer runs it (under a lock:
    the writer runs it on its own thread); an item added after that queues the next op.
    So a busy writer (a commit's fsync) writes everything that arrived meanwhile as one op,
    and an idle one writes an item at once. Each item's future resolves once the
    transaction holding it has committed, as before. An item the writer has not taken yet
    can be taken back (``take_back``): it is not written and its future is the caller's.

    ``add_then`` takes a callback instead of handing out a future: it is called, after the
    commit, with the item's result (or its error) directly from the op's resolution, in the
    order the items were added: no future, done-callback or loop handle per item (most of
    a tiny run's finish otherwise).
    """

    def __init__(
        self, db: Database, write: Callable[[sqlite_utils.Database, list[I]], list[R]]
    ) -> None:
        self._db, self._write = db, write
        self._lock = threading.Lock()
        # in the order added, by who is told: a future, or an ``add_then`` callback
        self._pending: dict[asyncio.Future[R] | Then[R], I] = {}
        self._queued = False  # an op is queued that will take the pending items
        self._writing: set[asyncio.Task[None]] = set()

    def add(self, item: I) -> asyncio.Future[R]:
        """Queue ``item``; the future resolves with its result once its group has committed."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue(future, item)
        return future

    def add_then(self, item: I, then: Then[R]) -> None:
        """Queue ``item``; once its group has committed, ``then(result, None)`` is called
        (``then(None, error)`` where the write failed). ``then`` must not be queued twice."""
        self._queue(then, item)

    def _queue(self, told: asyncio.Future[R] | Then[R], item: I) -> None:
        with self._lock:
            self._pending[told] = item
            if self._queued:
                return
            self._queued = True
        task = asyncio.ensure_future(self._persist())
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    def take_back(self, future: asyncio.Future[R]) -> I | None:
        """Withdraw the item of ``future`` if the writer has not taken it; return it, or
        None (taken: it is being or has been written). A withdrawn future is never resolved
        here."""
        with self._lock:
            return self._pending.pop(future, None)

    def _take(self) -> list[tuple[asyncio.Future[R] | Then[R], I]]:
        with self._lock:
            pending, self._pending, self._queued = self._pending, {}, False
        return list(pending.items())

    async def _persist(self) -> None:
        group: list[tuple[asyncio.Future[R] | Then[R], I]] | None = None

        def op(db: sqlite_utils.Database) -> list[R]:
            nonlocal group
            if group is None:  # the first attempt; a retry writes the same group again
                group = self._take()
            return self._write(db, [item for _, item in group])

        try:
            results = await self._db.persist(op)
        except BaseException as err:
            if group is None:  # never ran (the store closed): fail what it would have taken
                group = self._take()
            for told, _ in group:
                if isinstance(told, asyncio.Future):
                    if not told.done():
                        told.set_exception(err)
                else:
                    _tell(told, None, err)
            if isinstance(err, asyncio.CancelledError):
                raise
            return
        assert group is not None
        for (told, _), result in zip(group, results, strict=True):
            if isinstance(told, asyncio.Future):
                if not told.done():
                    told.set_result(result)
            else:
                _tell(told, result, None)

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` until every item added so far has been written (or failed).

        Past it (the storage still failing) the writes are left: their tasks stay placed or
        running in the file and run again after the restart, as after a crash.
        """
        if self._writing:
            await asyncio.wait(list(self._writing), timeout=timeout_s)


def _tell(then: Then[R], result: R | None, error: BaseException | None) -> None:
    """Call an ``add_then`` callback; its own failure is logged (the others are still told)."""
    try:
        then(result, error)
    except Exception:
        _log.exception("a run record's callback failed")


class Finish(NamedTuple):
    """A task's outcome, its telemetry sample (None: none) and nothing else (a named tuple:
    one is made per task, at a quarter of a frozen dataclass's cost).

    ``started_at``: None when its start is written apart (placed -> running, already or
    in an earlier op); a time when the start is written with it (write-combined: the row
    moves placed -> ``state`` and its ``started_at`` is that time).
    """

    task_id: str
    state: str  # done or failed
    result: dict[str, Any] | None
    error: str | None
    telemetry: dict[str, Any] | None
    started_at: float | None = None


#: a start to write: the task's id and when it was asked (epoch seconds)
Start = tuple[str, float]


def write_started(db: sqlite_utils.Database, starts: Sequence[Start]) -> list[bool]:
    """Mark placed tasks running; per task, False where it is no longer placed.

    ``started_at`` is the write's time (a start is written within a commit of its asking);
    the time asked is for a start taken back and written with its finish.
    """
    now = time.time()
    moved: set[str] = set()
    task_ids = [task_id for task_id, _ in starts]
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

    Per finish, whether its row moved (False: it was no longer running, or placed for one
    written with its start; never expected, logged).
    """
    now = time.time()
    encoded = [_encoded(f) for f in finishes]
    by_statement: dict[tuple[str, bool], list[tuple[Any, ...]]] = {}  # (state, combined)
    for f, (result, _) in zip(finishes, encoded, strict=True):
        if f.started_at is None:
            update: tuple[Any, ...] = (now, result, f.error, f.task_id)
        else:
            update = (f.started_at, now, result, f.error, f.task_id)
        by_statement.setdefault((f.state, f.started_at is not None), []).append(update)
    moved = 0
    for kind, rows in by_statement.items():
        if (statement := _FINISH_SQL.get(kind)) is not None:  # else not written: not moved
            moved += max(db.conn.executemany(statement, rows).rowcount, 0)
    outcome = [True] * len(finishes)
    if moved != len(finishes):  # never expected: a task finishes only once it is running
        _log.error(
            "%s of %s finished tasks were no longer running", len(finishes) - moved, len(finishes)
        )
        outcome = _moved(db, finishes, now)
    shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}  # telemetry rows by columns
    for f in finishes:
        if (sample := f.telemetry) is None:
            continue
        if "ts" in sample or "task_id" in sample:  # never expected: the row's own columns win
            row = {"ts": now, "task_id": f.task_id, **sample}
            shapes.setdefault(tuple(row), []).append(tuple(row.values()))
        else:
            shapes.setdefault(("ts", "task_id", *sample), []).append(
                (now, f.task_id, *sample.values())
            )
    for columns, rows in shapes.items():
        marks = ", ".join("?" for _ in columns)
        db.conn.executemany(f"INSERT INTO telemetry ({', '.join(columns)}) VALUES ({marks})", rows)
    outbox.append_encoded(db, [("task", record) for _, record in encoded], now, outbox_limit)
    return outcome


def _moved(db: sqlite_utils.Database, finishes: Sequence[Finish], now: float) -> list[bool]:
    """Per finish, whether this write moved its row (its state, and ``finished_at`` now)."""
    written: set[tuple[str, str]] = set()
    ids = [f.task_id for f in finishes]
    for i in range(0, len(ids), _IDS_AT_ONCE):
        part = ids[i : i + _IDS_AT_ONCE]
        marks = ", ".join("?" for _ in part)
        cur = db.execute(
            f"SELECT id, state FROM tasks WHERE id IN ({marks}) AND finished_at = ?", [*part, now]
        )
        written.update((task_id, state) for task_id, state in cur.fetchall())
    return [(f.task_id, f.state) in written for f in finishes]


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
    sample = f.telemetry
    if sample is None:
        rest: dict[str, Any] = {"error": f.error}
    elif _RECORD_KEYS.isdisjoint(sample):
        rest = {"error": f.error, **sample}  # the measured fields: the sample but its kind
        rest.pop("kind", None)
    else:  # never expected: a sample naming a record field
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
    tail = outbox.encode(rest)
    return row, f'{head}, "result": {spliced}, {tail[1:]}'


class RunLog:
    """Starts and finishes of tasks on the devices, written a group at a time."""

    def __init__(self, db: Database, outbox_limit: int) -> None:
        self._starts: Gather[Start, bool] = Gather(db, write_started)
        self._finishes: Gather[Finish, bool] = Gather(
            db, lambda conn, items: write_finished(conn, items, outbox_limit)
        )

    def started(self, task_id: str) -> asyncio.Future[bool]:
        """Record the start (placed -> running); resolves False if it was no longer placed."""
        return self._starts.add((task_id, time.time()))

    def take_back_start(self, started: asyncio.Future[bool]) -> float | None:
        """Withdraw a start the writer has not taken (``started``: its future, from
        ``started``); return when it was asked, to be written with the task's finish
        (``Finish.started_at``), or None: it is being or has been written. A withdrawn
        start's future is the caller's to resolve."""
        start = self._starts.take_back(started)
        return None if start is None else start[1]

    def finished(self, finish: Finish) -> asyncio.Future[bool]:
        """Record the outcome; resolves once it is durable: True, or False where the row
        was no longer running (placed, for a finish written with its start)."""
        return self._finishes.add(finish)

    def finished_then(self, finish: Finish, then: Then[bool]) -> None:
        """``finished`` without a future: ``then(moved, None)`` once durable, or ``then(None,
        error)`` (``Gather.add_then``)."""
        self._finishes.add_then(finish, then)

    async def drain(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s`` each) for the starts and finishes recorded so far."""
        await self._starts.drain(timeout_s)
        await self._finishes.drain(timeout_s)
