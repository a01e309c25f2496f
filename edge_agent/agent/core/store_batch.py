"""The store's two hot writes, set-at-a-time: accepting tasks and recording their placements.

Both run inside one ``db.Database.write`` op (one transaction, committed before the caller's
future resolves), with one ``executemany`` per statement instead of a statement per task:
a ``POST /v1/tasks:batch`` of 1,000 tasks, or a group of single submissions coalesced by
``intake_queue``, costs a handful of statements. ``store.Store.submit`` and ``placed`` call
these; their semantics (idempotency keys, which states move, the outbox) are unchanged.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import sqlite_utils

from edge_agent.agent.core import outbox
from edge_agent.agent.core.lifecycle import WAITING, check, where
from edge_agent.agent.core.task_ids import new_ids
from edge_agent.placement.decision import why_not_text

if TYPE_CHECKING:
    from edge_agent.agent.core.intake import NewTask

_KEYS_AT_ONCE = 500  # idempotency keys looked up per SELECT (SQLite's variable limit: 999)
# the moves these statements make, checked against the lifecycle once, here
check("(new)", None, "queued")
check("(new)", None, "deferred")
_REQUEUE = where(("placed",), "queued")
_PLACE = where(WAITING, "placed")
_FAIL = where(WAITING, "failed")


#: a new task's row: ``new_rows``' keys, in order
TASK_COLUMNS = (
    "id",
    "idempotency_key",
    "request_hash",
    "contract",
    "command",
    "state",
    "priority",
    "tenant",
    "deadline_at",
    "submitted_at",
    "attempts",
    "emulated",
    "not_before",
    "deferral",
)
#: the columns of a new row that are often NULL: left out of its insert when they are
_OPTIONAL = operator.itemgetter(
    *(TASK_COLUMNS.index(c) for c in ("idempotency_key", "command", "deadline_at", "deferral"))
)
#: (statement, picker of the values it binds) by which optional columns are NULL
_INSERTS: dict[tuple[bool, ...], tuple[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]]] = {}


def insert_new(db: sqlite_utils.Database, rows: Sequence[dict[str, Any]]) -> None:
    """Insert ``new_rows``' rows (in order), leaving their NULL optional columns out.

    ``sqlite3`` binds None through its adapters (a key, a table look-up, two attribute
    look-ups): about 0.3-0.7 µs a value, five a task for a plain submission
    (docs/performance.md, "Intake path, session 13"). ``not_before`` is NULL with
    ``deferral``.
    """
    shape: tuple[bool, ...] | None = None
    values: list[tuple[Any, ...]] = []
    pick: Callable[[tuple[Any, ...]], tuple[Any, ...]] = tuple
    sql = ""
    for row in rows:
        full = tuple(row.values())
        nulls = tuple([v is None for v in _OPTIONAL(full)])
        if nulls != shape:
            if values:
                db.conn.executemany(sql, values)
            shape, values = nulls, []
            sql, pick = _INSERTS.get(nulls) or _insert_of(nulls)
        values.append(pick(full))
    if values:
        db.conn.executemany(sql, values)


def _insert_of(
    nulls: tuple[bool, ...],
) -> tuple[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]]:
    """Return (and keep) the insert statement and value picker for one pattern of NULLs."""
    left_out = {c for c, null in zip(_OPTIONAL(TASK_COLUMNS), nulls, strict=True) if null}
    if "deferral" in left_out:
        left_out.add("not_before")
    kept = [i for i, c in enumerate(TASK_COLUMNS) if c not in left_out]
    names = ", ".join(TASK_COLUMNS[i] for i in kept)
    sql = f"INSERT INTO tasks ({names}) VALUES ({', '.join('?' for _ in kept)})"
    found = _INSERTS[nulls] = (sql, operator.itemgetter(*kept))
    return found


def existing_keys(db: sqlite_utils.Database, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Return the stored (undecoded) task row of each idempotency key already used."""
    found: dict[str, dict[str, Any]] = {}
    unique = list(dict.fromkeys(keys))
    for i in range(0, len(unique), _KEYS_AT_ONCE):
        part = unique[i : i + _KEYS_AT_ONCE]
        cur = db.execute(
            f"SELECT * FROM tasks WHERE idempotency_key IN ({', '.join('?' for _ in part)})",
            part,
        )
        names = [c[0] for c in cur.description]
        for values in cur.fetchall():
            row = dict(zip(names, values, strict=True))
            found[row["idempotency_key"]] = row
    return found


