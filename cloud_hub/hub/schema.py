"""The hub database's schema, as numbered migrations (applied once each, in order)."""

from __future__ import annotations

import sqlite_utils

from edge_agent.storage.db import Migration


def _v1(db: sqlite_utils.Database) -> None:
    db.execute(
        "CREATE TABLE agents (id TEXT PRIMARY KEY, key TEXT NOT NULL, labels TEXT NOT NULL, "
        "board TEXT, hostname TEXT, version TEXT, enrolled_at REAL NOT NULL, last_seen REAL, "
        "status TEXT, problem TEXT, peers TEXT NOT NULL DEFAULT '[]', policy TEXT, "
        "queue_depth INTEGER, outbox_pending INTEGER, outbox_dropped INTEGER, "
        "slo_misses INTEGER NOT NULL DEFAULT 0, heartbeats INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute(
        "CREATE TABLE devices (agent_id TEXT NOT NULL, device_id TEXT NOT NULL, kind TEXT, "
        "name TEXT, utilization REAL, queued_s REAL, health TEXT, updated_at REAL NOT NULL, "
        "PRIMARY KEY (agent_id, device_id))"
    )
    db.execute(
        "CREATE TABLE sync (agent_id TEXT PRIMARY KEY, acked_seq INTEGER NOT NULL, "
        "applied INTEGER NOT NULL, duplicates INTEGER NOT NULL, lost INTEGER NOT NULL)"
    )
    db.execute(
        "CREATE TABLE records (agent_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, "
        "payload TEXT NOT NULL, created_at REAL NOT NULL, received_at REAL NOT NULL, "
        "PRIMARY KEY (agent_id, seq))"
    )
    db.execute("CREATE INDEX records_kind ON records (kind, received_at)")
    db.execute(
        "CREATE TABLE policies (name TEXT NOT NULL, version INTEGER NOT NULL, "
        "document TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (name, version))"
    )
    db.execute(
        "CREATE TABLE rollouts (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "version INTEGER NOT NULL, previous INTEGER, selector TEXT NOT NULL, "
        "canary_fraction REAL NOT NULL, max_slo_misses INTEGER NOT NULL, state TEXT NOT NULL, "
        "reason TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL)"
    )
    db.execute(
        "CREATE TABLE assignments (agent_id TEXT PRIMARY KEY, name TEXT NOT NULL, "
        "version INTEGER NOT NULL, rollout_id INTEGER, assigned_at REAL NOT NULL, "
        "slo_base INTEGER NOT NULL DEFAULT 0, hb_base INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute(
        "CREATE TABLE rollout_members (rollout_id INTEGER NOT NULL, agent_id TEXT NOT NULL, "
        "prev_name TEXT, prev_version INTEGER, canary INTEGER NOT NULL, "
        "PRIMARY KEY (rollout_id, agent_id))"
    )


def _v2(db: sqlite_utils.Database) -> None:
    db.execute("CREATE INDEX records_created ON records (kind, created_at)")
    db.execute("CREATE INDEX records_received ON records (received_at)")
    db.execute("ALTER TABLE rollouts ADD COLUMN gate_timeout_s REAL")  # NULL: wait for ever


MIGRATIONS: list[Migration] = [
    (1, "agents, devices, sync, records, policies, rollouts", _v1),
    (2, "records by creation and receipt time, canary gate timeout", _v2),
]
