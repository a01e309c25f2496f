"""Hub protocol through a real aiohttp server and SQLite file: enrol, signed heartbeat, sync."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.sim_agent import SimulatedAgent
from edge_agent.mesh.errors import AuthError
from edge_agent.protocol.hub_auth import signed_headers, verify_answer
from edge_agent.protocol.hub_client import HubClient, HubForged, HubRejected

pytestmark = pytest.mark.asyncio
Client = TestClient[Any, Any]
TOKEN = "join-me"


async def hub(aiohttp_client: Any, tmp_path: Path, **changes: Any) -> Client:
    config = HubConfig(data_dir=tmp_path / "hub", port=0, join_token=TOKEN, admin_token="adm")
    client: Client = await aiohttp_client(make_app(config.replace(**changes)))
    return client


async def agent(client: Client, agent_id: str = "a1") -> HubClient:
    hc = HubClient(str(client.make_url("")), agent_id, client.session)
    await hc.enrol(TOKEN, {"site": "lab"}, board="rk3588")
    return hc


def rec(seq: int, kind: str = "task") -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "payload": {"id": f"t{seq}"}, "created_at": 1.0}


def stored_seqs(tmp_path: Path, agent_id: str) -> list[int]:
    conn = sqlite3.connect(tmp_path / "hub" / "hub.db")
    try:
        rows = conn.execute("SELECT seq FROM records WHERE agent_id = ? ORDER BY seq", (agent_id,))
        return [int(s) for (s,) in rows]
    finally:
        conn.close()


async def test_enrol_with_wrong_token_is_401_in_the_error_shape(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await hub(aiohttp_client, tmp_path)
    resp = await client.post("/v1/enrol", json={"agent_id": "a1", "join_token": "nope"})
    assert resp.status == 401
    body = await resp.json()
    assert body["ok"] is False and body["status"] == 401 and "join token" in body["error"]


async def test_enrol_then_signed_heartbeat_is_recorded(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    assert len(hc.key or "") == 64
    dev = {"id": "rk3588/npu", "kind": "npu", "utilization": 0.25, "health": "online"}
    answer = await hc.heartbeat({"status": "ok", "devices": [dev], "peers": []})
    assert answer["ok"] is True and answer["policy"] is None
    fleet = await (await client.get("/v1/fleet")).json()
    [row] = fleet["agents"]
    assert row["id"] == "a1" and row["state"] == "online" and row["board"] == "rk3588"
    assert "key" not in row and row["labels"] == {"site": "lab"}
    [device] = fleet["devices"]
    assert device["utilization"] == 0.25 and device["current"] is True


@pytest.mark.parametrize("tamper", ["signature", "body", "agent", "time", "unenrolled"])
async def test_bad_signature_is_401_with_json_error(
    aiohttp_client: Any, tmp_path: Path, tamper: str
) -> None:
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    assert hc.key is not None and hc.hub_id is not None
    path, body = "/v1/agents/a1/heartbeat", json.dumps({"status": "ok"}).encode()
    now = time.time() - (1000 if tamper == "time" else 0)
    headers = signed_headers("a1", hc.key, hc.hub_id, "POST", path, body, now)
    if tamper == "signature":
        headers["X-Hetmesh-Signature"] = "0" * 64
    elif tamper == "body":
        body = json.dumps({"status": "degraded"}).encode()
    elif tamper == "agent":
        path = "/v1/agents/a2/heartbeat"
    elif tamper == "unenrolled":
        ghost = "/v1/agents/ghost/heartbeat"
        headers = signed_headers("ghost", hc.key, hc.hub_id, "POST", ghost, body, now)
        path = "/v1/agents/ghost/heartbeat"
    resp = await client.post(path, data=body, headers=headers)
    doc = await resp.json()
    assert resp.status == 401, doc
    stale = {"reason", "hub_time"} if tamper == "time" else set()  # a clock problem says so
    assert set(doc) == {"ok", "error", "status"} | stale
    assert doc["ok"] is False and doc["status"] == 401
    fleet = await (await client.get("/v1/fleet")).json()
    assert fleet["agents"][0]["last_seen"] is None  # nothing from a forged request was kept


async def enrolled_key(aiohttp_client: Any, tmp_path: Path) -> tuple[Client, str, str]:
    """Return a hub client, the key of agent a1 enrolled there and the hub's id."""
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    assert hc.key is not None and hc.hub_id is not None
    return client, hc.key, hc.hub_id


