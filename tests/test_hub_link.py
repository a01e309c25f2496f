"""The agent's hub link against a real hub on loopback: enrol, heartbeat, exactly-once sync.

Hub and agent are the real aiohttp applications on 127.0.0.1 with real SQLite files; the hub
tells agents a 0.1 s heartbeat interval and agents retry every 0.05 s, so no test sleeps.
"""

from __future__ import annotations

import sqlite3
import stat
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from cloud_hub.hub.config import HubConfig
from edge_agent.agent.config import AgentConfig, ConfigError, load_config, render_default
from edge_agent.agent.hub.link import CREDENTIAL_FILE
from edge_agent.agent.service import Agent
from edge_agent.agent.web.api import AGENT
from edge_agent.storage.db import StoreError
from tests.support.hub_link import (
    AgentServer,
    HubServer,
    Reads,
    Until,
    free_port,
    hub_records,
    outcomes,
    submit,
)

pytestmark = pytest.mark.asyncio


async def test_sync_is_exactly_once_across_hub_and_agent_restarts(
    tmp_path: Path, until: Until, reads: Reads, hub_server: HubServer, agent_server: AgentServer
) -> None:
    hub = hub_server(0)
    await hub.start()
    agent = agent_server(hub.url, telemetry_interval_s=0.05)
    app = await agent.start()
    async with aiohttp.ClientSession() as s:
        row = await until(lambda: reads.heard(s, hub))
        cred = tmp_path / "a1" / CREDENTIAL_FILE
        assert stat.S_IMODE(cred.stat().st_mode) == 0o600
        assert row["board"] == "rk3588" and row["labels"]["mode"] == "emulated board"
        devices = [d for d in (await reads.get(s, f"{hub.url}/v1/devices"))["devices"]]
        assert {d["device_id"] for d in devices} == {d.id for d in app[AGENT].fleet.devices}
        assert all(d["current"] and d["health"] == "online" for d in devices)
        ids = await submit(s, agent, 5)
        await until(lambda: reads.all_done(s, agent, ids))
        await until(lambda: len(outcomes(tmp_path)) == 5)

        await hub.stop()  # hub restart: the agent keeps working and catches up afterwards
        ids += await submit(s, agent, 5)
        await until(lambda: reads.all_done(s, agent, ids))
        await hub.start()
        await until(lambda: len(outcomes(tmp_path)) == 10)

        await agent.stop()  # agent restart: resumes from the hub's acked seq
        app = await agent.start()
        ids += await submit(s, agent, 5)
        await until(lambda: reads.all_done(s, agent, ids))
        await until(lambda: len(outcomes(tmp_path)) == 15)

        await hub.stop()  # both restart, the agent while the hub is away: nothing is lost
        ids += await submit(s, agent, 5)
        await until(lambda: reads.all_done(s, agent, ids))
        await agent.stop()
        app = await agent.start()
        await hub.start()
        await until(lambda: len(outcomes(tmp_path)) == 20)
        await until(lambda: app[AGENT].health()["hub"]["pending"] == 0)
        row = await reads.hub_agent(s, hub)
        await agent.stop()
        await hub.stop()
    counts = outcomes(tmp_path)
    assert set(counts) == set(ids) and set(counts.values()) == {1}  # none lost, none twice
    records = hub_records(tmp_path)
    seqs = [seq for seq, _, _ in records]
    assert seqs == list(range(1, len(seqs) + 1)) and row["lost"] == 0
    assert row["duplicates"] == 0  # the agent resumed from the hub's acked seq each time
    kinds = Counter(k for _, k, _ in records)
    assert kinds["decision"] == 20 and kinds["telemetry"] > 0
    why = [p["why_here"] for _, k, p in records if k == "decision"]
    assert all(isinstance(w, str) and w for w in why)


async def test_hub_down_never_blocks_tasks_and_they_sync_when_it_comes(
    tmp_path: Path, until: Until, reads: Reads, hub_server: HubServer, agent_server: AgentServer
) -> None:
    port = free_port()
    agent = agent_server(f"http://127.0.0.1:{port}")
    app = await agent.start()
    async with aiohttp.ClientSession() as s:
        ids = await submit(s, agent, 8)  # the hub has never been up: not even enrolled
        await until(lambda: reads.all_done(s, agent, ids))
        status = await until(lambda: _pending(app))
        assert status["enrolled"] is False and status["connected"] is False
        async with s.get(f"{agent.url}/metrics") as resp:
            text = await resp.text()
        assert "hetmesh_agent_hub_connected 0.0" in text
        assert f"hetmesh_agent_hub_pending {float(status['pending'])}" in text
        hub = hub_server(port)
        await hub.start()
        await until(lambda: len(outcomes(tmp_path)) == 8)
        await until(lambda: app[AGENT].health()["hub"]["connected"])
        await agent.stop()
        await hub.stop()
    assert set(outcomes(tmp_path)) == set(ids)


def _pending(app: web.Application) -> Any:
    status = app[AGENT].health()["hub"]
    return status if status["pending"] >= 16 else None  # 8 decisions and 8 outcomes


async def test_full_outbox_drops_oldest_and_the_hub_counts_them_lost(
    tmp_path: Path, until: Until, reads: Reads, hub_server: HubServer, agent_server: AgentServer
) -> None:
    port = free_port()
    agent = agent_server(f"http://127.0.0.1:{port}", hub_outbox_limit=6)
    app = await agent.start()
    async with aiohttp.ClientSession() as s:
        ids = await submit(s, agent, 10)  # 20 records (decision + outcome each), 6 kept
        await until(lambda: reads.all_done(s, agent, ids))
        hub = hub_server(port)
        await hub.start()
        await until(lambda: app[AGENT].health()["hub"]["pending"] == 0 and _synced(app))
        row = await until(lambda: reads.hub_agent(s, hub))
        dropped = app[AGENT].health()["hub"]["dropped"]
        await agent.stop()
        await hub.stop()
    records = hub_records(tmp_path)
    assert dropped == 14 and row["lost"] == 14 and row["acked_seq"] == 20
    assert [seq for seq, _, _ in records] == list(range(15, 21))


