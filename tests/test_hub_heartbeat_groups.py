"""Heartbeats stored in groups (``cloud_hub/hub/heartbeat_writes.py``) and the hub's interval
policy for a large fleet (``[liveness] max_heartbeats_per_s``), through the real hub app
(aiohttp, SQLite file) and the edge agent's own ``HubClient``.

What a heartbeat promised alone still holds in a group: answered only once committed (read
back from the file by another connection), each counted once, in order for one agent, an
error in one heartbeat's data failing only that one, and a replay refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub import heartbeat_writes
from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.heartbeat_writes import HeartbeatWriter
from cloud_hub.hub.models_api import FEDERATION
from cloud_hub.hub.request_auth import HUB
from cloud_hub.hub.store import HubStore
from cloud_hub.hub.wire import Enrolment, heartbeat
from edge_agent.config_file import ConfigError
from edge_agent.protocol.hub_client import HubClient

Client = TestClient[Any, Any]
Replay = Callable[..., Awaitable[tuple[int, Any]]]
Metric = Callable[..., Awaitable[float]]


def devices(n: int, util: float) -> list[dict[str, Any]]:
    return [{"id": f"d{i}", "kind": "cpu", "utilization": util} for i in range(n)]


@contextlib.asynccontextmanager
async def opened_store(tmp_path: Path) -> AsyncIterator[HubStore]:
    """A hub store on a real SQLite file in ``tmp_path``, closed after."""
    store = HubStore(tmp_path / "hub.db")
    await asyncio.to_thread(store.open)
    try:
        yield store
    finally:
        await asyncio.to_thread(store.close)


def stored(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows read from the hub's file by a connection of its own (what is committed)."""
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, args).fetchall()


@pytest.mark.asyncio
async def test_concurrent_heartbeats_share_a_transaction_each_committed_when_answered(
    aiohttp_client: Any, hub_config: Callable[..., HubConfig]
) -> None:
    config = hub_config()
    client: Client = await aiohttp_client(make_app(config))
    base = str(client.make_url(""))
    agents = [HubClient(base, f"a{i}", client.session) for i in range(40)]
    await asyncio.gather(*(a.enrol(config.join_token) for a in agents))
    writer = client.app[HUB].store.heartbeats
    groups_before = writer.groups

    async def beat(i: int, agent: HubClient) -> None:
        await agent.heartbeat({"status": "ok", "devices": devices(2, i / 100), "queue_depth": i})
        # answered: it is in the file, for any other reader
        sql = "SELECT queue_depth FROM agents WHERE id = ?"
        (row,) = stored(config.db_path, sql, agent.agent_id)
        assert row == (i,)

    await asyncio.gather(*(beat(i, a) for i, a in enumerate(agents)))
    assert writer.groups - groups_before < len(agents)  # grouped, not one commit each
    assert writer.largest > 1
    rows = stored(config.db_path, "SELECT id, heartbeats, queue_depth FROM agents ORDER BY id")
    assert sorted(rows) == sorted((f"a{i}", 1, i) for i in range(40))
    sql = "SELECT agent_id, utilization FROM devices WHERE device_id = 'd1'"
    utils = stored(config.db_path, sql)
    assert sorted(utils) == sorted((f"a{i}", i / 100) for i in range(40))


@pytest.mark.asyncio
async def test_one_agent_twice_in_a_group_is_stored_as_if_one_after_the_other(
    tmp_path: Path,
) -> None:
    async with opened_store(tmp_path) as store:
        await store.enrol(Enrolment("a1", "t"), 1.0)
        first = heartbeat({"devices": devices(3, 0.1), "slo_misses": 1})
        second = heartbeat({"devices": devices(1, 0.9), "slo_misses": 2, "status": "degraded"})
        # both handed over in one loop iteration: one group, the agent in it twice
        results = await asyncio.gather(
            store.heartbeat("a1", first, 10.0), store.heartbeat("a1", second, 11.0)
        )
        assert results == [None, None]  # no policy assigned
        assert store.heartbeats.largest == 2
        assert stored(
            store.db.path, "SELECT heartbeats, status, slo_misses, last_seen FROM agents"
        ) == [(2, "degraded", 2, 11.0)]
        assert stored(store.db.path, "SELECT device_id, utilization FROM devices") == [
            ("d0", 0.9)
        ]  # the later heartbeat's devices only


