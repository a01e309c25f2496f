"""Many rows in few statement steps: multi-row ``INSERT`` and ``UPDATE ... FROM (VALUES ...)``.

``sqlite3``'s ``executemany`` steps its statement once per row and releases the GIL around
every step, so the writer thread waits for the GIL once per row (up to Python's 5 ms switch
interval while the event loop is busy). These write a group of rows in chunks of a few fixed
sizes (``CHUNKS``) instead: one step per chunk, and each chunk's SQL one of a few texts, so
``sqlite3``'s statement cache keeps them prepared (a statement per exact size would be
prepared anew for nearly every group). Rows are bound and stored in the order given.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

#: Rows per statement step, largest first (a group of 75 rows: 64 + 4 + 4 + 1 + 1 + 1 steps).
CHUNKS = (64, 16, 4, 1)


def chunks(rows: Sequence[Sequence[Any]]) -> Iterator[tuple[int, list[Any]]]:
    """Yield (rows in the chunk, their values flattened) covering ``rows`` in order."""
    at, left = 0, len(rows)
    for size in CHUNKS:
        while left >= size:
            flat: list[Any] = []
            for row in rows[at : at + size]:
                flat.extend(row)
            yield size, flat
            at, left = at + size, left - size


@functools.lru_cache(maxsize=64)
def _values(width: int, size: int) -> str:
    one = f"({', '.join('?' * width)})"
    return ", ".join([one] * size)


def insert_rows(
    conn: sqlite3.Connection, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> None:
    """``INSERT INTO table (columns) VALUES (...)`` of every row, in ``CHUNKS``-size steps."""
    head = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
    for size, flat in chunks(rows):
        conn.execute(head + _values(len(columns), size), flat)


def update_rows(
    conn: sqlite3.Connection, sql: str, width: int, rows: Sequence[Sequence[Any]]
) -> None:
    """Run ``sql`` (an ``UPDATE ... FROM ({values}) AS v WHERE ...`` naming v's columns
    ``column1``... as SQLite does) with ``{values}`` a chunk of ``rows`` of ``width`` values."""
    for size, flat in chunks(rows):
        conn.execute(sql.format(values="VALUES " + _values(width, size)), flat)
