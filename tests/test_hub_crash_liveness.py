"""``kill -9`` of a real ``cloud-hub run`` mid-flood of heartbeats: what the hub promises.

Heartbeats are soft state (docs/hub-protocol.md, "What a heartbeat's answer promises"): an
answer may come before its group commits, so a killed hub may lose the heartbeats it
answered in about its last second, and nothing else. Enrolments (the agents' keys), policies
and rollouts were acknowledged after a durable commit and are all there after the restart;
every agent's row is one whole heartbeat (its devices carry the same time as its last-seen),
never more heartbeats than were answered, and the agents go on beating with the keys they
hold.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import edge_agent
from edge_agent.protocol.hub_client import HubClient
from tests.support.spawned import spawn

TOKEN = "crash-join"
ADMIN = "crash-admin"
AGENTS = 16
#: Seconds of answered heartbeats a killed hub may lose (the promise is "about the last
#: second": the group being committed and the heartbeats gathered behind it).
LOSS_WINDOW_S = 2.0
BEAT_EVERY_S = 0.02


def spawn_hub(data: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``cloud-hub run`` on a free loopback port; return it and its URL."""
    argv = ["cloud_hub.cli", "run", "--port", "0", "--data-dir", str(data)]
    return spawn(argv, env, data / "hub.json")


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def admin(session: aiohttp.ClientSession, url: str, doc: dict[str, Any]) -> Any:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with session.post(url, json=doc, headers=headers) as resp:
        assert resp.status in (200, 201), await resp.text()
        return await resp.json()


async def flood(
    clients: list[HubClient], answered: dict[str, list[float]], stop: asyncio.Event
) -> None:
    """Each agent beats back to back until the hub dies; note when each answer arrived."""

    async def one(client: HubClient) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                devices = [{"id": "cpu0", "kind": "cpu", "utilization": (n % 100) / 100}]
                await client.heartbeat({"status": "ok", "queue_depth": n, "devices": devices})
            except Exception:  # the hub is gone: this heartbeat was not answered
                return
            answered[client.agent_id].append(time.time())
            await asyncio.sleep(BEAT_EVERY_S)

    await asyncio.gather(*(one(c) for c in clients))


@pytest.mark.slow
@pytest.mark.asyncio
async def test_kill_9_loses_at_most_the_last_second_of_heartbeats_and_nothing_durable(
    tmp_path: Path,
) -> None:
    root = str(Path(edge_agent.__file__).resolve().parents[1])
    (tmp_path / "empty.toml").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGE_AGENT", "CLOUD_HUB"))}
    env |= {
        "PYTHONPATH": root,
        "CLOUD_HUB_CONFIG": str(tmp_path / "empty.toml"),
        "CLOUD_HUB_JOIN_TOKEN": TOKEN,
        "CLOUD_HUB_ADMIN_TOKEN": ADMIN,
        "CLOUD_HUB_HEARTBEAT_INTERVAL_S": "0.1",
    }
    data = tmp_path / "hub"
    hub, url = spawn_hub(data, env)
    answered: dict[str, list[float]] = {}
    try:
        async with aiohttp.ClientSession() as session:
            clients = [HubClient(url, f"agent-{i:02d}", session) for i in range(AGENTS)]
            keys, hub_ids = {}, set()
            for client in clients:
                await client.enrol(TOKEN, {"rack": "r1"})
                keys[client.agent_id] = client.key
                hub_ids.add(client.hub_id)
                answered[client.agent_id] = []
            await admin(session, f"{url}/v1/policies", {"name": "p", "template": "balanced"})
            await admin(
                session,
                f"{url}/v1/rollouts",
                {"name": "p", "version": 1, "selector": {}, "canary_fraction": 1.0},
            )
            stop = asyncio.Event()
            beating = asyncio.create_task(flood(clients, answered, stop))
            await asyncio.sleep(1.5)  # every agent past its first, committed, heartbeat
            killed_at = time.time()
            hub.send_signal(signal.SIGKILL)
            hub.wait(timeout=10)
            stop.set()
            await beating
    finally:
        if hub.poll() is None:
            hub.kill()
            hub.wait(timeout=10)
    db = data / "hub.db"
    # durable: every enrolment with its key, the policy and its rollout's assignments
    assert dict(rows(db, "SELECT id, key FROM agents")) == keys
    assert rows(db, "SELECT name, version FROM policies") == [("p", 1)]
    assert len(rows(db, "SELECT 1 FROM assignments WHERE name = 'p'")) == AGENTS
    stored = {
        a: (n, seen) for a, n, seen in rows(db, "SELECT id, heartbeats, last_seen FROM agents")
    }
    devices = dict(rows(db, "SELECT agent_id, updated_at FROM devices"))
    for agent_id, times in answered.items():
        n, last_seen = stored[agent_id]
        assert len(times) > 5, f"{agent_id} barely beat: {len(times)}"
        assert 1 <= n <= len(times)  # the first (committed before its answer) is there; no more
        assert devices[agent_id] == last_seen  # one whole heartbeat, not a mix of two
        lost = len(times) - n
        if lost:  # only heartbeats answered within the window before the kill
            assert times[-lost] >= killed_at - LOSS_WINDOW_S, (agent_id, lost, times[-lost])
    # restarted, the hub knows every agent by the key it holds: the next heartbeat lands
    hub, url = spawn_hub(data, env)
    try:
        async with aiohttp.ClientSession() as session:
            for agent_id, key in keys.items():
                client = HubClient(url, agent_id, session)  # what the agent kept: key, hub id
                client.key, (client.hub_id,) = key, hub_ids
                answer = await client.heartbeat({"status": "ok"})
                assert answer["desired_policy"] == "p@1"
    finally:
        hub.send_signal(signal.SIGTERM)
        hub.wait(timeout=15)
