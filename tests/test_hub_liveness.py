"""Liveness that does not lie: states from last-seen times with an injected clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.liveness import counts, states
from cloud_hub.hub.store import HubStore
from cloud_hub.hub.wire import Enrolment
from edge_agent.protocol.hub_client import HubClient

Client = TestClient[Any, Any]


class Clock:
    """A settable clock shared by the hub and the agents."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def row(agent_id: str, last_seen: float | None, status: str = "ok", peers: Any = ()) -> Any:
    return {"id": agent_id, "last_seen": last_seen, "status": status, "peers": list(peers)}


def test_states_from_last_seen_health_and_peers() -> None:
    rows = [
        row("fresh", 95.0),
        row("sick", 95.0, status="degraded"),
        row("cut", 50.0),
        row("dead", 50.0),
        row("witness", 99.0, peers=["cut"]),
        row("new", None),
        row("stale-witness", 10.0, peers=["dead"]),
    ]
    got = states(rows, now=100.0, stale_after_s=15.0)
    assert got == {
        "fresh": "online",
        "sick": "degraded",
        "cut": "partitioned",
        "dead": "offline",  # seen only by a peer whose own data is stale
        "witness": "online",
        "new": "unknown",
        "stale-witness": "offline",
    }


@pytest.mark.parametrize(
    ("age", "state"), [(14.999, "online"), (15.0, "online"), (15.001, "offline")]
)
def test_healthy_ends_exactly_at_three_intervals(age: float, state: str) -> None:
    assert states([row("a", 100.0 - age)], now=100.0, stale_after_s=15.0)["a"] == state


@pytest.mark.asyncio
async def test_hub_marks_silent_agents_and_their_devices_stale(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    clock = Clock()
    config = HubConfig(data_dir=tmp_path, port=0, join_token="t", heartbeat_interval_s=5.0)
    client: Client = await aiohttp_client(make_app(config, clock))
    base = str(client.make_url(""))
    agents = {}
    for name in ("a", "b", "c", "d"):
        agents[name] = HubClient(base, name, client.session, clock)
        await agents[name].enrol("t")
    dev = [{"id": "cpu0", "kind": "cpu", "utilization": 0.5}]
    for name in ("a", "b", "c"):
        await agents[name].heartbeat({"status": "ok", "devices": dev})

    async def fleet() -> dict[str, Any]:
        return dict(await (await client.get("/v1/fleet")).json())

    snap = await fleet()
    assert {a["id"]: a["state"] for a in snap["agents"]} == {
        "a": "online",
        "b": "online",
        "c": "online",
        "d": "unknown",
    }
    clock.now += 15.5  # just past three 5 s intervals: b and c fall silent
    await agents["a"].heartbeat({"status": "ok", "devices": dev, "peers": ["b"]})
    snap = await fleet()
    assert {a["id"]: a["state"] for a in snap["agents"]} == {
        "a": "online",
        "b": "partitioned",
        "c": "offline",
        "d": "unknown",
    }
    current = {d["agent_id"]: d["current"] for d in snap["devices"]}
    assert current == {"a": True, "b": False, "c": False}
    await agents["c"].heartbeat({"status": "degraded", "problem": "disk full"})
    snap = await fleet()
    c = next(a for a in snap["agents"] if a["id"] == "c")
    assert c["state"] == "degraded" and c["problem"] == "disk full"
    assert snap["counts"] == {
        "online": 1,
        "degraded": 1,
        "partitioned": 1,
        "offline": 0,
        "unknown": 1,
    }


@pytest.mark.asyncio
async def test_the_metrics_count_in_sql_follows_the_same_rules_as_states(tmp_path: Path) -> None:
    now, stale = 1_000.0, 15.0
    fleet = [  # every state, the edges of "fresh", a peer seen only by a stale agent
        row("on", now - 15.0, peers=["part", "ghost"]),
        row("deg", now - 1.0, status="degraded", peers=["part"]),
        row("part", now - 15.5),
        row("off", now - 100.0, peers=["off2"]),  # stale: whom it sees stays offline
        row("off2", now - 16.0),
        row("new", None),
        row("bad", now - 99.0),
    ]
    store = HubStore(tmp_path / "hub.db")
    store.open()
    try:
        for agent in fleet:
            await store.enrol(Enrolment(agent["id"], "t"), 1.0)

        def put(db: Any) -> None:
            for agent in fleet:
                peers = "not json" if agent["id"] == "bad" else json.dumps(agent["peers"])
                db.execute(
                    "UPDATE agents SET last_seen = ?, status = ?, peers = ? WHERE id = ?",
                    (agent["last_seen"], agent["status"], peers, agent["id"]),
                )

        await store.db.write(put)
        expected = counts(states(fleet, now, stale).values())
        assert expected == dict(online=1, degraded=1, partitioned=1, offline=3, unknown=1)
        assert await store.state_counts(now, stale) == expected
    finally:
        store.close()