def auth_failures(metrics: str, reason: str) -> float:
    line = f'hetmesh_hub_auth_failures_total{{reason="{reason}"}} '
    found = [ln for ln in metrics.splitlines() if ln.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


@pytest.mark.parametrize("route", ["heartbeat", "sync"])
async def test_a_replayed_request_is_refused_and_counted(
    aiohttp_client: Any, tmp_path: Path, route: str
) -> None:
    client, key, hub_id = await enrolled_key(aiohttp_client, tmp_path)
    path = f"/v1/agents/a1/{route}"
    doc = {"status": "ok"} if route == "heartbeat" else {"records": [rec(1)]}
    body = json.dumps(doc).encode()
    headers = signed_headers("a1", key, hub_id, "POST", path, body, time.time())
    first = await client.post(path, data=body, headers=headers)
    assert first.status == 200, await first.text()
    replay = await client.post(path, data=body, headers=headers)  # captured and sent again
    doc = await replay.json()
    assert replay.status == 401 and "replayed request" in doc["error"], doc
    metrics = await (await client.get("/metrics")).text()
    assert auth_failures(metrics, "replay") == 1
    if route == "sync":
        assert stored_seqs(tmp_path, "a1") == [1]
    # the same document under a fresh nonce is a new request, and is accepted
    fresh = signed_headers("a1", key, hub_id, "POST", path, body, time.time())
    assert fresh["X-Hetmesh-Nonce"] != headers["X-Hetmesh-Nonce"]
    assert (await client.post(path, data=body, headers=fresh)).status == 200


async def test_a_tampered_body_is_refused_and_counted(aiohttp_client: Any, tmp_path: Path) -> None:
    client, key, hub_id = await enrolled_key(aiohttp_client, tmp_path)
    path, body = "/v1/agents/a1/sync", json.dumps({"records": [rec(1)]}).encode()
    headers = signed_headers("a1", key, hub_id, "POST", path, body, time.time())
    forged = body.replace(b'"t1"', b'"t9"')
    resp = await client.post(path, data=forged, headers=headers)
    assert resp.status == 401 and "bad signature" in (await resp.json())["error"]
    metrics = await (await client.get("/metrics")).text()
    assert auth_failures(metrics, "bad_signature") == 1
    assert stored_seqs(tmp_path, "a1") == []
    # the untampered request was never used, so its nonce is still good
    assert (await client.post(path, data=body, headers=headers)).status == 200


async def test_the_hubs_answers_are_signed_over_the_requests_nonce(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client, key, hub_id = await enrolled_key(aiohttp_client, tmp_path)
    path, body = "/v1/agents/a1/heartbeat", json.dumps({"status": "bogus"}).encode()
    headers = signed_headers("a1", key, hub_id, "POST", path, body, time.time())
    resp = await client.post(path, data=body, headers=headers)
    raw = await resp.read()
    assert resp.status == 400  # an error answer to a verified request is signed too
    signature = resp.headers.get("X-Hetmesh-Response-Signature")
    nonce = headers["X-Hetmesh-Nonce"]
    verify_answer(key, hub_id, "a1", nonce, 400, raw, signature)
    with pytest.raises(AuthError):  # bound to this request's nonce and status
        verify_answer(key, hub_id, "a1", "0" * 32, 400, raw, signature)
    with pytest.raises(AuthError):
        verify_answer(key, hub_id, "a1", nonce, 200, raw, signature)
    with pytest.raises(AuthError):  # ...and to the agent it answers
        verify_answer(key, hub_id, "a2", nonce, 400, raw, signature)


async def test_an_answer_not_signed_by_the_hub_is_never_acted_on(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    async def impostor(request: web.Request) -> web.Response:  # knows the protocol, not the key
        return web.json_response({"ok": True, "heartbeat_interval_s": 1.0, "policy": None})

    fake = web.Application()
    fake.router.add_post("/v1/agents/a1/heartbeat", impostor)
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    other: Client = await aiohttp_client(fake)
    hc.base_url = str(other.make_url("")).rstrip("/")
    with pytest.raises(HubForged, match="carries no signature"):
        await hc.heartbeat({"status": "ok"})


async def test_duplicate_batches_apply_once(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    batch = [rec(1), rec(2, "decision"), rec(3)]
    first = await hc.sync(batch)
    assert (first["acked"], first["applied"], first["duplicates"]) == (3, 3, 0)
    again = await hc.sync(batch)
    assert (again["acked"], again["applied"], again["duplicates"]) == (3, 0, 3)
    assert stored_seqs(tmp_path, "a1") == [1, 2, 3]


async def test_out_of_order_batches_hold_the_ack_until_the_gap_fills(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    ahead = await hc.sync([rec(4), rec(5)])
    assert ahead["acked"] == 0 and ahead["applied"] == 2  # kept, but 1..3 are missing
    assert await hc.acked() == 0
    filled = await hc.sync([rec(1), rec(2), rec(3), rec(4)])
    assert filled["acked"] == 5 and filled["applied"] == 3 and filled["duplicates"] == 1
    assert stored_seqs(tmp_path, "a1") == [1, 2, 3, 4, 5]


async def test_resume_after_gap_counts_only_what_the_agent_dropped(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await hub(aiohttp_client, tmp_path)
    sim = SimulatedAgent(await agent(client), devices=[], outbox_limit=5)
    for i in range(3):
        sim.record("task", {"i": i}, 1.0)
    assert await sim.flush() == 3
    for i in range(10):  # hub unreachable meanwhile: the bounded outbox drops seq 4..8
        sim.record("task", {"i": 3 + i}, 2.0)
    assert sim.dropped == 5 and sim.dropped_through == 8
    assert await sim.flush() == 13
    state = await (await client.get("/v1/fleet")).json()
    [row] = state["agents"]
    assert (row["acked_seq"], row["applied"], row["lost"], row["duplicates"]) == (13, 8, 5, 0)
    assert stored_seqs(tmp_path, "a1") == [1, 2, 3, 9, 10, 11, 12, 13]


async def test_bad_record_rejects_the_whole_batch_and_names_it(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    with pytest.raises(HubRejected) as err:
        await hc.sync([rec(1), {"seq": 2, "kind": "gossip", "payload": {}}])
    assert err.value.status == 400 and "records[1].kind" in str(err.value)
    assert stored_seqs(tmp_path, "a1") == []
    assert (await hc.sync([rec(1)]))["acked"] == 1


async def test_state_survives_a_hub_restart(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    await hc.sync([rec(1), rec(2)])
    await client.close()
    client2 = await hub(aiohttp_client, tmp_path)
    hc.session, hc.base_url = client2.session, str(client2.make_url("")).rstrip("/")
    assert await hc.acked() == 2  # the key and the ack were both persisted
    assert (await hc.sync([rec(2), rec(3)]))["applied"] == 1


async def test_metrics_and_openapi(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await hub(aiohttp_client, tmp_path)
    hc = await agent(client)
    await hc.heartbeat({"status": "ok"})
    await hc.sync([rec(1)])
    await hc.sync([rec(1)])
    text = await (await client.get("/metrics")).text()
    assert "hetmesh_hub_heartbeats_total 1.0" in text
    assert 'hetmesh_hub_sync_records_total{outcome="duplicate"} 1.0' in text
    assert 'hetmesh_hub_agents{state="online"} 1.0' in text
    doc = await (await client.get("/v1/openapi.json")).json()
    assert "/v1/agents/{agent_id}/sync" in doc["paths"]
    missing = await client.get("/v1/nowhere")
    assert (await missing.json())["status"] == 404


async def test_retention_forgets_old_records_but_never_takes_one_twice(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await hub(aiohttp_client, tmp_path, record_retention_s=0.3, push_interval_s=0.02)
    hc = await agent(client)
    assert (await hc.sync([rec(1), rec(2), rec(4)]))["acked"] == 2  # 4 waits for 3
    deadline = time.monotonic() + 10
    while stored_seqs(tmp_path, "a1") != [4]:  # 1 and 2 age out; 4 is past the gap: kept
        assert time.monotonic() < deadline, stored_seqs(tmp_path, "a1")
        await asyncio.sleep(0.02)
    again = await hc.sync([rec(1), rec(2), rec(3)])
    assert (again["acked"], again["applied"], again["duplicates"]) == (4, 1, 2)
    assert await hc.acked() == 4


async def test_fleet_throughput_and_latency_come_from_synced_task_outcomes(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await hub(aiohttp_client, tmp_path)
    now = time.time()
    outcomes = [("done", 0.010), ("done", 0.020), ("done", 0.030), ("failed", None)]
    for name, shift in (("a1", 0), ("a2", 100)):
        hc = await agent(client, name)
        records = [
            {
                "seq": i + 1,
                "kind": "task",
                "payload": {"id": f"t{i}", "state": state, "latency_s": lat and lat + shift},
                "created_at": now,
            }
            for i, (state, lat) in enumerate(outcomes)
        ]
        old = {"seq": 5, "kind": "task", "payload": {"id": "old", "state": "done"}}
        await hc.sync([*records, {**old, "created_at": now - 3600}])  # outside the window
    t = (await (await client.get("/v1/fleet")).json())["throughput"]
    a1, a2 = t["agents"]
    assert a1["agent_id"] == "a1" and (a1["done"], a1["failed"]) == (3, 1)
    assert a1["latency_p50_s"] == 0.020 and a1["latency_p95_s"] == 0.030
    assert a1["per_s"] == round(3 / t["window_s"], 3)
    assert a2["latency_p50_s"] == 100.020
    assert t["fleet"]["done"] == 6 and t["fleet"]["failed"] == 2
    assert t["fleet"]["latency_p50_s"] == 0.030 and t["fleet"]["latency_p95_s"] == 100.030
