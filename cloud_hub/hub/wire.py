"""Parsing and validating the agent-to-hub documents; InvalidInput names the field to fix."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from cloud_hub.hub.protocol import AGENT_ID, MAX_BATCH, RECORD_KINDS
from edge_agent.errors import InvalidInput

STATUSES = ("ok", "degraded")
#: The largest integer SQLite stores (a signed 64-bit INTEGER).
MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class Enrolment:
    """An agent asking to join: its id, the join token, and what it says about itself."""

    agent_id: str
    join_token: str
    labels: dict[str, str] = field(default_factory=dict)
    board: str | None = None
    hostname: str | None = None


@dataclass(frozen=True)
class DeviceReport:
    """One device's live state as its agent reports it."""

    id: str
    kind: str | None
    name: str | None
    utilization: float | None
    queued_s: float | None
    health: str | None


@dataclass(frozen=True)
class Heartbeat:
    """One heartbeat: the agent's health, devices, peers it sees, policy and outbox state."""

    status: str = "ok"
    problem: str | None = None
    version: str | None = None
    policy: tuple[str, int] | None = None
    devices: tuple[DeviceReport, ...] = ()
    peers: tuple[str, ...] = ()
    queue_depth: int = 0
    outbox_pending: int = 0
    outbox_dropped: int = 0
    slo_misses: int = 0


@dataclass(frozen=True)
class Record:
    """One outbox record: per-agent sequence number, kind, payload (JSON text), creation time."""

    seq: int
    kind: str
    payload: str
    created_at: float


@dataclass(frozen=True)
class SyncBatch:
    """Outbox records plus the highest seq the agent dropped unsent (0: none)."""

    records: tuple[Record, ...]
    dropped_through: int = 0


def _obj(doc: Any, where: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise InvalidInput(f"{where}: expected a JSON object")
    return doc


def _str(doc: dict[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > 200:
        raise InvalidInput(f"{where}.{key}: expected a string of 1-200 characters")
    return value


def _int(doc: dict[str, Any], key: str, where: str, default: int = 0) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise InvalidInput(f"{where}.{key}: expected an integer 0..2**63-1, got {value!r}")
    return value


def _num(doc: dict[str, Any], key: str, where: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{where}.{key}: expected a finite number, got {value!r}")
    return float(value)


def agent_id(value: Any, where: str = "agent_id") -> str:
    """Return a valid agent id or raise naming ``where``."""
    if not isinstance(value, str) or not AGENT_ID.match(value):
        raise InvalidInput(f"{where}: expected 1-64 of A-Z a-z 0-9 . _ -, got {value!r}")
    return value


def enrolment(doc: Any) -> Enrolment:
    """Parse an enrolment request."""
    d = _obj(doc, "body")
    labels = d.get("labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and len(k) + len(v) <= 200
        for k, v in labels.items()
    ):
        raise InvalidInput("body.labels: expected an object of short string values")
    token = d.get("join_token")
    if not isinstance(token, str) or not token:
        raise InvalidInput("body.join_token: expected the hub's join token (a string)")
    return Enrolment(
        agent_id(d.get("agent_id"), "body.agent_id"),
        token,
        dict(labels),
        _str(d, "board", "body"),
        _str(d, "hostname", "body"),
    )


def heartbeat(doc: Any) -> Heartbeat:
    """Parse a heartbeat body."""
    d = _obj(doc, "body")
    status = d.get("status", "ok")
    if status not in STATUSES:
        raise InvalidInput(f"body.status: expected one of {', '.join(STATUSES)}, got {status!r}")
    policy = None
    if d.get("policy") is not None:
        p = _obj(d["policy"], "body.policy")
        policy = (
            str(_str(p, "name", "body.policy", required=True)),
            _int(p, "version", "body.policy"),
        )
    devices = d.get("devices", [])
    if not isinstance(devices, list) or len(devices) > 256:
        raise InvalidInput("body.devices: expected a list of at most 256 device objects")
    reports: list[DeviceReport] = []
    for i, item in enumerate(devices):
        w = f"body.devices[{i}]"
        dev = _obj(item, w)
        util = _num(dev, "utilization", w)
        if util is not None and not 0 <= util <= 1:
            raise InvalidInput(f"{w}.utilization: expected 0..1, got {util!r}")
        dev_id = str(_str(dev, "id", w, required=True))
        if any(r.id == dev_id for r in reports):
            raise InvalidInput(f"{w}.id: device {dev_id!r} appears twice; report each device once")
        reports.append(
            DeviceReport(
                dev_id,
                _str(dev, "kind", w),
                _str(dev, "name", w),
                util,
                _num(dev, "queued_s", w),
                _str(dev, "health", w),
            )
        )
    peers = d.get("peers", [])
    if not isinstance(peers, list) or len(peers) > 1024:
        raise InvalidInput("body.peers: expected a list of agent ids (at most 1024)")
    outbox = _obj(d.get("outbox", {}), "body.outbox")
    return Heartbeat(
        status=status,
        problem=_str(d, "problem", "body"),
        version=_str(d, "version", "body"),
        policy=policy,
        devices=tuple(reports),
        peers=tuple(agent_id(p, f"body.peers[{i}]") for i, p in enumerate(peers)),
        queue_depth=_int(d, "queue_depth", "body"),
        outbox_pending=_int(outbox, "pending", "body.outbox"),
        outbox_dropped=_int(outbox, "dropped", "body.outbox"),
        slo_misses=_int(d, "slo_misses", "body"),
    )


def sync_batch(doc: Any) -> SyncBatch:
    """Parse an outbox sync body; every record is checked before any is applied."""
    d = _obj(doc, "body")
    items = d.get("records")
    if not isinstance(items, list) or len(items) > MAX_BATCH:
        raise InvalidInput(f"body.records: expected a list of at most {MAX_BATCH} records")
    records = []
    for i, item in enumerate(items):
        w = f"body.records[{i}]"
        r = _obj(item, w)
        seq = _int(r, "seq", w, default=-1)
        if seq < 1:
            raise InvalidInput(f"{w}.seq: expected an integer >= 1")
        kind = r.get("kind")
        if kind not in RECORD_KINDS:
            raise InvalidInput(f"{w}.kind: expected one of {', '.join(RECORD_KINDS)}, got {kind!r}")
        if not isinstance(r.get("payload"), dict):
            raise InvalidInput(f"{w}.payload: expected a JSON object")
        try:  # stored as JSON text that SQLite's json functions read: no NaN or Infinity
            payload = json.dumps(r["payload"], allow_nan=False)
        except ValueError:
            raise InvalidInput(f"{w}.payload: NaN and Infinity are not JSON numbers") from None
        created = _num(r, "created_at", w)
        records.append(Record(seq, kind, payload, created or 0.0))
    seqs = [r.seq for r in records]
    if len(set(seqs)) != len(seqs):
        raise InvalidInput("body.records: a seq appears twice in one batch")
    return SyncBatch(tuple(records), _int(d, "dropped_through", "body"))