@pytest.mark.asyncio
async def test_a_heartbeat_the_database_refuses_fails_alone_and_its_group_is_kept(
    tmp_path: Path,
) -> None:
    async with opened_store(tmp_path) as store:
        for name in ("a1", "a2", "a3"):
            await store.enrol(Enrolment(name, "t"), 1.0)
        good = heartbeat({"queue_depth": 3})
        # wire.heartbeat refuses a device reported twice; one built around it breaks the
        # devices table's key, which SQLite refuses
        twice = heartbeat({"devices": devices(1, 0.5)}).devices * 2
        bad = type(good)(queue_depth=2, devices=twice)
        outcomes = await asyncio.gather(
            store.heartbeat("a1", good, 5.0),
            store.heartbeat("a2", bad, 5.0),
            store.heartbeat("a3", good, 5.0),
            return_exceptions=True,
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], sqlite3.IntegrityError)
        rows = stored(store.db.path, "SELECT id, heartbeats, queue_depth FROM agents ORDER BY id")
        assert rows == [("a1", 1, 3), ("a2", 0, None), ("a3", 1, 3)]


@pytest.mark.asyncio
async def test_a_closed_store_fails_the_waiting_heartbeats_with_its_error(tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.db")
    await asyncio.to_thread(store.open)
    await store.enrol(Enrolment("a1", "t"), 1.0)
    await asyncio.to_thread(store.close)
    writer = HeartbeatWriter(store.db)
    with pytest.raises(Exception, match="closed"):
        await writer.add(("a1", heartbeat({}), 2.0))
    assert writer.groups == 1


@pytest.mark.asyncio
async def test_a_replay_among_a_group_of_heartbeats_is_refused(
    aiohttp_client: Any,
    hub_config: Callable[..., HubConfig],
    recorder: Any,
    replay: Replay,
    metric: Metric,
) -> None:
    config = hub_config()
    client: Client = await aiohttp_client(make_app(config))
    base = str(client.make_url(""))
    victim = HubClient(base, "victim", recorder.session)
    others = [HubClient(base, f"o{i}", client.session) for i in range(10)]
    await asyncio.gather(*(a.enrol(config.join_token) for a in [victim, *others]))
    await victim.heartbeat({"status": "ok"})
    captured = recorder.last("/v1/agents/victim/heartbeat")
    results = await asyncio.gather(
        replay(captured, client.port), *(o.heartbeat({"status": "ok"}) for o in others)
    )
    status, doc = results[0]
    assert status == 401 and "replayed request" in doc["error"], doc
    assert await metric(client, "/metrics", 'hetmesh_hub_auth_failures_total{reason="replay"}') == 1
    beats = dict(stored(config.db_path, "SELECT id, heartbeats FROM agents"))
    assert beats == {"victim": 1, **{f"o{i}": 1 for i in range(10)}}


def test_the_interval_grows_with_the_fleet_beyond_the_heartbeat_cap() -> None:
    config = HubConfig(heartbeat_interval_s=5.0, max_heartbeats_per_s=500.0)
    assert config.interval_for(1000) == 5.0  # 200 a second: under the cap
    assert config.interval_for(2500) == 5.0  # exactly the cap
    assert config.interval_for(8000) == 16.0  # 500 a second, not 1,600
    assert config.stale_after_for(8000) == 48.0  # liveness judged at the interval asked
    assert HubConfig().replace(max_heartbeats_per_s=0.0).interval_for(10**6) == 5.0  # no cap
    for bad in (-1.0, float("nan")):
        with pytest.raises(ConfigError, match="max_heartbeats_per_s must be >= 0"):
            HubConfig().replace(max_heartbeats_per_s=bad)


@pytest.mark.asyncio
async def test_the_hub_asks_a_growing_fleet_for_longer_intervals_and_judges_and_gathers_by_them(
    aiohttp_client: Any, hub_config: Callable[..., HubConfig]
) -> None:
    now = [time.time()]
    config = hub_config(heartbeat_interval_s=1.0, max_heartbeats_per_s=2.0)
    client: Client = await aiohttp_client(make_app(config, clock=lambda: now[0]))
    base = str(client.make_url(""))
    agents = [HubClient(base, f"a{i}", client.session, clock=lambda: now[0]) for i in range(6)]
    asked = []
    for agent in agents:
        await agent.enrol(config.join_token)
        asked.append(agent.heartbeat_interval_s)
    assert asked == [1.0, 1.0, 1.5, 2.0, 2.5, 3.0]  # at most 2 heartbeats a second in all
    answer = await agents[0].heartbeat({"status": "ok"})
    assert answer["heartbeat_interval_s"] == 3.0  # an agent enrolled early is told too
    now[0] += 8.0  # past 3 x the configured 1 s, within 3 x the 3 s asked for
    fleet = await (await client.get("/v1/fleet")).json()
    assert fleet["heartbeat_interval_s"] == 3.0 and fleet["stale_after_s"] == 9.0
    assert {a["id"]: a["state"] for a in fleet["agents"]}["a0"] == "online"
    now[0] += 1.5  # 9.5 s since: stale at the interval in force
    fleet = await (await client.get("/v1/fleet")).json()
    assert {a["id"]: a["state"] for a in fleet["agents"]}["a0"] == "offline"
    # a learning run waits for two polls at the interval in force, not the configured one
    assert client.app[FEDERATION].settings.gather_s == 3.0  # 2 x 1 s + 1
    assert client.app[FEDERATION].gather_s() == 7.0  # 2 x 3 s + 1


@pytest.mark.asyncio
async def test_a_known_agent_is_answered_before_its_commit_and_reads_wait_for_it(
    tmp_path: Path,
) -> None:
    async with opened_store(tmp_path) as store:
        await store.enrol(Enrolment("a1", "t"), 1.0)
        writer = store.heartbeats
        assert await store.heartbeat("a1", heartbeat({"queue_depth": 1}), 2.0) is None
        assert writer.early == 0  # its first since the hub started: answered after its commit
        for depth in range(2, 6):  # its policy (none) is known now: answered at once
            assert await store.heartbeat("a1", heartbeat({"queue_depth": depth}), depth) is None
        assert writer.early == 4
        # a read after the answers sees every one of them
        [agent] = await store.agents()
        assert (agent["heartbeats"], agent["queue_depth"], agent["last_seen"]) == (5, 5, 5.0)
        await writer.settled()
        assert stored(store.db.path, "SELECT heartbeats FROM agents") == [(5,)]
        store.db.trouble = "cannot write hub.db: disk is full"  # as a failed commit sets it
        await store.heartbeat("a1", heartbeat({"queue_depth": 6}), 6.0)
        assert writer.early == 4  # a failing storage: answered after the commit, or refused


@pytest.mark.asyncio
async def test_after_a_rollout_the_next_heartbeat_waits_for_its_commit_and_names_the_policy(
    aiohttp_client: Any, hub_config: Callable[..., HubConfig]
) -> None:
    config = hub_config()
    client: Client = await aiohttp_client(make_app(config))
    agent = HubClient(str(client.make_url("")), "a1", client.session)
    await agent.enrol(config.join_token)
    writer = client.app[HUB].store.heartbeats
    for _ in range(2):
        assert (await agent.heartbeat({"status": "ok"}))["desired_policy"] is None
    assert writer.early == 1
    admin = {"Authorization": f"Bearer {config.admin_token}"}
    resp = await client.post(
        "/v1/policies", json={"name": "p", "template": "balanced"}, headers=admin
    )
    assert resp.status == 201, await resp.text()
    rollout = {"name": "p", "version": 1, "selector": {}, "canary_fraction": 1.0}
    resp = await client.post("/v1/rollouts", json=rollout, headers=admin)
    assert resp.status in (200, 201), await resp.text()
    answer = await agent.heartbeat({"status": "ok"})
    assert answer["desired_policy"] == "p@1" and answer["policy"]["name"] == "p"
    assert writer.early == 1  # not answered from what the group before the rollout read
    answer = await agent.heartbeat({"status": "ok", "policy": {"name": "p", "version": 1}})
    assert answer["desired_policy"] == "p@1" and answer["policy"] is None
    assert writer.early == 2  # known again


@pytest.mark.asyncio
async def test_heartbeat_groups_are_fsynced_at_most_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened_store(tmp_path) as store:
        await store.enrol(Enrolment("a1", "t"), 1.0)
        asked: list[bool] = []
        write = store.db.write

        def spy(op: Any, *, durable: bool = True) -> Any:
            asked.append(durable)
            return write(op, durable=durable)

        monkeypatch.setattr(store.db, "write", spy)
        monkeypatch.setattr(heartbeat_writes, "DURABLE_EVERY_S", 60.0)  # a slow box's second
        for i in range(3):
            await store.heartbeat("a1", heartbeat({"queue_depth": i}), float(i))
            await store.heartbeats.settled()
        assert asked == [True, False, False]  # the first fsynced, then none within the period
        monkeypatch.setattr(heartbeat_writes, "DURABLE_EVERY_S", 0.0)
        await store.heartbeat("a1", heartbeat({"queue_depth": 9}), 9.0)
        await store.heartbeats.settled()
        assert asked[-1] is True  # the period (here: none) over since the last fsync
