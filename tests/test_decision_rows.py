"""Decision rows keep the kernel's reason codes; the why-not text is composed when read.
A placed decision's summary is composed from a template kept per kind of decision.

The text a stored row gives back is the one the decision itself composes (chosen, runner-up,
rejected, excluded by tier rules, not placed at all), and a row written before schema v6
(the text stored) reads back unchanged after the migration.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlite_utils

from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.scheduler import decision_row
from edge_agent.agent.core.store import Store
from edge_agent.placement import Decision, Placer, Policy, devices_from_profiles, tiers
from edge_agent.placement.decision import DecisionContext
from edge_agent.placement.layout import (
    EST_LATENCY_S,
    OBJECTIVE_NAMES,
    OUT_ASSIGNED,
    OUT_COMP,
    OUT_EST,
    OUT_FIELDS,
    OUT_RUNNER_UP,
)
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract

pytestmark = pytest.mark.asyncio

NPU, X86 = "rk3588/npu", "generic_x86_server/cpu"


def decisions() -> list[Decision]:
    """Placed with a runner-up, rejections, tier exclusions, and one not placed at all."""
    rules = {"tiers": {"classes": {"detect": ["hot", "warm"], "batch": ["cold", "warm"]}}}
    policy = Policy.from_dict({"template": "latency-first", "rules": rules})
    placer = Placer(devices_from_profiles(["rk3588", "generic_x86_server"]), policy)

    def task(cls: str, precision: str = "int8", max_latency_s: float = 0.0) -> TaskContract:
        req = Requirements(max_latency_s=max_latency_s)
        return TaskContract(Semantics(1.0, precision=precision), req, task_class=cls)

    return [
        tiers.place_one(placer, task("other")),
        tiers.place_one(placer, task("batch")),  # the hot and warm devices excluded
        tiers.place_one(placer, task("other", "fp32")),  # the int8-only NPU rejected
        tiers.place_one(placer, task("other", max_latency_s=1e-9)),  # nowhere fast enough
    ]


async def opened(path: Path) -> Store:
    store = Store(path)
    await asyncio.to_thread(store.open)
    return store


async def test_stored_reason_codes_read_back_as_the_decisions_own_text(tmp_path: Path) -> None:
    found = decisions()
    assert [d.placed for d in found] == [True, True, True, False]
    assert any("excluded: tier" in found[1].why_not(dev) for dev in found[1].device_order)
    assert "rejected: precision unsupported" in found[2].why_not(NPU)
    assert any("runner-up" in found[0].why_not(dev) for dev in found[0].device_order)
    store = await opened(tmp_path / "a.db")
    contract = TaskContract(Semantics(1.0))
    rows = [r for r, _ in await store.submit([NewTask(contract, f"h{i}") for i in range(4)])]
    pairs = zip(rows, found, strict=True)
    await store.placed([(r["id"], decision_row(d), False) for r, d in pairs])
    with sqlite3.connect(tmp_path / "a.db") as conn:  # no text stored: the codes are
        stored = conn.execute("SELECT why_not, reasons FROM decisions ORDER BY id").fetchall()
    assert all(why is None and codes for why, codes in stored)
    for row, d in zip(rows, found, strict=True):
        got = await store.decision(row["id"])
        assert got is not None
        assert got["why_not"] == {dev: d.why_not(dev) for dev in d.device_order}
        assert "reasons" not in got and "device_order" not in got
    await asyncio.to_thread(store.close)


async def test_a_rows_null_columns_are_left_out_and_read_back_null(tmp_path: Path) -> None:
    """``decision_row`` leaves out the columns a decision has no value for (``sqlite3``
    binds None slowly); stored, they read NULL, and rows of other shapes keep order."""
    found = decisions()
    rows_of = [decision_row(d) for d in found]
    for d, row in zip(found, rows_of, strict=True):
        assert None not in row.values() and "why_not" not in row
        assert ("runner_up" in row) == bool(d.runner_up)
        assert ("device" in row) == d.placed and ("tier" in row) == (d.tier is not None)
    assert len({tuple(row) for row in rows_of}) > 1  # several shapes in one batch
    store = await opened(tmp_path / "a.db")
    contract = TaskContract(Semantics(1.0))
    tasks = [r for r, _ in await store.submit([NewTask(contract, f"h{i}") for i in range(4)])]
    ids = [r["id"] for r in tasks]
    await store.placed([(i, row, False) for i, row in zip(ids, rows_of, strict=True)])
    with sqlite3.connect(tmp_path / "a.db") as conn:
        conn.row_factory = sqlite3.Row
        stored = conn.execute("SELECT * FROM decisions ORDER BY id").fetchall()
    assert [s["task_id"] for s in stored] == ids  # the batch's order
    for s, d, row in zip(stored, found, rows_of, strict=True):
        left_out = set(s.keys()) - set(row) - {"id", "task_id", "decided_at"}
        assert left_out and all(s[name] is None for name in left_out)
        assert (s["runner_up"], s["tier"], s["device"]) == (d.runner_up, d.tier, d.device_id)
    await asyncio.to_thread(store.close)


async def test_a_row_written_before_v6_reads_back_its_stored_text(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite_utils.Database(sqlite3.connect(path, isolation_level=None))
    assert migrate(db, [m for m in MIGRATIONS if m[0] <= 5]) == 5
    why_not = {NPU: f"{NPU} was chosen", X86: f"{X86} rejected: precision unsupported"}
    old: dict[str, Any] = {
        "task_id": "t-old",
        "decided_at": 1.0,
        "placed": 1,
        "device": NPU,
        "devices": json.dumps([NPU]),
        "score": 0.0,
        "components": json.dumps({}),
        "rejections": json.dumps({"precision unsupported": 1}),
        "why_not": json.dumps(why_not),
        "summary": "old",
    }
    db["decisions"].insert(old)
    db.close()
    store = await opened(path)
    assert store.db.schema_version == max(v for v, _, _ in MIGRATIONS)
    got = await store.decision("t-old")
    assert got is not None and got["why_not"] == why_not and got["summary"] == "old"
    await asyncio.to_thread(store.close)


def full_summary(d: Decision) -> str:
    """A placed, on-time decision's summary as composed in full, figure by figure."""
    terms = d.components
    main = OBJECTIVE_NAMES[max(range(len(terms)), key=terms.__getitem__)]
    extra = f"; runner-up {d.runner_up}" if d.runner_up else ""
    if d.tier is not None:
        spill = f", spilled from {'/'.join(d.spilled_from)}" if d.spilled_from else ""
        extra += f"; tier {d.tier}{spill}"
    return (
        f"{', '.join(d.device_ids)}: est {d.latency_s * 1e3:.3f} ms ({d.estimate_source}), "
        f"{d.energy_j * 1e3:.3f} mJ, score {d.score:.3f} (largest term {main}){extra}"
    )


