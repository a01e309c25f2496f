"""The outbox keeps at most its limit; a trim drops ahead, so most writes trim nothing.

Records are appended one write at a time (a transaction each, the agent's schema) past a
limit of 64: the outbox never holds more than 64, a trim leaves 60 (room for the next
``64 // TRIM_AHEAD`` = 4), and every dropped record is counted in ``hub_sync`` as before.
Limits under ``TRIM_AHEAD`` trim at every write past them, as before.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from edge_agent.agent.core import outbox
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate


def agent_file(tmp_path: Path) -> sqlite_utils.Database:
    conn = sqlite3.connect(tmp_path / "agent.db", isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # a commit a record: no fsync needed here
    db = sqlite_utils.Database(conn)
    migrate(db, MIGRATIONS)
    return db


def state(db: sqlite_utils.Database) -> tuple[int, int | None, int, int]:
    """(records kept, the oldest kept seq, dropped, dropped_through)."""
    kept, oldest = db.execute("SELECT count(*), min(seq) FROM outbox").fetchone()
    dropped, through = db.execute(
        "SELECT dropped, dropped_through FROM hub_sync WHERE id = 1"
    ).fetchone()
    return kept, oldest, dropped, through


def append_one(db: sqlite_utils.Database, n: int, limit: int, *, many: bool) -> None:
    with db.atomic():
        if many:
            outbox.append_encoded(db, [("task", f'{{"n": {n}}}')], float(n), limit)
        else:
            outbox.append(db, "task", {"n": n}, float(n), limit)


@pytest.mark.parametrize("many", [False, True])
def test_past_the_limit_a_trim_drops_ahead_and_the_next_writes_trim_nothing(
    tmp_path: Path, many: bool
) -> None:
    db = agent_file(tmp_path)
    limit, room = 64, 4  # 64 // TRIM_AHEAD
    kept_after: list[int] = []
    for n in range(1, 201):
        append_one(db, n, limit, many=many)
        kept, oldest, dropped, through = state(db)
        assert kept <= limit  # the bound holds after every write
        assert kept + dropped == n  # every record is kept or counted dropped
        assert through == (0 if oldest is None else oldest - 1) == dropped
        kept_after.append(kept)
    assert kept_after[:limit] == list(range(1, limit + 1))  # nothing dropped up to the limit
    # the first write past it drops down to limit - room; the next `room` writes drop nothing
    assert kept_after[limit : limit + room + 2] == [60, 61, 62, 63, 64, 60]
    trims = [n for n in range(2, 201) if kept_after[n - 1] < kept_after[n - 2]]
    assert trims == list(range(limit + 1, 201, room + 1))  # one write in room + 1 trims
    assert limit // outbox.TRIM_AHEAD == room


def test_a_limit_under_trim_ahead_trims_at_every_write_past_it(tmp_path: Path) -> None:
    db = agent_file(tmp_path)
    for n in range(1, 31):
        append_one(db, n, 5, many=True)
        kept, _, dropped, through = state(db)
        assert kept == min(n, 5) and dropped == max(0, n - 5) == through
