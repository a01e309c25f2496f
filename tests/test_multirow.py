"""Many rows in a few statements: the placement's write and the outbox step SQLite a few times.

``multirow.insert_rows`` and ``where_ids`` take any number of rows in chunks of powers of two
(a few statement texts per table, each under SQLite's smallest limit on bound values), in
order. ``store_batch.record_placed`` moves a batch's placed tasks with one ``UPDATE`` per
(device, emulated) chunk and appends its outbox records with one ``INSERT`` per chunk, where
it stepped both statements once per task (``executemany``); what it writes is unchanged:
the same task rows, decision rows and outbox records, numbered in the same order.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from edge_agent.agent.core import outbox, store_batch
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate
from edge_agent.storage.multirow import MAX_VARIABLES, chunk_sizes, insert_rows, where_ids


def agent_file(tmp_path: Path) -> sqlite_utils.Database:
    conn = sqlite3.connect(tmp_path / "agent.db", isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")
    db = sqlite_utils.Database(conn)
    migrate(db, MIGRATIONS)
    return db


def steps(db: sqlite_utils.Database, seen: list[str]) -> None:
    """Record each statement SQLite runs (an ``executemany`` runs its statement per row)."""
    db.conn.set_trace_callback(seen.append)


@pytest.mark.parametrize("width", [1, 3, 24, 999, 2000])
def test_chunks_are_powers_of_two_under_the_variable_limit(width: int) -> None:
    for n in (0, 1, 2, 55, 64, 1000, 1023):
        sizes = chunk_sizes(n, width)
        assert sum(sizes) == n
        assert all(size & (size - 1) == 0 for size in sizes)  # powers of two
        assert all(size * width <= max(MAX_VARIABLES, width) for size in sizes)
        rest = [size for size in sizes if size != max(sizes)]  # the largest, then each once
        assert rest == sorted(set(rest), reverse=True) and sizes == sorted(sizes, reverse=True)


def test_insert_rows_keeps_order_and_values(tmp_path: Path) -> None:
    db = agent_file(tmp_path)
    db.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY AUTOINCREMENT, a TEXT, b REAL, c)")
    rows = [(f"r{i}", i / 3, None if i % 7 else b"\x00x") for i in range(700)]
    seen: list[str] = []
    steps(db, seen)
    insert_rows(db.conn, "INSERT INTO t (a, b, c)", 3, rows)
    assert len(seen) == len(chunk_sizes(700, 3)) < 10
    found = db.execute("SELECT seq, a, b, c FROM t ORDER BY seq").fetchall()
    assert [r[1:] for r in found] == rows
    assert [r[0] for r in found] == list(range(1, 701))


def test_where_ids_binds_params_ahead_of_each_chunk(tmp_path: Path) -> None:
    db = agent_file(tmp_path)
    db.execute("CREATE TABLE t (id TEXT PRIMARY KEY, x INTEGER, y TEXT)")
    db.conn.executemany("INSERT INTO t VALUES (?, 0, NULL)", [(f"k{i}",) for i in range(600)])
    ids = [f"k{i}" for i in range(0, 600, 2)] + ["missing"]
    seen: list[str] = []
    steps(db, seen)
    where_ids(db.conn, "UPDATE t SET x = ?, y = ? WHERE id IN ({ids})", (5, "s"), ids)
    assert len(seen) == len(chunk_sizes(len(ids), 2)) == 5  # 256 + 32 + 8 + 4 + 1
    changed = db.execute("SELECT id FROM t WHERE x = 5 AND y = 's' ORDER BY id").fetchall()
    assert sorted(r[0] for r in changed) == sorted(ids[:-1])


def test_record_placed_steps_a_few_statements_for_a_batch(tmp_path: Path) -> None:
    db = agent_file(tmp_path)
    n = 100
    ids = store_batch.new_ids(n)
    db.conn.executemany(
        "INSERT INTO tasks (id, contract, state, submitted_at) VALUES (?, '{}', ?, 0)",
        [(task_id, "interrupted" if i == 3 else "queued") for i, task_id in enumerate(ids)],
    )
    db.execute("UPDATE tasks SET state = 'cancelled' WHERE id = ?", (ids[5],))  # not moved

    def row(i: int) -> dict[str, object]:
        if i % 10 == 9:  # not placed: fails
            return {"placed": 0, "device": None, "summary": f"not placed {i}"}
        return {"placed": 1, "device": f"dev{i % 2}", "summary": f"s{i}", "score": i / 4}

    entries = [(task_id, row(i), i % 4 == 0) for i, task_id in enumerate(ids)]
    seen: list[str] = []
    steps(db, seen)
    with db.atomic():
        store_batch.record_placed(db, entries, [], 10_000)
    placed_updates = [s for s in seen if s.startswith("UPDATE tasks SET state = 'placed'")]
    outbox_inserts = [s for s in seen if s.startswith("INSERT INTO outbox")]
    groups: dict[tuple[object, bool], int] = {}  # (device, emulated) -> tasks placed there
    for _, decision, emulated in entries:
        if decision["placed"]:
            key = (decision["device"], emulated)
            groups[key] = groups.get(key, 0) + 1
    assert len(groups) == 3
    # a statement per chunk of each (device, emulated) group: 8 here, not one per task (90)
    assert len(placed_updates) == sum(len(chunk_sizes(k, 2)) for k in groups.values()) == 8
    assert len(outbox_inserts) == len(chunk_sizes(n + n // 10, 3)) == 5  # 110: 64 + 32 + ...
    tasks = dict(db.execute("SELECT id, state || ' ' || ifnull(device, '-') FROM tasks").fetchall())
    for i, task_id in enumerate(ids):
        want = "failed -" if i % 10 == 9 else f"placed dev{i % 2}"
        assert tasks[task_id] == ("cancelled -" if i == 5 else want)
    emulated = db.execute("SELECT id FROM tasks WHERE emulated = 1").fetchall()
    assert {r[0] for r in emulated} == {ids[i] for i in range(0, n, 4) if i % 10 != 9}
    attempts = db.execute("SELECT sum(attempts) FROM tasks").fetchone()[0]
    assert attempts == sum(1 for i in range(n) if i % 10 != 9 and i != 5)
    records = [
        (kind, json.loads(text))
        for kind, text in db.execute("SELECT kind, payload FROM outbox ORDER BY seq")
    ]
    want: list[tuple[str, object]] = []
    for task_id, decision, _ in entries:
        want.append(("decision", store_batch.decision_record(task_id, decision)))
        if not decision["placed"]:
            want.append(("task", {"id": task_id, "state": "failed"}))
    assert records == want
    assert db.execute("SELECT count(*) FROM decisions").fetchone()[0] == n


def test_outbox_appends_in_order_in_a_few_statements(tmp_path: Path) -> None:
    db = agent_file(tmp_path)
    records = [("k", {"i": i}) for i in range(300)]
    seen: list[str] = []
    steps(db, seen)
    with db.atomic():
        outbox.append_many(db, records, 1.0, 10_000)
    assert len([s for s in seen if s.startswith("INSERT INTO outbox")]) == 4  # 256 + 32 + 8 + 4
    found = db.execute("SELECT seq, payload FROM outbox ORDER BY seq").fetchall()
    assert [json.loads(p)["i"] for _, p in found] == list(range(300))
    assert [s for s, _ in found] == list(range(1, 301))