async def test_summaries_from_templates_read_as_composed_in_full() -> None:
    """A batch's summaries share a few templates (one per device, source, runner-up, largest
    term and tier): each still carries its own estimate, energy and score, and reads as the
    summary composed figure by figure; a '%' in a device id is text, not a format field."""
    policy = Policy.from_dict({"template": "latency-first"})
    placer = Placer(devices_from_profiles(["rk3588", "generic_x86_server"]), policy)
    contract = TaskContract(Semantics(0.01, precision="int8"))
    batch = placer.place([contract] * 200)
    assert len({d.latency_s for d in batch}) > 100  # the queue grows: figures differ
    assert len({d.summary() for d in batch}) > 100
    for d in [*batch, *decisions()]:
        if d.placed and not d.late:
            assert d.summary() == full_summary(d)
    assert 0 < len(placer.place_one(contract)._ctx.templates) < 10
    row = [0.0] * OUT_FIELDS  # on the first device, no runner-up, not late
    row[OUT_ASSIGNED + 1 : OUT_RUNNER_UP + 1] = [-1.0] * (OUT_RUNNER_UP - OUT_ASSIGNED)
    row[OUT_EST + EST_LATENCY_S], row[OUT_COMP + 1] = 0.0125, 1.0
    ctx = DecisionContext(("gpu%d 100%",), "p@1", "python")
    odd = Decision(contract, row, ctx, sources=("published (50% sure)",))
    assert odd.summary() == full_summary(odd)
    assert odd.summary() == (
        "gpu%d 100%: est 12.500 ms (published (50% sure)), 0.000 mJ, score 0.000 "
        "(largest term energy)"
    )


async def test_a_row_holds_the_decisions_own_fields() -> None:
    """``decision_row`` reads the kernel's row directly (estimates at once, the counts as a
    cache key): every column is still what the decision's own properties say."""
    late = tiers.place_one(
        Placer(devices_from_profiles(["rk3588"]), Policy.from_dict({"template": "latency-first"})),
        TaskContract(Semantics(1e3), Requirements(deadline_s=1e-6)),
    )
    assert late.placed and late.late
    for d in [*decisions(), late]:
        doc = d.to_dict()
        row = decision_row(d)
        assert row["placed"] == int(d.placed)
        assert json.loads(row["devices"]) == doc["devices"]
        assert row.get("device") == d.device_id
        assert {k: row[k] for k in doc["estimate"]} == doc["estimate"]
        assert (row["score"], row.get("runner_up"), row.get("runner_up_score")) == (
            doc["score"],
            doc["runner_up"],
            doc["runner_up_score"],
        )
        assert json.loads(row["components"]) == doc["components"]
        assert json.loads(row["rejections"]) == doc["rejections"]
        assert json.loads(row["device_order"]) == list(d.device_order)
        assert row["summary"] == doc["summary"] and row.get("tier") == doc["tier"]
        assert json.loads(row["spilled_from"]) == list(d.spilled_from)
        assert (row["policy"], row["backend"]) == (doc["policy"], doc["backend"])
