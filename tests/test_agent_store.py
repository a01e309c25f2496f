"""The agent's SQLite store: migrations, WAL, group commit, idempotency, recovery."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from edge_agent.agent.core import store_batch
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.store import IdempotencyConflict, Store
from edge_agent.placement import Requirements, Semantics, TaskContract
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import Database, StoreClosed, StoreError, migrate

pytestmark = pytest.mark.asyncio

#: The schema version a freshly opened store reaches: the newest migration's.
LATEST = max(version for version, _, _ in MIGRATIONS)


def new(key: str | None = None, gflops: float = 1.0) -> NewTask:
    return NewTask(TaskContract(Semantics(gflops)), f"hash-{gflops}", key)


async def opened(path: Path) -> Store:
    store = Store(path)
    await asyncio.to_thread(store.open)
    return store


async def test_schema_wal_and_reopen(tmp_path: Path) -> None:
    store = await opened(tmp_path / "a.db")
    assert store.db.schema_version == LATEST
    await asyncio.to_thread(store.close)
    conn = sqlite3.connect(tmp_path / "a.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {
        "tasks",
        "decisions",
        "telemetry",
        "outbox",
        "policy_versions",
        "model_versions",
        "schema_migrations",
    } <= tables
    conn.close()
    store = await opened(tmp_path / "a.db")  # migrations are not applied twice
    assert store.db.schema_version == LATEST
    await asyncio.to_thread(store.close)


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    store = await opened(tmp_path / "a.db")
    await asyncio.to_thread(store.close)
    conn = sqlite3.connect(tmp_path / "a.db")
    conn.execute("INSERT INTO schema_migrations VALUES (99, 'future', 0)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer than this agent"):
        await opened(tmp_path / "a.db")


async def test_idempotency_and_atomic_batches(tmp_path: Path) -> None:
    store = await opened(tmp_path / "a.db")
    [(first, created)] = await store.submit([new("k")])
    assert created
    results = await asyncio.gather(*(store.submit([new("k")]) for _ in range(20)))
    assert {r[0][0]["id"] for r in results} == {first["id"]}
    assert not any(r[0][1] for r in results)
    with pytest.raises(IdempotencyConflict):
        await store.submit([new("other"), new("k", gflops=2.0)])  # the whole batch rolls back
    assert (await store.counts())["queued"] == 1
    await asyncio.to_thread(store.close)


async def test_one_failing_op_does_not_undo_its_group(tmp_path: Path) -> None:
    db = Database(tmp_path / "g.db", [(1, "t", lambda d: d.execute("CREATE TABLE t (x)"))])
    await asyncio.to_thread(db.open)

    def insert(value: int) -> None:
        def op(d: sqlite_utils.Database) -> None:
            d.execute("INSERT INTO t VALUES (?)", (value,))
            if value == 3:
                raise ValueError("bad op")

        return op  # type: ignore[return-value]

    futures = [db.write(insert(i)) for i in range(6)]  # queued together: one group commit
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert isinstance(results[3], ValueError)
    rows = await db.read(lambda d: [r[0] for r in d.execute("SELECT x FROM t").fetchall()])
    assert sorted(rows) == [0, 1, 2, 4, 5]
    await asyncio.to_thread(db.close)
    with pytest.raises(StoreClosed):
        await db.write(insert(7))


async def test_every_op_savepoint_is_one_statement_text(tmp_path: Path) -> None:
    """Each op runs in a savepoint of one fixed name (parsed once, kept in the statement
    cache), across groups; a failing op is still undone alone, even one that nests its own
    ``atomic`` inside."""
    db = Database(tmp_path / "s.db", [(1, "t", lambda d: d.execute("CREATE TABLE t (x)"))])
    await asyncio.to_thread(db.open)
    seen: list[str] = []
    await db.write(lambda d: d.conn.set_trace_callback(seen.append))

    def insert(value: int, *, nested: bool = False) -> None:
        def op(d: sqlite_utils.Database) -> None:
            if nested:
                with d.atomic():
                    d.execute("INSERT INTO t VALUES (?)", (value,))
            else:
                d.execute("INSERT INTO t VALUES (?)", (value,))
            if value % 3 == 2:
                raise ValueError("bad op")

        return op  # type: ignore[return-value]

    for first in (0, 10, 20):  # three groups, one after the other
        group = [db.write(insert(first + i, nested=i % 2 == 1)) for i in range(6)]
        results = await asyncio.gather(*group, return_exceptions=True)
        assert [isinstance(r, ValueError) for r in results] == [
            (first + i) % 3 == 2 for i in range(6)
        ]
    rows = await db.read(lambda d: sorted(r[0] for r in d.execute("SELECT x FROM t")))
    assert rows == [v for f in (0, 10, 20) for v in range(f, f + 6) if v % 3 != 2]
    ops = [s for s in seen if s.startswith("SAVEPOINT") and "sqlite_utils" not in s]
    assert len(ops) == 18  # one savepoint per op (the nested ones are sqlite_utils')
    assert len(set(ops)) == 1  # all of one text
    await asyncio.to_thread(db.close)


async def test_recover_marks_interrupted_and_returns_waiting(tmp_path: Path) -> None:
    store = await opened(tmp_path / "a.db")
    rows = [r for r, _ in await store.submit([new(None, g) for g in (1.0, 2.0, 3.0)])]
    decision = {"placed": 1, "device": "cpu0", "summary": "cpu0"}
    await store.placed([(rows[0]["id"], decision, False), (rows[1]["id"], decision, False)])
    assert await store.started(rows[1]["id"])
    await asyncio.to_thread(store.close)  # as if the agent died here
    store = await opened(tmp_path / "a.db")
    waiting = await store.recover()
    assert [r["id"] for r in waiting] == [r["id"] for r in rows]
    assert [r["state"] for r in waiting] == ["interrupted", "interrupted", "queued"]
    found = await store.cancel(rows[2]["id"], ("queued",))
    assert found is not None and found[0]["state"] == "cancelled" and found[1] == "queued"
    assert await store.cancel("missing", ("queued",)) is None
    await asyncio.to_thread(store.close)


async def test_new_rows_leave_their_null_columns_out_of_the_insert() -> None:
    """A plain submission's NULL columns (key, command, deadline, deferral) are not bound
    (``store_batch.insert_new``): each insert names only its row's values, the rows go in
    in order, and every column reads back as ``new_rows`` built it."""
    db = sqlite_utils.Database(sqlite3.connect(":memory:", isolation_level=None))
    migrate(db, MIGRATIONS)
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    plan = {"not_before": 5.0, "latest_start": 9.0}
    urgent = TaskContract(Semantics(1.0), Requirements(deadline_s=3.0))
    tasks = [
        new(),
        NewTask(urgent, "h2", "k2", command=("echo", "hi")),
        NewTask(TaskContract(Semantics(2.0)), "h3", deferral=plan),
        new(),
    ]
    rows = [row for _, row in store_batch.new_rows(tasks, 100.0, {}) if row is not None]
    store_batch.insert_new(db, rows)
    inserts = [s for s in statements if s.startswith("INSERT INTO tasks")]
    assert len(inserts) == 4  # one statement per run of one shape: each row its own here
    for text, row in zip(inserts, rows, strict=True):
        for column, value in row.items():
            assert (f"{column}," in text or f"{column})" in text) == (value is not None)
    got = [dict(r) for r in db.query("SELECT * FROM tasks ORDER BY rowid")]
    assert [{k: r[k] for k in store_batch.TASK_COLUMNS} for r in got] == rows
