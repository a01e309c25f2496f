"""Versioned policy documents and their rollout: selector, canary fraction, health gate, rollback.

A rollout assigns a policy version to the agents its selector matches (labels, ``board``).
First only a canary share gets it; once every canary has applied it (reported it in a
heartbeat) and ``GATE_HEARTBEATS`` heartbeats passed without more than ``max_slo_misses``
new SLO misses on any canary, the rest get it. A canary over the limit rolls every member
of the rollout back to what it had before, and so does a canary phase still open after the
rollout's ``gate_timeout_s`` (a canary that never applies the version, or falls silent).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import sqlite_utils

from cloud_hub.hub.clock import Clock
from cloud_hub.hub.heartbeat_writes import HeartbeatWriter
from edge_agent.errors import InvalidInput
from edge_agent.placement import Policy
from edge_agent.storage.db import Database

#: Heartbeats every canary must send after applying a version before the rollout widens.
GATE_HEARTBEATS = 3


class NotFound(InvalidInput):
    """The named policy, version or rollout does not exist."""


def _rows(
    db: sqlite_utils.Database, sql: str, params: tuple[Any, ...] = ()
) -> list[dict[str, Any]]:
    cur = db.execute(sql, params)
    names = [c[0] for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def matches(agent: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    """Return whether an agent row (labels decoded or JSON) matches every selector pair."""
    labels = agent["labels"]
    labels = json.loads(labels) if isinstance(labels, str) else labels
    return all(
        (agent.get("board") if key == "board" else labels.get(key)) == value
        for key, value in selector.items()
    )


class PolicyBook:
    """Policy versions and rollouts over the hub's database."""

    def __init__(self, db: Database, clock: Clock, heartbeats: HeartbeatWriter) -> None:
        self.db = db
        self.clock = clock
        # the gate counts heartbeats: it waits for those answered before their commit, and
        # tells the writer when assignments change (answers name the assigned policy)
        self.heartbeats = heartbeats

    async def put(self, doc: Any) -> dict[str, Any]:
        """Validate ``doc`` (Policy.from_dict) and store it as the policy's next version."""
        if not isinstance(doc, dict):
            raise InvalidInput("body: expected a policy document (a JSON object)")
        policy = Policy.from_dict({**doc, "version": 1})
        now = self.clock()

        def op(db: sqlite_utils.Database) -> dict[str, Any]:
            (latest,) = db.execute(
                "SELECT coalesce(max(version), 0) FROM policies WHERE name = ?", (policy.name,)
            ).fetchone()
            stored = {**policy.to_dict(), "version": latest + 1}
            db.execute(
                "INSERT INTO policies VALUES (?, ?, ?, ?)",
                (policy.name, latest + 1, json.dumps(stored), now),
            )
            return {"name": policy.name, "version": latest + 1, "document": stored}

        return await self.db.write(op)

    async def history(self, name: str) -> list[dict[str, Any]]:
        """Return every version of ``name``, newest first; NotFound when there is none."""
        sql = "SELECT * FROM policies WHERE name = ? ORDER BY version DESC"
        rows = await self.db.read(lambda db: _rows(db, sql, (name,)))
        if not rows:
            raise NotFound(f"no policy named {name!r}; create it with POST /v1/policies")
        for row in rows:
            row["document"] = json.loads(row["document"])
        return rows

    async def heads(self) -> list[dict[str, Any]]:
        """Return each policy's latest version and its newest rollout."""
        sql = (
            "SELECT p.name, max(p.version) AS latest, count(*) AS versions, "
            "(SELECT json_object('id', r.id, 'version', r.version, 'state', r.state, "
            "'reason', r.reason) FROM rollouts r WHERE r.name = p.name ORDER BY r.id DESC LIMIT 1)"
            " AS rollout FROM policies p GROUP BY p.name ORDER BY p.name"
        )
        rows = await self.db.read(lambda db: _rows(db, sql))
        for row in rows:
            row["rollout"] = json.loads(row["rollout"]) if row["rollout"] else None
        return rows

    async def rollouts(self) -> list[dict[str, Any]]:
        """Return every rollout, newest first."""
        rows = await self.db.read(lambda db: _rows(db, "SELECT * FROM rollouts ORDER BY id DESC"))
        for row in rows:
            row["selector"] = json.loads(row["selector"])
        return rows

    async def start(
        self,
        name: str,
        version: int,
        selector: Mapping[str, str],
        canary_fraction: float,
        max_slo_misses: int,
        gate_timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Start rolling ``name@version`` out to the agents ``selector`` matches.

        ``gate_timeout_s``: seconds the canaries have to pass the health gate (None: no limit).
        """
        if not (math.isfinite(canary_fraction) and 0 < canary_fraction <= 1):
            raise InvalidInput(f"canary_fraction: expected 0 < x <= 1, got {canary_fraction!r}")
        if max_slo_misses < 0:
            raise InvalidInput(f"max_slo_misses: expected >= 0, got {max_slo_misses!r}")
        if gate_timeout_s is not None and not (
            math.isfinite(gate_timeout_s) and gate_timeout_s > 0
        ):
            raise InvalidInput(f"gate_timeout_s: expected a number > 0, got {gate_timeout_s!r}")
        now = self.clock()
        args = (name, version, dict(selector), canary_fraction, max_slo_misses, now)
        await self.heartbeats.settled()  # the gate's base counts every heartbeat answered
        try:
            return await self.db.write(lambda db: _start(db, *args, gate_timeout_s))
        finally:
            self.heartbeats.assignments_changed()

    async def evaluate(self) -> list[dict[str, Any]]:
        """Apply the health gate to every canary rollout; return those promoted or rolled back."""
        await self.heartbeats.settled()  # the gate counts every heartbeat answered so far
        changed = await self.db.write(lambda db: _evaluate(db, self.clock()))
        if changed:  # promoted or rolled back: assignments moved
            self.heartbeats.assignments_changed()
        return changed


def _assign(
    db: sqlite_utils.Database, agent_id: str, name: str, version: int, rid: int, now: float
) -> None:
    db.execute(
        "INSERT INTO assignments SELECT id, ?, ?, ?, ?, slo_misses, heartbeats FROM agents "
        "WHERE id = ? ON CONFLICT (agent_id) DO UPDATE SET name = excluded.name, "
        "version = excluded.version, rollout_id = excluded.rollout_id, "
        "assigned_at = excluded.assigned_at, slo_base = excluded.slo_base, "
        "hb_base = excluded.hb_base",
        (name, version, rid, now, agent_id),
    )


def _start(
    db: sqlite_utils.Database,
    name: str,
    version: int,
    selector: dict[str, str],
    fraction: float,
    max_slo: int,
    now: float,
    gate_timeout_s: float | None = None,
) -> dict[str, Any]:
    if (
        db.execute(
            "SELECT 1 FROM policies WHERE name = ? AND version = ?", (name, version)
        ).fetchone()
        is None
    ):
        raise NotFound(f"no policy {name}@{version}; see GET /v1/policies/{name}")
    targets = [a for a in _rows(db, "SELECT id, labels, board FROM agents") if matches(a, selector)]
    if not targets:
        raise InvalidInput(f"selector {selector!r} matches no enrolled agent")
    db.execute(
        "UPDATE rollouts SET state = 'superseded', updated_at = ? WHERE state = 'canary'", (now,)
    )
    cur = db.execute(
        "INSERT INTO rollouts (name, version, selector, canary_fraction, max_slo_misses, state, "
        "created_at, updated_at, gate_timeout_s) VALUES (?, ?, ?, ?, ?, 'canary', ?, ?, ?)",
        (name, version, json.dumps(selector), fraction, max_slo, now, now, gate_timeout_s),
    )
    rid = int(cur.lastrowid or 0)
    order = sorted(targets, key=lambda a: hashlib.sha256(f"{rid}:{a['id']}".encode()).digest())
    canaries = max(1, math.ceil(fraction * len(order)))
    for i, agent in enumerate(order):
        prev = db.execute(
            "SELECT name, version FROM assignments WHERE agent_id = ?", (agent["id"],)
        ).fetchone()
        db.execute(
            "INSERT INTO rollout_members VALUES (?, ?, ?, ?, ?)",
            (rid, agent["id"], prev[0] if prev else None, prev[1] if prev else None, i < canaries),
        )
        if i < canaries:
            _assign(db, agent["id"], name, version, rid, now)
    if canaries == len(order):
        db.execute("UPDATE rollouts SET state = 'complete' WHERE id = ?", (rid,))
    return _rows(db, "SELECT * FROM rollouts WHERE id = ?", (rid,))[0] | {
        "selector": selector,
        "agents": len(order),
        "canaries": [a["id"] for a in order[:canaries]],
    }


def _evaluate(db: sqlite_utils.Database, now: float) -> list[dict[str, Any]]:
    changed = []
    for r in _rows(db, "SELECT * FROM rollouts WHERE state = 'canary'"):
        canaries = _rows(
            db,
            "SELECT a.id, a.policy, a.slo_misses - s.slo_base AS misses, "
            "a.heartbeats - s.hb_base AS beats FROM rollout_members m "
            "JOIN agents a ON a.id = m.agent_id JOIN assignments s ON s.agent_id = m.agent_id "
            "WHERE m.rollout_id = ? AND m.canary AND s.rollout_id = ?",
            (r["id"], r["id"]),
        )
        failing = [c for c in canaries if c["misses"] > r["max_slo_misses"]]
        if failing:
            worst = max(failing, key=lambda c: c["misses"])
            reason = (
                f"health gate: canary {worst['id']} missed {worst['misses']} SLOs "
                f"(limit {r['max_slo_misses']})"
            )
            _rollback(db, r["id"], reason, now)
            changed.append({**r, "state": "rolled_back", "reason": reason})
            continue
        wanted = f"{r['name']}@{r['version']}"
        waiting = [
            c["id"] for c in canaries if c["policy"] != wanted or c["beats"] < GATE_HEARTBEATS
        ]
        timeout = r["gate_timeout_s"]
        if waiting and timeout is not None and now - r["created_at"] > timeout:
            reason = (
                f"health gate: canary {', '.join(waiting)} did not run {wanted} for "
                f"{GATE_HEARTBEATS} heartbeats within {timeout:g} s"
            )
            _rollback(db, r["id"], reason, now)
            changed.append({**r, "state": "rolled_back", "reason": reason})
            continue
        if canaries and not waiting:
            rest = db.execute(
                "SELECT agent_id FROM rollout_members WHERE rollout_id = ? AND NOT canary",
                (r["id"],),
            ).fetchall()
            for (agent_id,) in rest:
                _assign(db, agent_id, r["name"], r["version"], r["id"], now)
            db.execute(
                "UPDATE rollouts SET state = 'complete', updated_at = ? WHERE id = ?",
                (now, r["id"]),
            )
            changed.append({**r, "state": "complete"})
    return changed


def _rollback(db: sqlite_utils.Database, rid: int, reason: str, now: float) -> None:
    members = db.execute(
        "SELECT m.agent_id, m.prev_name, m.prev_version FROM rollout_members m "
        "JOIN assignments s ON s.agent_id = m.agent_id AND s.rollout_id = m.rollout_id "
        "WHERE m.rollout_id = ?",
        (rid,),
    ).fetchall()
    for agent_id, prev_name, prev_version in members:
        if prev_name is None:
            db.execute("DELETE FROM assignments WHERE agent_id = ?", (agent_id,))
        else:
            db.execute(
                "UPDATE assignments SET name = ?, version = ?, rollout_id = NULL, "
                "assigned_at = ? WHERE agent_id = ?",
                (prev_name, prev_version, now, agent_id),
            )
    db.execute(
        "UPDATE rollouts SET state = 'rolled_back', reason = ?, updated_at = ? WHERE id = ?",
        (reason, now, rid),
    )
