"""The hub's durable state over one SQLite file (WAL, one writer thread): agents, devices, records.

Outbox sync is exactly once: each record is keyed by (agent, seq), so a duplicate is ignored,
and ``acked_seq`` is the highest seq up to which the hub holds every record (or the agent
declared it dropped). Agents resume from ``acked_seq + 1``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import sqlite_utils

from cloud_hub.hub import liveness
from cloud_hub.hub.heartbeat_writes import HeartbeatWriter
from cloud_hub.hub.protocol import new_key
from cloud_hub.hub.schema import MIGRATIONS
from cloud_hub.hub.wire import Enrolment, Heartbeat, SyncBatch
from edge_agent.storage.db import Database, decode_each


def _rows(
    db: sqlite_utils.Database, sql: str, params: tuple[Any, ...] = ()
) -> list[dict[str, Any]]:
    cur = db.execute(sql, params)
    names = [c[0] for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _agent(row: dict[str, Any]) -> dict[str, Any]:
    """Return an agents row for listing: key omitted, JSON columns decoded."""
    del row["key"]
    return row | {"labels": json.loads(row["labels"]), "peers": json.loads(row["peers"])}


def _record(row: dict[str, Any]) -> dict[str, Any]:
    return row | {"payload": json.loads(row["payload"])}


class HubStore:
    """Agents, their devices and synced records; keys are cached in memory for signature checks."""

    def __init__(self, path: Path) -> None:
        self.db = Database(path, MIGRATIONS, repair=f"cloud-hub repair --data-dir {path.parent}")
        self._keys: dict[str, str] = {}
        self.bad_rows = 0  # rows skipped in listings because they cannot be decoded
        self.heartbeats = HeartbeatWriter(self.db)  # heartbeats grouped per transaction

    def open(self) -> None:
        """Open and migrate the database, load the agents' keys (blocking)."""
        self.db.open()
        conn = sqlite3.connect(self.db.path)
        try:
            rows = conn.execute("SELECT id, key FROM agents WHERE key != ''")  # '': released
            self._keys = {str(a): str(k) for a, k in rows}
        finally:
            conn.close()

    def close(self) -> None:
        """Flush queued writes and close (blocking)."""
        self.db.close()

    def key(self, agent_id: str) -> str | None:
        """Return the agent's fleet credential, or None when it never enrolled."""
        return self._keys.get(agent_id)

    def agent_count(self) -> int:
        """Return how many agents are enrolled."""
        return len(self._keys)

    async def release(self, agent_id: str) -> bool:
        """Forget the agent's key, so its id can be enrolled anew (unsigned); False: unknown."""
        if agent_id not in self._keys:
            return False

        def op(db: sqlite_utils.Database) -> None:
            db.execute("UPDATE agents SET key = '' WHERE id = ?", (agent_id,))

        await self.db.write(op)
        self._keys.pop(agent_id, None)
        return True

    async def enrol(self, e: Enrolment, now: float) -> str:
        """Register (or re-register) an agent with a fresh key; return the key."""
        key = new_key()

        def op(db: sqlite_utils.Database) -> None:
            db.execute(
                "INSERT INTO agents (id, key, labels, board, hostname, enrolled_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET key = excluded.key, "
                "labels = excluded.labels, board = excluded.board, hostname = excluded.hostname, "
                "enrolled_at = excluded.enrolled_at",
                (e.agent_id, key, json.dumps(e.labels), e.board, e.hostname, now),
            )
            db.execute(
                "INSERT OR IGNORE INTO sync VALUES (?, 0, 0, 0, 0)",
                (e.agent_id,),
            )

        await self.db.write(op)
        self._keys[e.agent_id] = key
        return key

    async def heartbeat(self, agent_id: str, hb: Heartbeat, now: float) -> dict[str, Any] | None:
        """Record a heartbeat (health, peers, policy, devices); return the policy assigned to it.

        Written in one transaction with the others that arrived meanwhile; returns once it
        is committed, or at once when its agent's policy is known (soft state:
        ``heartbeat_writes``, docs/hub-protocol.md §3).
        """
        return await self.heartbeats.add((agent_id, hb, now))

    async def sync(self, agent_id: str, batch: SyncBatch, now: float) -> dict[str, int]:
        """Apply a batch exactly once; return acked, applied, duplicates, lost (this batch)."""
        return await self.db.write(lambda db: _apply(db, agent_id, batch, now))

    async def sync_state(self, agent_id: str) -> dict[str, Any]:
        """Return the agent's sync counters (acked_seq, applied, duplicates, lost)."""
        rows = await self.db.read(
            lambda db: _rows(db, "SELECT * FROM sync WHERE agent_id = ?", (agent_id,))
        )
        return rows[0] if rows else {"agent_id": agent_id, "acked_seq": 0}

    async def agents(self) -> list[dict[str, Any]]:
        """Return every agent (key omitted) with its sync counters and desired policy."""
        sql = (
            "SELECT a.*, s.acked_seq, s.applied, s.duplicates, s.lost, "
            "p.name AS desired_name, p.version AS desired_version FROM agents a "
            "LEFT JOIN sync s ON s.agent_id = a.id LEFT JOIN assignments p ON p.agent_id = a.id "
            "ORDER BY a.id"
        )
        await self.heartbeats.settled()  # every heartbeat answered so far is in the rows
        # decoded on the reader thread: thousands of rows must not hold the event loop
        rows, bad = await self.db.read(lambda db: decode_each(_rows(db, sql), _agent, "agent"))
        self.bad_rows += bad
        return rows

    async def state_counts(self, now: float, stale_after_s: float) -> dict[str, int]:
        """Return how many agents are in each liveness state at ``now``, counted by SQLite
        (``liveness.COUNT_SQL``: a metrics scrape must not hold the loop decoding every row)."""
        args = {"now": now, "stale": stale_after_s}
        await self.heartbeats.settled()
        found = await self.db.read(lambda db: db.execute(liveness.COUNT_SQL, args).fetchall())
        return liveness.counts(()) | {str(state): int(n) for state, n in found}

    async def devices(self) -> list[dict[str, Any]]:
        """Return every agent's devices as last reported."""
        sql = "SELECT * FROM devices ORDER BY agent_id, device_id"
        await self.heartbeats.settled()
        return await self.db.read(lambda db: _rows(db, sql))

    async def task_outcomes(self, since: float) -> list[tuple[str, str, float | None]]:
        """Return (agent, state, measured latency_s) of tasks that ended at or after ``since``.

        ``since`` is compared with the record's ``created_at``: when the agent's outbox wrote
        it, which is when the task ended (by the agent's clock, within the signing skew).
        """
        sql = (
            "SELECT agent_id, json_extract(payload, '$.state'), "
            "json_extract(payload, '$.latency_s') FROM records "
            "WHERE kind = 'task' AND created_at >= ?"
        )
        rows = await self.db.read(lambda db: db.execute(sql, (since,)).fetchall())
        return [(str(a), str(s), None if x is None else float(x)) for a, s, x in rows]

    async def forget_before(self, cutoff: float) -> int:
        """Delete synced records the hub received before ``cutoff`` (its clock); return how many.

        Only records at or below the agent's ``acked_seq`` go, and ``acked_seq`` stays: a
        resend of a forgotten record is still a duplicate, and a gap is still waited for.
        """

        def op(db: sqlite_utils.Database) -> int:
            cur = db.execute(
                "DELETE FROM records WHERE received_at < ? AND seq <= "
                "(SELECT acked_seq FROM sync WHERE sync.agent_id = records.agent_id)",
                (cutoff,),
            )
            return int(cur.rowcount)

        return await self.db.write(op)

    async def records(self, kind: str, limit: int) -> list[dict[str, Any]]:
        """Return the most recently received records of ``kind``, payload decoded."""
        sql = "SELECT * FROM records WHERE kind = ? ORDER BY received_at DESC, seq DESC LIMIT ?"
        rows = await self.db.read(lambda db: _rows(db, sql, (kind, limit)))
        decoded, bad = decode_each(rows, _record, f"{kind} record")
        self.bad_rows += bad
        return decoded