def _synced(app: web.Application) -> bool:
    return bool(app[AGENT].health()["hub"]["acked"] == 20)


async def test_policy_from_the_hub_is_applied_acknowledged_and_kept_offline(
    tmp_path: Path,
    until: Until,
    reads: Reads,
    hub_server: HubServer,
    agent_server: AgentServer,
    hub_config: Callable[..., HubConfig],
) -> None:
    hub = hub_server(0)
    await hub.start()
    agent = agent_server(hub.url)
    app = await agent.start()
    auth = {"Authorization": f"Bearer {hub_config().admin_token}"}
    async with aiohttp.ClientSession() as s:
        await until(lambda: reads.hub_agent(s, hub))
        doc = {"name": "edge", "template": "latency-first"}
        async with s.post(f"{hub.url}/v1/policies", json=doc, headers=auth) as resp:
            assert resp.status == 201, await resp.text()
            version = (await resp.json())["version"]
        body = {"name": "edge", "version": version, "selector": {"board": "rk3588"}}
        async with s.post(f"{hub.url}/v1/rollouts", json=body, headers=auth) as resp:
            assert resp.status == 201, await resp.text()
        live: Agent = app[AGENT]
        await until(lambda: live.placer.policy.name == "edge")
        row = await until(lambda: reads.acknowledged(s, hub, f"edge@{version}"))
        assert row["desired_name"] == "edge" and live.health()["policy"] == f"edge@{version}"
        ids = await submit(s, agent, 1)
        await until(lambda: reads.all_done(s, agent, ids))
        await agent.stop()
        await hub.stop()  # offline: the agent starts with the last policy it accepted
        app = await agent.start()
        assert app[AGENT].placer.policy.name == "edge"
        assert app[AGENT].placer.policy.version == version
        await agent.stop()


async def test_no_hub_configured_changes_nothing(
    tmp_path: Path, until: Until, reads: Reads, agent_server: AgentServer
) -> None:
    agent = agent_server("")
    app = await agent.start()
    async with aiohttp.ClientSession() as s:
        ids = await submit(s, agent, 2)
        await until(lambda: reads.all_done(s, agent, ids))
        health = await reads.get(s, f"{agent.url}/v1/health")
    await agent.stop()
    assert health["hub"] is None and app[AGENT].link is None
    assert not (tmp_path / "a1" / CREDENTIAL_FILE).exists()


async def test_hub_settings_come_from_toml_and_environment(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text(
        '[hub]\nurl = "http://127.0.0.1:9"\njoin_token = "t"\nlabels = { site = "lab" }\n'
        "outbox_limit = 50\n"
    )
    c = load_config(file, env={})
    assert (c.hub_url, c.hub_join_token, c.hub_labels, c.hub_outbox_limit) == (
        "http://127.0.0.1:9",
        "t",
        {"site": "lab"},
        50,
    )
    assert "'t'" not in repr(c)  # the join token is a secret
    assert load_config(file, env={}) == load_config(_rendered(tmp_path, c), env={})
    env = {"EDGE_AGENT_HUB_URL": "http://127.0.0.1:10", "EDGE_AGENT_HUB_JOIN_TOKEN": "u"}
    c = load_config(file, env=env)
    assert (c.hub_url, c.hub_join_token) == ("http://127.0.0.1:10", "u")
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="join_token"):
        load_config(empty, env={"EDGE_AGENT_HUB_URL": "http://127.0.0.1:9"})
    with pytest.raises(ConfigError, match="hub_url"):
        load_config(empty, env={"EDGE_AGENT_HUB_URL": "ftp://x", "EDGE_AGENT_HUB_JOIN_TOKEN": "t"})


def _rendered(tmp_path: Path, config: AgentConfig) -> Path:
    path = tmp_path / "rendered.toml"
    path.write_text(render_default(config))
    return path


async def test_a_crash_between_hub_commit_and_local_ack_resends_nothing_twice(
    tmp_path: Path, until: Until, reads: Reads, hub_server: HubServer, agent_server: AgentServer
) -> None:
    hub = hub_server(0)
    await hub.start()
    agent = agent_server(hub.url)
    app = await agent.start()
    live: Agent = app[AGENT]
    real = live.store.outbox.acknowledge
    failures: list[int] = []

    async def crash_once(acked: int) -> None:
        if not failures and acked > 0:
            failures.append(acked)  # the hub committed the batch; we "crash" before forgetting
            raise StoreError("disk went away")
        await real(acked)

    live.store.outbox.acknowledge = crash_once  # type: ignore[method-assign]
    async with aiohttp.ClientSession() as s:
        ids = await submit(s, agent, 4)
        await until(lambda: reads.all_done(s, agent, ids))
        await until(lambda: failures and live.health()["hub"]["pending"] == 0)
        await until(lambda: len(outcomes(tmp_path)) == 4)
        row = await reads.hub_agent(s, hub)
        await agent.stop()
        await hub.stop()
    assert set(outcomes(tmp_path).values()) == {1} and row["duplicates"] == 0
    state = _outbox_rows(tmp_path / "a1" / "agent.db")
    assert state == 0  # everything the hub holds was forgotten locally


def _outbox_rows(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(
            conn.execute("SELECT count(*) FROM outbox WHERE kind != 'telemetry'").fetchone()[0]
        )
    finally:
        conn.close()
