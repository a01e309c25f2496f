"""Chunked multi-row writes (``storage.rows``): the same rows as one statement per row, in
order, in a few fixed statement texts, one statement step per chunk."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, cast

import pytest

from edge_agent.storage.rows import CHUNKS, chunks, insert_rows, update_rows

UPDATE = (
    "UPDATE t SET a = v.column2, b = v.column3, state = 'placed' FROM ({values}) AS v "
    "WHERE t.id = v.column1 AND +state = 'queued'"
)


class _Seen:
    """A connection that records the SQL text of each ``execute`` (before binding)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn, self.sql = conn, list[str]()

    def execute(self, sql: str, params: Sequence[Any]) -> sqlite3.Cursor:
        self.sql.append(sql)
        return self.conn.execute(sql, params)


def _table() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, id TEXT UNIQUE, a, b, state TEXT)")
    return conn


def _rows(n: int) -> list[tuple[object, ...]]:
    return [(f"id{i}", i, i / 7 if i % 3 else None, "queued") for i in range(n)]


@pytest.mark.parametrize("n", [0, 1, 3, 4, 15, 16, 17, 63, 64, 65, 150])
def test_rows_are_inserted_in_order_as_one_statement_per_row_inserts_them(n: int) -> None:
    chunked, each = _table(), _table()
    seen = _Seen(chunked)
    insert_rows(cast(sqlite3.Connection, seen), "t", ("id", "a", "b", "state"), _rows(n))
    each.executemany("INSERT INTO t (id, a, b, state) VALUES (?, ?, ?, ?)", _rows(n))
    read = "SELECT seq, id, a, b, typeof(b), state FROM t ORDER BY seq"
    assert chunked.execute(read).fetchall() == each.execute(read).fetchall()
    sizes = [size for size, _ in chunks(_rows(n))]
    assert sum(sizes) == n and all(size in CHUNKS for size in sizes)
    assert sizes == sorted(sizes, reverse=True)  # the largest chunks first
    assert len(seen.sql) == len(sizes)  # one statement per chunk
    assert len(set(seen.sql)) <= len(CHUNKS)  # few texts: the statement cache keeps them


@pytest.mark.parametrize("n", [1, 5, 16, 70])
def test_updates_move_exactly_the_rows_named_and_still_in_the_state_asked(n: int) -> None:
    conn = _table()
    insert_rows(conn, "t", ("id", "a", "b", "state"), _rows(n + 3))
    conn.execute("UPDATE t SET state = 'cancelled' WHERE id = 'id0'")  # moved meanwhile
    update_rows(conn, UPDATE, 3, [(f"id{i}", -i, f"dev{i}") for i in range(n)])
    got = {r[0]: r[1:] for r in conn.execute("SELECT id, a, b, state FROM t")}
    assert got["id0"] == (0, None, "cancelled")
    for i in range(1, n):
        assert got[f"id{i}"] == (-i, f"dev{i}", "placed")
    for i in range(n, n + 3):  # not named: untouched
        assert got[f"id{i}"][2] == "queued"
