"""SQLite access for the agent: one writer thread with group commit, a small reader pool.

Every write is a function ``op(db) -> T`` handed to ``Database.write``; the writer thread
runs queued ops back to back in one transaction (each in its own savepoint, so one failing
op does not undo the others), commits once, then resolves each caller's future through
``loop.call_soon_threadsafe``. A caller's future is resolved only after the commit: what it
wrote is durable. Reads run on their own read-only connections in a thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from edge_agent.errors import HetmeshError

_log = logging.getLogger(__name__)

T = TypeVar("T")
Op = Callable[[sqlite_utils.Database], Any]
Migration = tuple[int, str, Callable[[sqlite_utils.Database], None]]

#: Most ops committed in one transaction.
GROUP_LIMIT = 512


class StoreError(HetmeshError):
    """The database could not be opened or written; the agent cannot keep its promises."""


class StoreClosed(StoreError):
    """A write was attempted after the store was closed."""


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


class Database:
    """The agent's SQLite file: ``write`` through one thread, ``read`` through a pool."""

    def __init__(self, path: Path, migrations: Sequence[Migration], readers: int = 2) -> None:
        self.path = path
        self._migrations = migrations
        self._queue: queue.SimpleQueue[
            tuple[Op, asyncio.AbstractEventLoop, asyncio.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="agent-db-writer", daemon=True)
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._closed = False
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="agent-db-read")
        self._local = threading.local()
        self._read_conns: list[sqlite_utils.Database] = []
        self._lock = threading.Lock()
        self.schema_version = 0

    # --- life cycle (blocking: call from a thread, not the loop) -------------------------
    def open(self) -> None:
        """Create the file if needed, migrate, start the writer; StoreError on failure."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"cannot create data directory {self.path.parent}: {err}") from err
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise StoreError(f"cannot open database {self.path}: {self._failure}") from None

    def close(self) -> None:
        """Finish queued writes, stop the writer, close every connection."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        if self._thread.is_alive():
            self._thread.join()
        self._readers.shutdown(wait=True)
        with self._lock:
            for db in self._read_conns:
                db.close()
            self._read_conns.clear()

    # --- writing --------------------------------------------------------------------
    def write(self, op: Callable[[sqlite_utils.Database], T]) -> asyncio.Future[T]:
        """Queue ``op`` for the writer; the future resolves after its transaction commits."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._closed or self._failure is not None:
            future.set_exception(StoreClosed("the agent's store is closed"))
            return future
        self._queue.put((op, loop, future))
        return future

    def _run(self) -> None:
        try:
            db = _connect(self.path, readonly=False)
            self.schema_version = migrate(db, self._migrations)
        except (sqlite3.Error, OSError, StoreError) as err:
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
            db.close()

    @staticmethod
    def _commit(
        db: sqlite_utils.Database,
        group: list[tuple[Op, asyncio.AbstractEventLoop, asyncio.Future[Any]]],
    ) -> None:
        """Run ``group`` in one transaction, then resolve every future."""
        outcomes: list[tuple[bool, Any]] = []
        try:
            with db.atomic():
                for op, _, _ in group:
                    try:
                        with db.atomic():
                            outcomes.append((True, op(db)))
                    except Exception as err:  # the op's own failure, reported to its caller
                        outcomes.append((False, err))
        except sqlite3.Error as err:
            _log.error("database commit failed: %s", err)
            failure = StoreError(f"database commit failed: {err}")
            outcomes = [(False, failure)] * len(group)
        for (_, loop, future), (ok, value) in zip(group, outcomes, strict=True):
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_resolve, future, ok, value)

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
        return fn(db)


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Set a writer outcome on ``future`` unless its caller gave up (cancelled)."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
