"""Policy versions and rollout through the hub API: canary, health gate, promotion, rollback."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub import policies
from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.request_auth import HUB
from cloud_hub.hub.sim_agent import SimulatedAgent
from edge_agent.protocol.hub_client import HubClient

pytestmark = pytest.mark.asyncio
Client = TestClient[Any, Any]
ADMIN = {"Authorization": "Bearer adm"}


async def setup(
    aiohttp_client: Any, tmp_path: Path, n: int = 4, clock: Callable[[], float] = time.time
) -> tuple[Client, list[Any]]:
    """A hub and ``n`` enrolled simulated agents: the last one at site "field", the rest "lab"."""
    config = HubConfig(data_dir=tmp_path, port=0, join_token="t", admin_token="adm")
    client: Client = await aiohttp_client(make_app(config, clock=clock))
    agents = []
    for i in range(n):
        hc = HubClient(str(client.make_url("")), f"a{i}", client.session)
        await hc.enrol("t", {"site": "lab" if i < n - 1 else "field"}, board="rk3588")
        agents.append(SimulatedAgent(hc, devices=[]))
    return client, agents


async def put(client: Client, doc: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/v1/policies", json=doc, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    return dict(await resp.json())


async def roll_out(client: Client, version: int, selector: Any = None, **options: Any) -> Any:
    """POST (as admin) a rollout of ``p@version`` to ``selector`` (default: every agent)."""
    doc = {"name": "p", "version": version, "selector": selector or {}, **options}
    return await client.post("/v1/rollouts", json=doc, headers=ADMIN)


async def test_versions_are_numbered_by_the_hub_and_validated(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client, _ = await setup(aiohttp_client, tmp_path, 1)
    assert (await put(client, {"name": "p", "template": "balanced"}))["version"] == 1
    assert (await put(client, {"name": "p", "template": "energy-first", "version": 9}))[
        "version"
    ] == 2
    bad = await client.post("/v1/policies", json={"name": "p", "weights": {"x": 1}}, headers=ADMIN)
    body = await bad.json()
    assert bad.status == 400 and body["ok"] is False and "weights" in body["error"]
    history = (await (await client.get("/v1/policies/p")).json())["versions"]
    assert [v["version"] for v in history] == [2, 1]
    assert history[0]["document"]["weights"]["energy"] > history[1]["document"]["weights"]["energy"]
    assert (await client.get("/v1/policies/nope")).status == 404


async def test_canary_promotes_after_the_gate(aiohttp_client: Any, tmp_path: Path) -> None:
    client, agents = await setup(aiohttp_client, tmp_path)
    hub = client.app[HUB]
    await put(client, {"name": "p", "template": "latency-first"})
    resp = await roll_out(client, 1, {"site": "lab"}, canary_fraction=0.3)
    rollout = (await resp.json())["rollout"]
    assert rollout["state"] == "canary" and rollout["agents"] == 3
    [canary] = rollout["canaries"]
    by_id = {a.client.agent_id: a for a in agents}
    for a in agents:
        await a.beat()
    assert by_id[canary].policy is not None and by_id[canary].policy["version"] == 1
    assert all(a.policy is None for a in agents if a.client.agent_id != canary)
    for _ in range(policies.GATE_HEARTBEATS):
        assert await hub.policies.evaluate() == []
        await by_id[canary].beat()  # acknowledges p@1 and stays healthy
    [done] = await hub.policies.evaluate()
    assert done["state"] == "complete"
    for a in agents:
        await a.beat()
    applied = {a.client.agent_id: a.policy and a.policy["version"] for a in agents}
    assert applied == {"a0": 1, "a1": 1, "a2": 1, "a3": None}  # a3 is site=field


async def test_canary_missing_slos_rolls_back(aiohttp_client: Any, tmp_path: Path) -> None:
    client, agents = await setup(aiohttp_client, tmp_path)
    hub = client.app[HUB]
    await put(client, {"name": "p", "template": "balanced"})
    await put(client, {"name": "p", "template": "energy-first"})
    assert (await roll_out(client, 1)).status == 201
    for a in agents:
        await a.beat()
    resp = await roll_out(client, 2, canary_fraction=0.25, max_slo_misses=2)
    [canary] = (await resp.json())["rollout"]["canaries"]
    sick = next(a for a in agents if a.client.agent_id == canary)
    await sick.beat()
    assert sick.policy is not None and sick.policy["version"] == 2
    sick.slo_misses += 3
    await sick.beat()
    [rolled] = await hub.policies.evaluate()
    assert rolled["state"] == "rolled_back" and canary in rolled["reason"]
    await sick.beat()
    assert sick.policy["version"] == 1  # handed the previous version back in one step
    heads = (await (await client.get("/v1/policies")).json())["policies"]
    assert heads[0]["rollout"]["state"] == "rolled_back"


async def test_rollout_needs_admin_and_a_known_version(aiohttp_client: Any, tmp_path: Path) -> None:
    client, _ = await setup(aiohttp_client, tmp_path, 1)
    doc = {"name": "p", "version": 1, "selector": {}}
    refused = await client.post("/v1/rollouts", json=doc)
    assert refused.status == 401
    error = (await refused.json())["error"]  # names the request and how to authenticate
    assert "POST /v1/rollouts" in error and "Authorization: Bearer" in error
    missing = await roll_out(client, 1)
    assert missing.status == 404 and "p@1" in (await missing.json())["error"]
    await put(client, {"name": "p", "template": "balanced"})
    nobody = await roll_out(client, 1, {"site": "mars"})
    assert nobody.status == 400 and "matches no" in (await nobody.json())["error"]


async def test_a_canary_that_never_passes_the_gate_rolls_back_at_the_timeout(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    now = [time.time()]
    client, agents = await setup(aiohttp_client, tmp_path, 2, clock=lambda: now[0])
    hub = client.app[HUB]
    await put(client, {"name": "p", "template": "balanced"})
    bad = await roll_out(client, 1, gate_timeout_s="soon")
    assert bad.status == 400 and "gate_timeout_s" in (await bad.json())["error"]
    resp = await roll_out(client, 1, canary_fraction=0.5, gate_timeout_s=60)
    [canary] = (await resp.json())["rollout"]["canaries"]
    silent = next(a for a in agents if a.client.agent_id == canary)
    await silent.beat()  # applies p@1, then falls silent before the gate's heartbeats
    now[0] += 59
    assert await hub.policies.evaluate() == []  # still within the timeout: waiting
    now[0] += 2
    [rolled] = await hub.policies.evaluate()
    assert rolled["state"] == "rolled_back"
    assert f"canary {canary} did not run p@1" in rolled["reason"] and "60 s" in rolled["reason"]
    for a in agents:
        await a.beat()
    assert all(a.policy is None or a is silent for a in agents)  # the rest never got it
    rollouts = (await (await client.get("/v1/rollouts")).json())["rollouts"]
    assert rollouts[0]["state"] == "rolled_back" and rollouts[0]["gate_timeout_s"] == 60
