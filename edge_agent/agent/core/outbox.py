"""The hub outbox: records numbered 1, 2, 3, … (seq), bounded, with what was dropped unsent.

``append`` runs inside a store write, in the same transaction as the change it reports, so a
record exists exactly when its change does. Past ``limit`` records the oldest are dropped;
``hub_sync.dropped_through`` (the highest seq dropped unsent) tells the hub which it will
never get (docs/hub-protocol.md §4).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import sqlite_utils

from edge_agent.storage.db import Database

#: a trim keeps ``limit - limit // TRIM_AHEAD`` records: room for the next appends (``_trim``)
TRIM_AHEAD = 16


def plain(value: Any) -> Any:
    """Return ``value`` with non-finite floats as None (JSON has no Infinity or NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


#: ``json.dumps(..., allow_nan=False)`` builds an encoder per call; this one is built once
_STRICT = json.JSONEncoder(allow_nan=False)
#: and ``JSONEncoder.encode`` builds its C encoder per call (about 2.5 µs of a 6 µs record,
#: twice a finished task): this one, with ``_STRICT``'s settings, is built once. It keeps no
#: circular-reference markers (shared markers would be left stale by an error), so a
#: circular value raises RecursionError, not ValueError; records are built from JSON data.
_make: Callable[..., Callable[[Any, int], Sequence[str]]] | None = getattr(
    json.encoder, "c_make_encoder", None
)  # the C accelerator's constructor (untyped in typeshed); None without the accelerator
_C_STRICT = (
    None
    if _make is None
    else _make(
        None,
        _STRICT.default,
        json.encoder.encode_basestring_ascii,
        None,
        ": ",
        ", ",
        False,
        False,
        False,
    )
)


def strict_json(value: Any) -> str:
    """Return ``value`` as JSON; ValueError on a non-finite float (``json.dumps`` otherwise)."""
    if _C_STRICT is None or isinstance(value, str):
        return _STRICT.encode(value)
    return "".join(_C_STRICT(value, 0))


def encode(payload: dict[str, Any]) -> str:
    """Return ``payload`` as JSON, non-finite floats as null (the C encoder when all are finite)."""
    try:
        return strict_json(payload)
    except ValueError:  # an inf or NaN somewhere: walk it
        return json.dumps(plain(payload))


def append(
    db: sqlite_utils.Database, kind: str, payload: dict[str, Any], now: float, limit: int
) -> None:
    """Add one record (inside the caller's write); drop the oldest past ``limit``."""
    cur = db.execute(
        "INSERT INTO outbox (kind, payload, created_at) VALUES (?, ?, ?)",
        (kind, encode(payload), now),
    )
    _trim(db, cur.lastrowid, limit)


def append_many(
    db: sqlite_utils.Database, records: list[tuple[str, dict[str, Any]]], now: float, limit: int
) -> None:
    """Add (kind, payload) records in order (inside the caller's write); trim once."""
    append_encoded(db, [(kind, encode(payload)) for kind, payload in records], now, limit)


def append_encoded(
    db: sqlite_utils.Database, records: list[tuple[str, str]], now: float, limit: int
) -> None:
    """Add (kind, payload as ``encode`` writes it) records in order; trim once."""
    if not records:
        return
    db.conn.executemany(
        "INSERT INTO outbox (kind, payload, created_at) VALUES (?, ?, ?)",
        [(kind, text, now) for kind, text in records],
    )
    (newest,) = db.execute("SELECT max(seq) FROM outbox").fetchone()
    _trim(db, newest, limit)


def _trim(db: sqlite_utils.Database, newest: int | None, limit: int) -> None:
    """Once a record older than the newest ``limit`` is kept, drop every record older than
    the newest ``limit - limit // TRIM_AHEAD`` (recording what was dropped unsent).

    At most ``limit`` records are kept, and a trim makes room for the next
    ``limit // TRIM_AHEAD`` (limits under ``TRIM_AHEAD``: none, each write trims): an
    agent no hub empties trims once every that many records, not every write. A trim per
    write deleted a few rows from the table's first pages in every commit: about 5-10 µs of
    the writer's CPU a record (``docs/performance.md``, run path, session 11).
    """
    if newest is None or newest <= limit:
        return
    (oldest,) = db.execute("SELECT min(seq) FROM outbox").fetchone()
    if oldest is None or oldest > newest - limit:
        return
    cutoff = newest - (limit - limit // TRIM_AHEAD)
    count, highest = db.execute(
        "SELECT count(*), max(seq) FROM outbox WHERE seq <= ?", (cutoff,)
    ).fetchone()
    if count:
        db.execute("DELETE FROM outbox WHERE seq <= ?", (cutoff,))
        db.execute(
            "UPDATE hub_sync SET dropped = dropped + ?, "
            "dropped_through = max(dropped_through, ?) WHERE id = 1",
            (count, highest),
        )


class Outbox:
    """Reading and acknowledging the outbox over the agent's database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def after(self, seq: int, limit: int) -> list[dict[str, Any]]:
        """Return up to ``limit`` records with seq > ``seq``, oldest first, as sync records."""

        def op(db: sqlite_utils.Database) -> list[dict[str, Any]]:
            rows = db.execute(
                "SELECT seq, kind, payload, created_at FROM outbox WHERE seq > ? "
                "ORDER BY seq LIMIT ?",
                (seq, limit),
            ).fetchall()
            return [
                {"seq": s, "kind": k, "payload": json.loads(p), "created_at": c}
                for s, k, p, c in rows
            ]

        return await self.db.read(op)

    async def acknowledge(self, acked: int) -> None:
        """Forget the records the hub holds (seq <= ``acked``) and remember the point."""

        def op(db: sqlite_utils.Database) -> None:
            db.execute("DELETE FROM outbox WHERE seq <= ?", (acked,))
            db.execute("UPDATE hub_sync SET acked = max(acked, ?) WHERE id = 1", (acked,))

        await self.db.write(op)

    async def state(self) -> dict[str, int]:
        """Return acked, dropped_through, dropped, pending (records not yet acknowledged)."""

        def op(db: sqlite_utils.Database) -> dict[str, int]:
            acked, through, dropped = db.execute(
                "SELECT acked, dropped_through, dropped FROM hub_sync WHERE id = 1"
            ).fetchone()
            (pending,) = db.execute(
                "SELECT count(*) FROM outbox WHERE seq > ?", (acked,)
            ).fetchone()
            return {
                "acked": int(acked),
                "dropped_through": int(through),
                "dropped": int(dropped),
                "pending": int(pending),
            }

        return await self.db.read(op)