def _apply(
    db: sqlite_utils.Database, agent_id: str, batch: SyncBatch, now: float
) -> dict[str, int]:
    """Insert new records, skip duplicates, advance ``acked_seq`` over what is now contiguous."""
    (acked,) = db.execute("SELECT acked_seq FROM sync WHERE agent_id = ?", (agent_id,)).fetchone()
    lost = 0
    if batch.dropped_through > acked:
        (held,) = db.execute(
            "SELECT count(*) FROM records WHERE agent_id = ? AND seq > ? AND seq <= ?",
            (agent_id, acked, batch.dropped_through),
        ).fetchone()
        lost = batch.dropped_through - acked - held
        acked = batch.dropped_through
    applied = duplicates = 0
    for r in batch.records:
        if r.seq <= acked:
            duplicates += 1
            continue
        cur = db.execute(
            "INSERT OR IGNORE INTO records VALUES (?, ?, ?, ?, ?, ?)",
            (agent_id, r.seq, r.kind, r.payload, r.created_at, now),
        )
        if cur.rowcount:
            applied += 1
        else:
            duplicates += 1
    ahead = db.execute(
        "SELECT seq FROM records WHERE agent_id = ? AND seq > ? ORDER BY seq", (agent_id, acked)
    )
    for (seq,) in ahead:
        if seq != acked + 1:
            break
        acked = seq
    db.execute(
        "UPDATE sync SET acked_seq = ?, applied = applied + ?, duplicates = duplicates + ?, "
        "lost = lost + ? WHERE agent_id = ?",
        (acked, applied, duplicates, lost, agent_id),
    )
    return {"acked": acked, "applied": applied, "duplicates": duplicates, "lost": lost}
