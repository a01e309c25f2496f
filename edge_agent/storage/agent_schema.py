"""The agent database's schema, as numbered migrations (applied once each, in order).

The agent daemon writes it; the load predictor's ClientApp reads its ``telemetry`` table
(``edge_agent.predictor.features``) and ``cloud_hub.learning.localfed`` builds such files.
"""

from __future__ import annotations

import sqlite_utils

from edge_agent.storage.db import Migration


def _v1(db: sqlite_utils.Database) -> None:
    db.table("tasks").create(
        {
            "id": str,
            "idempotency_key": str,
            "request_hash": str,
            "contract": str,
            "command": str,
            "state": str,
            "priority": int,
            "tenant": str,
            "deadline_at": float,
            "submitted_at": float,
            "placed_at": float,
            "started_at": float,
            "finished_at": float,
            "device": str,
            "emulated": int,
            "attempts": int,
            "result": str,
            "error": str,
        },
        pk="id",
        not_null={"state", "contract", "submitted_at"},
        defaults={"attempts": 0, "priority": 0, "tenant": "default"},
    )
    db.table("tasks").create_index(["idempotency_key"], unique=True)
    db.table("tasks").create_index(["state"])
    db.table("decisions").create(
        {
            "id": int,
            "task_id": str,
            "decided_at": float,
            "placed": int,
            "device": str,
            "devices": str,
            "latency_s": float,
            "service_s": float,
            "energy_j": float,
            "score": float,
            "runner_up": str,
            "runner_up_score": float,
            "components": str,
            "rejections": str,
            "why_not": str,
            "policy": str,
            "backend": str,
            "summary": str,
        },
        pk="id",
    )
    db.table("decisions").create_index(["task_id"])
    db.table("telemetry").create(
        {
            "id": int,
            "ts": float,
            "kind": str,
            "device": str,
            "task_id": str,
            "task_class": str,
            "latency_s": float,
            "estimate_s": float,
            "energy_j": float,
            "utilization": float,
            "emulated": int,
            "detail": str,
        },
        pk="id",
    )
    db.table("telemetry").create_index(["device", "ts"])
    db.execute(
        "CREATE TABLE outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
        "payload TEXT NOT NULL, created_at REAL NOT NULL)"
    )
    db.table("policy_versions").create(
        {"id": int, "name": str, "version": int, "document": str, "accepted_at": float},
        pk="id",
    )
    db.table("model_versions").create(
        {"sha256": str, "name": str, "path": str, "size": int, "added_at": float}, pk="sha256"
    )


def _v2(db: sqlite_utils.Database) -> None:
    db.execute(
        "CREATE TABLE hub_sync (id INTEGER PRIMARY KEY CHECK (id = 1), "
        "acked INTEGER NOT NULL DEFAULT 0, dropped_through INTEGER NOT NULL DEFAULT 0, "
        "dropped INTEGER NOT NULL DEFAULT 0)"
    )
    db.execute("INSERT INTO hub_sync (id) VALUES (1)")
    db.execute("ALTER TABLE policy_versions ADD COLUMN source TEXT NOT NULL DEFAULT 'config'")


def _v4(db: sqlite_utils.Database) -> None:
    """Deferrable tasks (held until ``not_before``) and grams of CO2 per decision and task."""
    db.execute("ALTER TABLE tasks ADD COLUMN not_before REAL")
    db.execute("ALTER TABLE tasks ADD COLUMN deferral TEXT")
    db.execute("ALTER TABLE decisions ADD COLUMN carbon_g REAL")
    db.execute("ALTER TABLE telemetry ADD COLUMN g_per_kwh REAL")
    db.execute("ALTER TABLE telemetry ADD COLUMN carbon_g REAL")


def _v3(db: sqlite_utils.Database) -> None:
    """Mesh offload: where a task ran (a peer's agent id), the decision chain, the origin."""
    db.execute("ALTER TABLE tasks ADD COLUMN ran_on TEXT")  # a peer's id; NULL: here
    db.execute("ALTER TABLE tasks ADD COLUMN chain TEXT")  # JSON: origin -> peer decisions
    db.execute("ALTER TABLE tasks ADD COLUMN origin TEXT")  # forwarded to us by this agent


def _v5(db: sqlite_utils.Database) -> None:
    """Tiers: the tier a decision placed in and the full tiers it spilled from."""
    db.execute("ALTER TABLE decisions ADD COLUMN tier TEXT")  # NULL: no tier rule applied
    db.execute("ALTER TABLE decisions ADD COLUMN spilled_from TEXT")  # JSON list of tiers


def _v6(db: sqlite_utils.Database) -> None:
    """Decisions keep the kernel's per-device reason codes; why-not text composed on demand.

    Rows written before keep their ``why_not`` text and are read as they are.
    """
    db.execute("ALTER TABLE decisions ADD COLUMN device_order TEXT")  # JSON list of ids
    db.execute("ALTER TABLE decisions ADD COLUMN reasons TEXT")  # hex, a code per device
    db.execute("ALTER TABLE decisions ADD COLUMN excluded TEXT")  # JSON {index: why}


MIGRATIONS: list[Migration] = [
    (1, "tasks, decisions, telemetry, outbox, versions", _v1),
    (2, "hub sync state, policy source", _v2),
    (3, "mesh offload: ran_on, decision chain, origin", _v3),
    (4, "deferrable tasks, carbon per decision and task", _v4),
    (5, "tiers: decision tier and spilled-from tiers", _v5),
    (6, "decisions keep reason codes; why-not composed when read", _v6),
]
