"""The agent database's schema, as numbered migrations (applied once each, in order)."""

from __future__ import annotations

import sqlite_utils

from edge_agent.agent.db import Migration


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


MIGRATIONS: list[Migration] = [
    (1, "tasks, decisions, telemetry, outbox, versions", _v1),
    (2, "hub sync state, policy source", _v2),
]
