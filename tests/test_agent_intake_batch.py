"""The batch intake path through aiohttp's test client (real SQLite, the compiled kernel).

A ``tasks:batch`` is placed by one kernel call and marked placed in one transaction; single
submissions that arrive together are stored as one group, and one bad request in a group
(an Idempotency-Key reused with another body) is refused alone.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.intake import Intake
from edge_agent.agent.web.api import SUBMITS, make_app
from edge_agent.errors import ContractError

Client = TestClient[Any, Any]
TASK = {"semantics": {"gflops": 0.001}, "task_class": "bench"}


def _kernel_calls(metrics: str) -> float:
    found = re.search(r"^hetmesh_agent_kernel_call_seconds_count (\S+)$", metrics, re.M)
    assert found is not None, "the kernel-call histogram is not exported"
    return float(found.group(1))


async def _all_placed(config: AgentConfig, ids: set[str]) -> list[tuple[str, float]]:
    """Poll the agent's SQLite file until every task in ``ids`` has a placed_at."""
    for _ in range(400):
        db = sqlite3.connect(f"file:{config.db_path}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT id, placed_at FROM tasks").fetchall()
        finally:
            db.close()
        mine = [(i, p) for i, p in rows if i in ids]
        if len(mine) == len(ids) and all(p is not None for _, p in mine):
            return mine
        await asyncio.sleep(0.05)
    raise AssertionError("the tasks were not all placed within 20 s")


@pytest.mark.asyncio
async def test_a_batch_of_1000_is_placed_by_one_kernel_call_in_one_transaction(
    aiohttp_client: Any, emulated_agent: Callable[..., AgentConfig]
) -> None:
    config = emulated_agent()
    client: Client = await aiohttp_client(make_app(config))
    before = _kernel_calls(await (await client.get("/metrics")).text())
    resp = await client.post("/v1/tasks:batch", json={"tasks": [TASK] * 1000})
    assert resp.status == 202
    ids = {t["id"] for t in (await resp.json())["tasks"]}
    assert len(ids) == 1000
    placed = await _all_placed(config, ids)
    assert len({at for _, at in placed}) == 1  # one transaction stamped them all
    after = _kernel_calls(await (await client.get("/metrics")).text())
    assert after - before == 1


@pytest.mark.asyncio
async def test_concurrent_single_submissions_are_stored_one_transaction_per_group(
    aiohttp_client: Any, emulated_agent: Callable[..., AgentConfig]
) -> None:
    config = emulated_agent()
    client: Client = await aiohttp_client(make_app(config))
    await client.post("/v1/tasks", json=TASK)  # warm
    groups = client.app[SUBMITS].groups
    answers = await asyncio.gather(*(client.post("/v1/tasks", json=TASK) for _ in range(40)))
    assert [r.status for r in answers] == [202] * 40
    ids = {(await r.json())["task"]["id"] for r in answers}
    assert len(ids) == 40
    used = client.app[SUBMITS].groups - groups
    assert used < 40  # some arrived together and shared a write
    await _all_placed(config, ids)
    db = sqlite3.connect(f"file:{config.db_path}?mode=ro", uri=True)
    try:
        submitted = dict(db.execute("SELECT id, submitted_at FROM tasks").fetchall())
    finally:
        db.close()
    # one store op (one transaction) per group: its rows share the one time it stamped
    assert len({submitted[i] for i in ids}) == used


@pytest.mark.asyncio
async def test_a_reused_key_in_a_group_is_refused_alone_and_a_retry_gets_its_task(
    aiohttp_client: Any, emulated_agent: Callable[..., AgentConfig]
) -> None:
    config = emulated_agent()
    client: Client = await aiohttp_client(make_app(config))
    first = await client.post("/v1/tasks", json=TASK, headers={"Idempotency-Key": "k1"})
    first_id = (await first.json())["task"]["id"]
    other = {**TASK, "task_class": "other"}
    posts = [client.post("/v1/tasks", json=TASK) for _ in range(10)]
    posts.append(client.post("/v1/tasks", json=other, headers={"Idempotency-Key": "k1"}))
    posts.append(client.post("/v1/tasks", json=TASK, headers={"Idempotency-Key": "k1"}))
    answers = await asyncio.gather(*posts)
    assert [r.status for r in answers] == [202] * 10 + [409, 202]
    conflict = await answers[10].json()
    assert "Idempotency-Key 'k1' was already used" in conflict["error"]
    retry = await answers[11].json()
    assert retry["created"] is False and retry["task"]["id"] == first_id
    listed = await (await client.get("/v1/tasks?limit=100")).json()
    assert len(listed["tasks"]) == 11  # the first, the ten; nothing for the refused one


def test_a_repeated_plain_contract_is_parsed_once_and_a_bad_one_is_refused_every_time(
    tmp_path: Path,
) -> None:
    intake = Intake([tmp_path], [])
    first = intake.task(dict(TASK), "a")
    again = intake.task({"task_class": "bench", "semantics": {"gflops": 0.001}}, "b")
    assert again.contract is first.contract  # the cached parse, whatever the key order
    assert (again.request_hash, again.contract_json) == (first.request_hash, first.contract_json)
    assert (first.idempotency_key, again.idempotency_key) == ("a", "b")
    other = intake.task({**TASK, "priority": 3}, None)
    assert other.contract.priority == 3 and other.request_hash != first.request_hash
    bad = {"semantics": {"gflops": -1}, "task_class": "bench"}
    for _ in range(2):
        with pytest.raises(ContractError, match="gflops"):
            intake.task(bad, None)
