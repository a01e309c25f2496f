"""SQLite access (agent and hub): one writer thread with group commit, a small reader pool.

Every write is a function ``op(db) -> T`` handed to ``Database.write``; the writer thread
runs queued ops back to back in one transaction (each in its own savepoint, so one failing
op does not undo the others), commits once, then resolves each caller's future through
``loop.call_soon_threadsafe``. A caller's future is resolved only after the commit: what it
wrote is durable. Reads run on their own read-only connections in a thread pool.

A commit the storage refuses (disk full, I/O error) fails the whole group with
``StorageUnavailable``; ``persist`` retries such a write with back-off until it lands, and
``trouble`` says what is failing until a commit succeeds again. The file is checked before
it is used (``integrity.check_at_open``); a clean ``close`` checkpoints the WAL into it.

A write is durable by default (``synchronous = FULL``: its commit is fsynced, so it survives a
power cut). ``write(op, durable=False)`` is for soft state that is sent again anyway (the
hub's heartbeats): a group made only of such ops commits with ``synchronous = NORMAL`` (no
fsync; in WAL mode it still survives ``kill -9`` of the process, and the next durable commit
or checkpoint makes it survive a power cut); one durable op in a group makes it FULL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from edge_agent.errors import HetmeshError
from edge_agent.storage.integrity import DatabaseDamaged, check_at_open, mark_existing

_log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
Op = Callable[[sqlite_utils.Database], Any]
Migration = tuple[int, str, Callable[[sqlite_utils.Database], None]]
#: A queued write: the op, its caller's loop and future, and whether its commit must be fsynced.
_Item = tuple[Op, asyncio.AbstractEventLoop, "asyncio.Future[Any]", bool]

#: Most ops committed in one transaction.
GROUP_LIMIT = 512
#: Each op's savepoint in a group's transaction (``_in_savepoint``): one text, parsed once.
_SAVEPOINT = "SAVEPOINT hetmesh_op"
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT hetmesh_op"
_RELEASE = "RELEASE SAVEPOINT hetmesh_op"
#: ``persist``'s back-off between attempts while the storage fails: first, then doubled to max.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 5.0
#: SQLite primary result codes that say the storage failed, not the data: BUSY, LOCKED, NOMEM,
#: READONLY, IOERR, FULL, CANTOPEN, PROTOCOL. A later attempt may land.
_STORAGE_CODES = frozenset({5, 6, 7, 8, 10, 13, 14, 15})


class StoreError(HetmeshError):
    """The database could not be opened or written; the agent cannot keep its promises."""


class StoreClosed(StoreError):
    """A write was attempted after the store was closed."""


class StorageUnavailable(StoreError):
    """A write did not land because the storage failed (disk full, I/O error); retry later."""


def storage_failed(err: BaseException) -> bool:
    """Whether ``err`` is SQLite saying the storage failed (a retry may land), not the data."""
    code = getattr(err, "sqlite_errorcode", None)
    return isinstance(err, sqlite3.OperationalError) and (
        (code is None and "disk is full" in str(err)) or (code or 0) & 0xFF in _STORAGE_CODES
    )


def _connect(path: Path, *, readonly: bool) -> sqlite_utils.Database:
    """Open ``path`` in autocommit mode (transactions are explicit) and set the pragmas."""
    uri = f"file:{path}?mode=ro" if readonly else f"file:{path}"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    db = sqlite_utils.Database(conn)
    if not readonly:
        db.enable_wal()
        conn.execute("PRAGMA synchronous = FULL")  # survive power loss, not only kill -9
    return db


def migrate(db: sqlite_utils.Database, migrations: Sequence[Migration]) -> int:
    """Apply the migrations newer than the recorded schema version; return the version."""
    with db.atomic():
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
    row = db.execute("SELECT max(version) FROM schema_migrations").fetchone()
    current = int(row[0] or 0)
    known = max((v for v, _, _ in migrations), default=0)
    if current > known:
        raise StoreError(f"database schema v{current} is newer than this agent (v{known})")
    for version, description, apply in sorted(migrations, key=lambda m: m[0]):
        if version <= current:
            continue
        with db.atomic():
            apply(db)
            db.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                (version, description, time.time()),
            )
        _log.info("database migrated to v%s: %s", version, description)
        current = version
    return current


def decode_each(rows: Iterable[R], decode: Callable[[R], T], what: str) -> tuple[list[T], int]:
    """Return the rows ``decode`` accepts and how many it refused (each logged, then skipped):
    one damaged row must not fail a whole listing."""
    out, bad = [], 0
    for row in rows:
        try:
            out.append(decode(row))
        except (ValueError, TypeError, KeyError) as err:
            bad += 1
            key = row.get("id") if isinstance(row, dict) else None
            _log.error("%s row %s is damaged, skipped: %s", what, key or "?", err)
    return out, bad


class Database:
    """The agent's SQLite file: ``write`` through one thread, ``read`` through a pool."""

    def __init__(
        self, path: Path, migrations: Sequence[Migration], repair: str = "", readers: int = 2
    ) -> None:
        self.path = path
        self._migrations = migrations
        self.repair = repair  # the command that salvages this file, named in errors
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="agent-db-writer", daemon=True)
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._closed = False
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="agent-db-read")
        self._local = threading.local()
        self._read_conns: list[sqlite_utils.Database] = []
        self._lock = threading.Lock()
        self.schema_version = 0
        self.trouble: str | None = None  # why the last commit failed; None once one lands
        self.damaged: str | None = None  # a read found the file damaged (found after start)
        self.failed_commits = 0
        self.retrying = 0  # ``persist`` calls waiting for the storage to come back
        self._synchronous = "FULL"  # the writer connection's level (``_connect`` sets FULL)

    # --- life cycle (blocking: call from a thread, not the loop) -------------------------
    def open(self) -> None:
        """Create the file if needed, migrate, start the writer; StoreError on failure."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"cannot create data directory {self.path.parent}: {err}") from err
        self._thread.start()
        self._ready.wait()
        if isinstance(self._failure, DatabaseDamaged):
            raise self._failure
        if self._failure is not None:
            raise StoreError(f"cannot open database {self.path}: {self._failure}") from None

    def close(self) -> None:
        """Finish queued writes, close the readers, checkpoint the WAL and stop the writer."""
        if self._closed:
            return
        self._closed = True
        self._readers.shutdown(wait=True)
        with self._lock:  # first: an open reader would keep the WAL from being truncated
            for db in self._read_conns:
                db.close()
            self._read_conns.clear()
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join()

    # --- writing --------------------------------------------------------------------
    def write(
        self, op: Callable[[sqlite_utils.Database], T], *, durable: bool = True
    ) -> asyncio.Future[T]:
        """Queue ``op`` for the writer; the future resolves after its transaction commits
        (fsynced unless ``durable`` is False and no durable op shares the transaction)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._closed or self._failure is not None:
            future.set_exception(StoreClosed("the agent's store is closed"))
            return future
        self._queue.put((op, loop, future, durable))
        return future

    async def persist(self, op: Callable[[sqlite_utils.Database], T]) -> T:
        """Write ``op``, retrying with back-off while the storage fails, until it lands.

        For state an accepted task cannot lose (placed, started, finished): the caller keeps
        owning the task meanwhile. Raises only when the store closes or ``op`` itself fails.
        """
        delay = RETRY_FIRST_S
        waiting = False
        try:
            while True:
                try:
                    return await self.write(op)
                except StorageUnavailable:
                    if not waiting:
                        waiting = True
                        self.retrying += 1
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
        finally:
            if waiting:
                self.retrying -= 1

    def _run(self) -> None:
        try:
            check_at_open(self.path, self.repair)
            db = _connect(self.path, readonly=False)
            self.schema_version = migrate(db, self._migrations)
            mark_existing(self.path)
        except Exception as err:  # reported by ``open``; the writer never starts
            self._failure = err
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    break
                group = [first]
                stop = False
                while len(group) < GROUP_LIMIT:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        stop = True
                        break
                    group.append(item)
                self._commit(db, group)
                if stop:
                    break
        finally:
            with contextlib.suppress(sqlite3.Error):  # a clean stop leaves no -wal behind
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()

    def _commit(
        self,
        db: sqlite_utils.Database,
        group: list[_Item],
    ) -> None:
        """Run ``group`` in one transaction, then resolve every future.

        An op's own error is its caller's alone (its savepoint is undone); a storage error,
        in an op or at the commit, fails the whole group: SQLite may have rolled it all back.
        """
        outcomes: list[tuple[bool, Any]] = []
        level = "FULL" if any(item[3] for item in group) else "NORMAL"
        try:
            if level != self._synchronous:  # only outside a transaction
                db.execute(f"PRAGMA synchronous = {level}")
                self._synchronous = level
            with db.atomic():
                for op, _, _, _ in group:
                    try:
                        outcomes.append((True, _in_savepoint(db, op)))
                    except Exception as err:
                        if storage_failed(err):
                            raise
                        outcomes.append((False, err))
        except sqlite3.Error as err:
            outcomes = [(False, self._failed(err))] * len(group)
        else:
            if self.trouble is not None:
                _log.warning(
                    "database %s writable again after %s failed commits",
                    self.path,
                    self.failed_commits,
                )
            self.trouble = None
        for (_, loop, future, _), (ok, value) in zip(group, outcomes, strict=True):
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_resolve, future, ok, value)

    def _failed(self, err: sqlite3.Error) -> StoreError:
        """Note a failed commit (logged once per episode); return the error its callers get."""
        self.failed_commits += 1
        if not storage_failed(err):
            _log.error("database %s: commit failed: %s", self.path, err)
            return StoreError(f"database commit failed: {err}")
        if self.trouble is None:
            _log.error("database %s: cannot write (%s); retrying until it can", self.path, err)
        self.trouble = f"cannot write {self.path}: {err}"
        return StorageUnavailable(self.trouble)

    # --- reading --------------------------------------------------------------------
    async def read(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        """Return ``fn(db)`` run on a read-only connection in the reader pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._read, fn)

    def _read(self, fn: Callable[[sqlite_utils.Database], T]) -> T:
        db: sqlite_utils.Database | None = getattr(self._local, "db", None)
        if db is None:
            db = _connect(self.path, readonly=True)
            self._local.db = db
            with self._lock:
                self._read_conns.append(db)
        try:
            return fn(db)
        except sqlite3.DatabaseError as err:
            if type(err) is not sqlite3.DatabaseError:  # a query's own error, not the file's
                raise
            self.damaged = f"{self.path} cannot be read ({err})"
            steps = f": stop the service and run `{self.repair}`" if self.repair else ""
            raise StoreError(f"database {self.damaged}{steps}") from err


def _in_savepoint(db: sqlite_utils.Database, op: Op) -> Any:
    """Return ``op(db)`` run in its own savepoint: undone alone if it raises.

    ``sqlite_utils``' nested ``atomic`` names each savepoint afresh (a random name): two
    statements that SQLite parses again for every op. One name for every op keeps them in
    the connection's statement cache (a savepoint of that name inside the op still nests).
    """
    conn = db.conn
    conn.execute(_SAVEPOINT)
    try:
        value = op(db)
    except BaseException:
        if conn.in_transaction:  # an error may have ended the whole transaction already
            conn.execute(_ROLLBACK_TO)
            conn.execute(_RELEASE)
        raise
    conn.execute(_RELEASE)
    return value


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Set a writer outcome on ``future`` unless its caller gave up (cancelled)."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
