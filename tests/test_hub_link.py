"""The agent's hub link against a real hub on loopback: enrol, heartbeat, exactly-once sync.

Hub and agent are the real aiohttp applications on 127.0.0.1 with real SQLite files; the hub
tells agents a 0.1 s heartbeat interval and agents retry every 0.05 s, so no test sleeps.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import stat
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from cloud_hub.hub.api import make_app as hub_app
from cloud_hub.hub.config import HubConfig
from edge_agent.agent.config import AgentConfig, ConfigError, load_config, render_default
from edge_agent.agent.hub.link import CREDENTIAL_FILE
from edge_agent.agent.service import Agent
from edge_agent.agent.web.api import AGENT
from edge_agent.agent.web.api import make_app as agent_app
from edge_agent.storage.db import StoreError

pytestmark = pytest.mark.asyncio
TASK = {"semantics": {"gflops": 0.01}, "requirements": {"kinds": ["cpu"]}}
#: The conftest fixtures ``until`` and ``get_json``.
Until = Callable[..., Awaitable[Any]]
GetJson = Callable[[aiohttp.ClientSession, str], Awaitable[Any]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One aiohttp application served on 127.0.0.1; stop and start again on the same port."""

    def __init__(self, make: Callable[[], web.Application], port: int = 0) -> None:
        self.make, self.port = make, port
        self.runner: web.AppRunner | None = None

    async def start(self) -> web.Application:
        app = self.make()
        self.runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=0.5
        )
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = int(self.runner.addresses[0][1])
        return app

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()
        self.runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


#: The ``hub_server`` and ``agent_server`` fixtures (below).
HubServer = Callable[[int], Server]
AgentServer = Callable[..., Server]
#: Hub settings of these tests: agents are told a 0.1 s heartbeat interval.
QUICK_HUB = {"heartbeat_interval_s": 0.1, "push_interval_s": 0.05}


@pytest.fixture
def hub_server(hub_config: Callable[..., HubConfig]) -> HubServer:
    """Return ``hub_server(port=0)``: the hub (conftest ``hub_config``, QUICK_HUB) to serve."""

    def make(port: int = 0) -> Server:
        config = hub_config(port=port, **QUICK_HUB)
        return Server(lambda: hub_app(config), port)

    return make


@pytest.fixture
def agent_server(joined_agent: Callable[..., AgentConfig]) -> AgentServer:
    """Return ``agent_server(hub_url, name="a1", **changes)``: a ``joined_agent`` to serve
    (given 1 s to finish its work when stopped)."""

    def make(hub_url: str, name: str = "a1", **changes: Any) -> Server:
        config = joined_agent(hub_url, name, shutdown_grace_s=1.0).replace(**changes)
        return Server(lambda: agent_app(config))

    return make


