"""Many rows in a few SQLite statements: multi-row ``INSERT ... VALUES`` and ``WHERE id IN``.

``executemany`` steps its statement once per row, and Python's ``sqlite3`` releases and
retakes the GIL around every step and reset: on the writer thread each is a point where the
event loop's thread may take the GIL and keep it. One statement over many rows is one step
and about half the writer's CPU a row (``docs/performance.md``, intake path, session 12).

Rows go in chunks whose sizes are powers of two (largest first), so that a statement's text
is one of a few per table and stays in the connection's statement cache; a chunk never binds
more than ``MAX_VARIABLES`` values, SQLite's smallest default limit. Rows are inserted in
the order given (an AUTOINCREMENT key numbers them in that order).
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Sequence
from typing import Any

#: The most ``?`` values one statement binds: SQLITE_MAX_VARIABLE_NUMBER before SQLite 3.32.
MAX_VARIABLES = 999


def chunk_sizes(n: int, width: int) -> list[int]:
    """Return how many rows of ``width`` values each statement takes, to take ``n`` in all."""
    largest = 1 << max(0, (MAX_VARIABLES // max(width, 1)).bit_length() - 1)
    sizes = [largest] * (n // largest)
    rest = n % largest
    while rest:
        size = 1 << (rest.bit_length() - 1)
        sizes.append(size)
        rest -= size
    return sizes


@functools.lru_cache(maxsize=256)
def _marks(rows: int, width: int) -> str:
    """Return ``(?, ?), (?, ?)`` for ``rows`` rows of ``width`` values."""
    return ", ".join([f"({_list(width)})"] * rows)


@functools.lru_cache(maxsize=256)
def _list(n: int) -> str:
    """Return ``?, ?, ?`` with ``n`` marks."""
    return ", ".join("?" * n)


def insert_rows(
    conn: sqlite3.Connection, head: str, width: int, rows: Sequence[Sequence[Any]]
) -> None:
    """Run ``head VALUES (...), (...)`` for ``rows`` (each ``width`` values), in order.

    ``head`` is ``INSERT INTO table (columns)`` with our own column names, never input.
    """
    start = 0
    for size in chunk_sizes(len(rows), width):
        values = list(itertools.chain.from_iterable(rows[start : start + size]))
        conn.execute(f"{head} VALUES {_marks(size, width)}", values)
        start += size


def where_ids(
    conn: sqlite3.Connection, sql: str, params: Sequence[Any], ids: Sequence[Any]
) -> None:
    """Run ``sql`` (its ``{ids}`` standing for ``?, ?, ...``) over ``ids``, a few at a time.

    ``params`` (a few) are bound ahead of each chunk's ids (the ``?`` before ``{ids}``).
    """
    start = 0
    for size in chunk_sizes(len(ids), 2):  # at most 256 ids and the params: under the limit
        conn.execute(sql.format(ids=_list(size)), [*params, *ids[start : start + size]])
        start += size