def new_rows(
    tasks: Sequence[NewTask], now: float, known: dict[str, dict[str, Any]]
) -> list[tuple[int, dict[str, Any]] | tuple[int, None]]:
    """Return (index, row to insert) per task; row None where its key is already ``known``.

    A key used twice in ``tasks`` is inserted once; the later use reads as a retry.
    """
    out: list[tuple[int, dict[str, Any]] | tuple[int, None]] = []
    ids = new_ids(len(tasks))
    for i, task in enumerate(tasks):
        key = task.idempotency_key
        if key is not None and key in known:
            out.append((i, None))
            continue
        c = task.contract
        deadline = c.requirements.deadline_s
        deferral = task.deferral
        row: dict[str, Any] = {
            "id": ids[i],
            "idempotency_key": key,
            "request_hash": task.request_hash,
            "contract": task.stored_contract(),
            "command": None if task.command is None else json.dumps(list(task.command)),
            "state": "queued" if deferral is None else "deferred",
            "priority": c.priority,
            "tenant": c.tenant,
            "deadline_at": now + deadline if deadline > 0 else None,
            "submitted_at": now,
            "attempts": 0,
            "emulated": 0,
            "not_before": None if deferral is None else deferral["not_before"],
            "deferral": None if deferral is None else json.dumps(deferral),
        }
        if key is not None:
            known[key] = row
        out.append((i, row))
    return out


def record_placed(
    db: sqlite_utils.Database,
    entries: Sequence[tuple[str, dict[str, Any], bool]],
    requeued: Sequence[str],
    outbox_limit: int,
) -> None:
    """Write (task id, decision row, emulated?) entries and requeue ``requeued`` (one op)."""
    now = time.time()
    if requeued:
        db.conn.executemany(
            f"UPDATE tasks SET state = 'queued', device = NULL WHERE id = ? AND {_REQUEUE}",
            [(task_id,) for task_id in requeued],
        )
    if not entries:
        return
    # decision_row leaves NULL columns out: one statement per run of rows of one shape
    # (most batches are one run), the rows in the entries' order
    columns: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = []
    for task_id, decision, _ in entries:
        shape = tuple(decision)
        if shape != columns:
            _insert_decisions(db, columns, rows)
            columns, rows = shape, []
        rows.append((task_id, now, *decision.values()))
    _insert_decisions(db, columns, rows)
    records: list[tuple[str, dict[str, Any]]] = []
    placed, failed = [], []
    for task_id, decision, emulated in entries:
        records.append(("decision", decision_record(task_id, decision)))
        if decision["placed"]:
            placed.append((now, decision["device"], int(emulated), task_id))
        else:
            failed.append((now, decision["summary"], task_id))
            records.append(("task", {"id": task_id, "state": "failed"}))
    db.conn.executemany(
        "UPDATE tasks SET state = 'placed', placed_at = ?, device = ?, emulated = ?, "
        f"attempts = attempts + 1 WHERE id = ? AND {_PLACE}",
        placed,
    )
    db.conn.executemany(
        f"UPDATE tasks SET state = 'failed', finished_at = ?, error = ? WHERE id = ? AND {_FAIL}",
        failed,
    )
    outbox.append_many(db, records, now, outbox_limit)


def _insert_decisions(
    db: sqlite_utils.Database, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> None:
    """Insert decision rows of one shape: (task id, decided at, then ``columns``' values)."""
    if rows:
        names = ", ".join(("task_id", "decided_at", *columns))
        marks = ", ".join("?" for _ in range(len(columns) + 2))
        db.conn.executemany(f"INSERT INTO decisions ({names}) VALUES ({marks})", rows)


def decision_record(task_id: str, decision: dict[str, Any]) -> dict[str, Any]:
    """Return a decision row as the hub's ``decision`` record (docs/hub-protocol.md §4)."""
    return {
        "task_id": task_id,
        "placed": bool(decision.get("placed")),
        "device": decision.get("device"),
        "why_here": decision.get("summary"),
        "score": decision.get("score"),
        "runner_up": decision.get("runner_up"),
        "policy": decision.get("policy"),
        "latency_s": decision.get("latency_s"),
        "service_s": decision.get("service_s"),
        "energy_j": decision.get("energy_j"),
        "carbon_g": decision.get("carbon_g"),
    }


def why_not_of(row: dict[str, Any]) -> dict[str, str]:
    """Return a decoded decision row's why-not text per device of the fleet when decided.

    Rows since schema v6 keep the kernel's reason codes (``reasons``, ``excluded``,
    ``device_order``) and compose the text here; older rows stored it (``why_not``).
    """
    if row.get("device_order") is None:
        return dict(row.get("why_not") or {})
    order = tuple(json.loads(row["device_order"]))
    reasons = None if row["reasons"] is None else bytes.fromhex(row["reasons"])
    excluded = {int(k): str(v) for k, v in json.loads(row["excluded"] or "{}").items()}
    chosen = tuple(row["devices"] or ())
    scores = (row["runner_up"], row["runner_up_score"], row["score"])
    return {
        device: why_not_text(device, chosen, order, reasons, excluded, scores) for device in order
    }