async def submit(session: aiohttp.ClientSession, agent: Server, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        async with session.post(f"{agent.url}/v1/tasks", json=TASK) as resp:
            assert resp.status == 202, await resp.text()
            ids.append((await resp.json())["task"]["id"])
    return ids


@dataclass
class Reads:
    """What the tests read from the hub and the agent over HTTP (GETs that must answer 200)."""

    get: GetJson

    async def all_done(self, s: aiohttp.ClientSession, agent: Server, ids: list[str]) -> bool:
        tasks = (await self.get(s, f"{agent.url}/v1/tasks?limit=1000"))["tasks"]
        states = {t["id"]: t["state"] for t in tasks}
        return all(states.get(i) == "done" for i in ids)

    async def hub_agent(self, s: aiohttp.ClientSession, hub: Server, agent_id: str = "a1") -> Any:
        """The hub's row for the agent (None while the hub does not know it)."""
        rows = (await self.get(s, f"{hub.url}/v1/agents"))["agents"]
        return next((r for r in rows if r["id"] == agent_id), None)

    async def heard(self, s: aiohttp.ClientSession, hub: Server) -> Any:
        """The agent's row once the hub has had two heartbeats from it and shows it online."""
        row = await self.hub_agent(s, hub)
        return row if row and row["heartbeats"] >= 2 and row["state"] == "online" else None

    async def acknowledged(self, s: aiohttp.ClientSession, hub: Server, label: str) -> Any:
        """The agent's row once it reports running the policy ``label``."""
        row = await self.hub_agent(s, hub)
        return row if row and row["policy"] == label else None


@pytest.fixture
def reads(get_json: GetJson) -> Reads:
    return Reads(get_json)


def hub_records(tmp_path: Path, agent_id: str = "a1") -> list[tuple[int, str, dict[str, Any]]]:
    conn = sqlite3.connect(tmp_path / "hub" / "hub.db")
    try:
        rows = conn.execute(
            "SELECT seq, kind, payload FROM records WHERE agent_id = ? ORDER BY seq", (agent_id,)
        ).fetchall()
        return [(int(s), str(k), json.loads(p)) for s, k, p in rows]
    finally:
        conn.close()


def outcomes(tmp_path: Path) -> Counter[str]:
    """Return how many ``done`` task records the hub holds per task id."""
    return Counter(p["id"] for _, k, p in hub_records(tmp_path) if k == "task")


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


async def test_agent_finds_the_hub_over_mdns_and_refuses_one_that_cannot_prove_the_token(
    tmp_path: Path,
    until: Until,
    reads: Reads,
    agent_server: AgentServer,
    hub_config: Callable[..., HubConfig],
) -> None:
    """A relay announcing ``_hetmesh-hub._tcp`` gets no join token; the real hub is used."""
    from zeroconf.asyncio import AsyncServiceInfo

    from cloud_hub.hub.server import serve
    from edge_agent.agent.hub.finder import open_zeroconf
    from edge_agent.protocol.hub_discovery import HUB_SERVICE_TYPE, hub_txt

    # phase 1: the real hub runs unannounced; a fake announces itself under the real hub's id
    # and passes every proof question on to the real hub: it never holds the token, and the
    # real hub's answer names the address it was asked on, which is not the fake's
    real = hub_config(hub_id="hub-real", **QUICK_HUB)
    quiet = Server(lambda: hub_app(real))
    await quiet.start()
    asked: list[str] = []

    async def relay(request: web.Request) -> web.Response:
        asked.append(request.path)
        body = await request.read()
        async with aiohttp.ClientSession() as s, s.post(quiet.url + request.path, data=body) as r:
            return web.json_response(await r.json(), status=r.status)

    def fake_app() -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", relay)
        return app

    fake = Server(fake_app)
    await fake.start()
    fake_zc = open_zeroconf(["127.0.0.1"])
    await fake_zc.async_register_service(
        AsyncServiceInfo(
            HUB_SERVICE_TYPE,
            f"hub-fake.{HUB_SERVICE_TYPE}",
            addresses=[socket.inet_aton("127.0.0.1")],
            port=fake.port,
            properties=hub_txt("hub-real", "0.1.0", fake.port, "http"),  # claims the real id
            server="hub-fake.local.",
        ),
        cooperating_responders=True,
    )
    agent = agent_server("mdns", hub_mdns_interfaces=("127.0.0.1",))
    app = await agent.start()
    stop = asyncio.Event()
    served: asyncio.Task[None] | None = None
    try:
        async with aiohttp.ClientSession() as s:
            link = app[AGENT].link
            assert link is not None
            await until(lambda: link.status()["discovery"]["refused"] >= 1)
            status = link.status()
            assert "a relay, not the hub" in status["discovery"]["last_refused"]
            assert asked == ["/v1/hub/proof"] and not status["enrolled"]
            assert status["heartbeats"] == 0 and not status["connected"]
            ids = await submit(s, agent, 3)  # work goes on while no hub is trusted
            await until(lambda: reads.all_done(s, agent, ids))
            assert await reads.hub_agent(s, quiet) is None
            await quiet.stop()

            # phase 2: the real hub announces itself; the agent proves it, enrols, heartbeats
            served = asyncio.create_task(serve(real.replace(advertise=True), stop))
            state = await until(lambda: _state(real.state_path))
            hub = Server(web.Application, int(state["port"]))  # for its url only
            row = await until(lambda: reads.heard(s, hub))
            status = link.status()
            assert status["url"] == hub.url and status["discovery"]["hub_id"] == "hub-real"
            assert row["labels"]["mode"] == "emulated board"
            await until(lambda: len(outcomes(tmp_path)) == 3)
            assert all(p == "/v1/hub/proof" for p in asked)  # the fake never got the token
            cred = json.loads((tmp_path / "a1" / CREDENTIAL_FILE).read_text())
            assert cred["url"] == "mdns" and cred["hub_id"] == "hub-real"
    finally:
        await agent.stop()
        stop.set()
        if served is not None:
            await served
        await fake_zc.async_close()
        await fake.stop()
        if quiet.runner is not None:
            await quiet.stop()


def _state(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
