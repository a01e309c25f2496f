"""Real agents in a mesh on loopback: `edge-agent run`'s serve(), real mDNS, HTTP and SQLite.

An rpi5 agent (no NPU) gets an int8 NPU-only task over its HTTP API; an rk3588 agent (the
only NPU) runs it once; the origin shows where it ran and the decision chain. A node that
shows the fleet's fingerprint without the key is counted on /metrics and gets no work.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from zeroconf.asyncio import AsyncServiceInfo

from edge_agent.agent.config import AgentConfig, ConfigError, load_config, render_default
from edge_agent.agent.hub.devices import DeviceReporter
from edge_agent.agent.mesh.link import MESH, mesh_config
from edge_agent.agent.web.api import AGENT, make_app
from edge_agent.cli import main as cli_main
from edge_agent.mesh import FleetKey, MeshConfig
from edge_agent.mesh.advertise import SERVICE_TYPE, new_zeroconf
from edge_agent.mesh.standalone import emulated_node, serve

KEY = "agent-mesh-test-fleet-key-000000"
NPU_TASK = {
    "semantics": {"gflops": 2.0, "precision": "int8"},
    "requirements": {"kinds": ["npu"], "precision": "int8", "model_format": None},
    "task_class": "detect",
}

#: The ``agent_daemon`` fixture (tests/conftest.py): serve(config) yields the agent's URL.
Serve = Callable[[AgentConfig], AbstractAsyncContextManager[str]]
#: The ``until``, ``get_json`` and ``final_task`` fixtures (tests/conftest.py).
Until = Callable[..., Awaitable[Any]]
GetJson = Callable[[aiohttp.ClientSession, str], Awaitable[Any]]
FinalTask = Callable[[aiohttp.ClientSession, str, str], Awaitable[dict[str, Any]]]
PeerOnline = Callable[[aiohttp.ClientSession, str, str], Awaitable[None]]


#: ``agent_config(name, profile, **changes)`` (below).
MakeConfig = Callable[..., AgentConfig]


@pytest.fixture
def agent_config(tmp_path: Path, emulated_agent: MakeConfig) -> MakeConfig:
    """Return ``agent_config(name, profile, **changes)``: an ``emulated_agent`` board of that
    profile in ``tmp_path / name``, in the mesh of KEY with 0.3 s heartbeats."""

    def make(name: str, profile: str, **changes: Any) -> AgentConfig:
        mesh = {"mesh_fleet_key": KEY, "mesh_heartbeat_s": 0.3}
        return emulated_agent(data_dir=tmp_path / name, profile=profile, **mesh).replace(**changes)

    return make


@pytest.mark.asyncio
async def test_an_npu_task_submitted_to_a_box_without_npu_runs_once_on_the_npu_agent(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    agent_config: MakeConfig,
    agent_daemon: Serve,
    until: Until,
    get_json: GetJson,
    final_task: FinalTask,
    peer_online: PeerOnline,
) -> None:
    cpu_cfg = agent_config("cpu", "rpi5", mesh_bid_above_s=0.1)
    npu_cfg = agent_config("npu", "rk3588")
    # a node showing the fleet's fingerprint (public) without the key: a faster NPU board
    spoof_cfg = MeshConfig(agent_id="spoofer", heartbeat_s=0.3, announce_burst=100)
    spoofer = emulated_node(
        spoof_cfg, FleetKey("not-the-fleet-key-at-all-000000"), ["hailo8_host"], tmp_path / "s.db"
    )
    async with (
        aiohttp.ClientSession() as http,
        agent_daemon(cpu_cfg) as cpu,
        agent_daemon(npu_cfg) as npu,
        serve(spoofer) as spoof_port,
    ):
        npu_id = (await get_json(http, f"{npu}/v1/peers"))["agent_id"]
        cpu_id = (await get_json(http, f"{cpu}/v1/peers"))["agent_id"]
        assert npu_id != cpu_id and (tmp_path / "npu" / "mesh_id").read_text().strip() == npu_id
        await peer_online(http, cpu, npu_id)
        # forge an announcement: the spoofer's endpoint under the fleet's fingerprint
        zc = new_zeroconf(["127.0.0.1"])
        try:
            await zc.async_register_service(
                AsyncServiceInfo(
                    SERVICE_TYPE,
                    f"spoofer.{SERVICE_TYPE}",
                    addresses=[socket.inet_aton("127.0.0.1")],
                    port=spoof_port,
                    properties={
                        "id": "spoofer",
                        "v": "0.1.0",
                        "port": str(spoof_port),
                        "fp": FleetKey(KEY).fingerprint,
                        "kinds": "npu:1",
                    },
                    server="spoofer-forged.local.",
                ),
                cooperating_responders=True,
            )

            async def spoof_counted() -> bool:
                async with http.get(f"{cpu}/metrics") as resp:
                    text = await resp.text()
                return 'hetmesh_mesh_events_total{event="spoof_wrong_key"} 1.0' in text

            await until(spoof_counted)
        finally:
            await zc.async_close()

        async with http.post(f"{cpu}/v1/tasks", json=NPU_TASK) as resp:
            assert resp.status == 202, await resp.text()
            task_id = (await resp.json())["task"]["id"]

        task = await final_task(http, cpu, task_id)
        assert task["state"] == "done", task
        assert task["ran_on"] == npu_id and task["device"] == f"{npu_id}:rk3588/npu"
        origin_link, peer_link = task["chain"]
        assert origin_link["node"] == cpu_id and origin_link["action"] == f"forward to {npu_id}"
        assert "not placed" in origin_link["summary"]
        assert [b["peer"] for b in origin_link["bids"]] == [npu_id]  # the spoofer never bids
        assert peer_link["node"] == npu_id and peer_link["devices"] == ["rk3588/npu"]
        assert task["result"]["emulated"] is True and task["emulated"] is True

        # the NPU agent ran it once, as a task of its own that names its origin
        ran = (await get_json(http, f"{npu}/v1/tasks"))["tasks"]
        assert [(t["origin"], t["state"], t["device"]) for t in ran] == [
            (cpu_id, "done", "rk3588/npu")
        ]
        assert spoofer.counters["forwards_received"] == 0 and not await spoofer.ledger.attempts(
            task_id
        )

        explain = await get_json(http, f"{cpu}/v1/tasks/{task_id}/explain")
        assert explain["ran_on"] == npu_id and len(explain["chain"]) == 2

        metrics = await (await http.get(f"{cpu}/metrics")).text()
        assert 'hetmesh_mesh_peers{state="online"} 1.0' in metrics
        assert 'hetmesh_agent_tasks{state="done"} 1.0' in metrics
        assert 'hetmesh_agent_tasks{state="offloaded"} 0.0' in metrics

        # `edge-agent peers` and `edge-agent explain` against the running origin
        code = await asyncio.to_thread(cli_main, ["peers", "--url", cpu])
        out = capsys.readouterr().out
        assert code == 0
        line = next(x for x in out.splitlines() if x.startswith(npu_id))
        assert "online" in line and "yes" in line and "npu:1" in line and "spoofer" not in out
        code = await asyncio.to_thread(cli_main, ["explain", task_id, "--url", cpu])
        out = capsys.readouterr().out
        assert code == 0 and f"ran on {npu_id}" in out and f"forward to {npu_id}" in out

        # a task the origin can run itself, cheaply, stays here (no bids asked)
        async with http.post(f"{cpu}/v1/tasks", json={"semantics": {"gflops": 0.01}}) as resp:
            local_id = (await resp.json())["task"]["id"]
        local = await final_task(http, cpu, local_id)
        assert local["state"] == "done" and local["ran_on"] is None and local["chain"] is None
        assert local["device"] == "rpi5/cpu"

        # one it could run (CPU, ~0.32 s estimated, over bid_above_s) that the NPU peer bids
        # far better for (~0.06 s, beyond the policy's offload_margin) goes to the peer
        big = {"semantics": {"gflops": 50.0, "precision": "int8"}}
        big["requirements"] = {"model_format": None}
        async with http.post(f"{cpu}/v1/tasks", json=big) as resp:
            big_id = (await resp.json())["task"]["id"]
        moved = await final_task(http, cpu, big_id)
        assert moved["state"] == "done" and moved["ran_on"] == npu_id
        assert moved["chain"][0]["devices"] == ["rpi5/cpu"]  # placed here, then beaten
        assert moved["chain"][0]["bids"][0]["estimate_ms"] < 100


@pytest.mark.asyncio
async def test_a_task_no_member_can_run_fails_with_the_chain(
    agent_config: MakeConfig,
    agent_daemon: Serve,
    get_json: GetJson,
    final_task: FinalTask,
    peer_online: PeerOnline,
) -> None:
    async with (
        aiohttp.ClientSession() as http,
        agent_daemon(agent_config("a", "rpi5")) as a,
        agent_daemon(agent_config("b", "intel_n100")) as b,
    ):
        b_id = (await get_json(http, f"{b}/v1/peers"))["agent_id"]
        await peer_online(http, a, b_id)
        async with http.post(f"{a}/v1/tasks", json=NPU_TASK) as resp:
            task_id = (await resp.json())["task"]["id"]
        task = await final_task(http, a, task_id)
        assert task["state"] == "failed" and task["ran_on"] is None
        assert task["chain"][0]["bids"][0]["peer"] == b_id
        assert task["chain"][0]["bids"][0]["placed"] is False
        assert "no device here or on a trusted peer" in task["error"]


@pytest.mark.asyncio
async def test_the_hub_heartbeat_names_the_trusted_online_peers(
    agent_config: MakeConfig, agent_daemon: Serve, until: Until, get_json: GetJson
) -> None:
    app = make_app(agent_config("embedded", "rpi5"))
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
        await app[MESH].start(int(port))  # what daemon.serve does once the site is bound
        agent = app[AGENT]
        agent.reporter = DeviceReporter(
            agent.fleet, agent.placer, agent.executor.busy_s.__getitem__
        )
        assert agent.hub_report()["peers"] == []
        async with agent_daemon(agent_config("other", "rk3588")) as other:
            async with aiohttp.ClientSession() as http:
                other_id = (await get_json(http, f"{other}/v1/peers"))["agent_id"]
            await until(lambda: agent.hub_report()["peers"] == [other_id])
    finally:
        await runner.cleanup()  # the agent stops its mesh before its store closes


@pytest.mark.asyncio
async def test_without_a_fleet_key_there_is_no_mesh(
    agent_config: MakeConfig, agent_daemon: Serve, get_json: GetJson, final_task: FinalTask
) -> None:
    cfg = agent_config("solo", "rpi5", mesh_fleet_key="")
    assert not cfg.mesh_on
    async with aiohttp.ClientSession() as http, agent_daemon(cfg) as base:
        assert await get_json(http, f"{base}/v1/peers") == {
            "ok": True,
            "enabled": False,
            "peers": [],
        }
        async with http.post(f"{base}/mesh/v1/hello", json={}) as resp:
            assert resp.status == 404
        async with http.post(f"{base}/v1/tasks", json=NPU_TASK) as resp:
            task_id = (await resp.json())["task"]["id"]
        task = await final_task(http, base, task_id)
        assert task["state"] == "failed" and task["chain"] is None


def test_mesh_config_from_toml_and_environment(tmp_path: Path) -> None:
    key_file = tmp_path / "fleet.key"
    key_file.write_text(KEY + "\n")
    toml = tmp_path / "agent.toml"
    toml.write_text(
        f'[mesh]\nfleet_key_file = "{key_file}"\naddress = "127.0.0.2"\nheartbeat_s = 0.5\n'
    )
    cfg = load_config(toml, env={})
    assert cfg.mesh_on and cfg.mesh_address == "127.0.0.2" and cfg.mesh_heartbeat_s == 0.5
    assert not load_config(toml, env={"EDGE_AGENT_MESH_ENABLED": "false"}).mesh_on
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    env_only = load_config(empty, env={"EDGE_AGENT_MESH_FLEET_KEY": KEY})
    assert env_only.mesh_on and KEY not in repr(env_only)  # a secret: never in a repr/log
    bad: dict[str, tuple[dict[str, str], str]] = {
        "short": ({"EDGE_AGENT_MESH_FLEET_KEY": "short"}, "at least 16"),
        "on without key": ({"EDGE_AGENT_MESH_ENABLED": "true"}, "needs a fleet key"),
        "not a flag": ({"EDGE_AGENT_MESH_ENABLED": "maybe"}, "expected true or false"),
        "any address": (
            {"EDGE_AGENT_MESH_FLEET_KEY": KEY, "EDGE_AGENT_HOST": "0.0.0.0"},
            "set [mesh] address",
        ),
    }
    for env, message in bad.values():
        with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
            load_config(empty, env=env)


def test_mesh_lease_settings_from_toml_and_environment_reach_the_mesh_node(
    tmp_path: Path,
) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text("[mesh]\nlease_min_s = 2.5\nlease_factor = 6.0\nlease_grace_s = 0.4\n")
    env = {"EDGE_AGENT_MESH_FLEET_KEY": KEY}
    node = mesh_config(load_config(toml, env=env), "a1", False)
    assert (node.lease_min_s, node.lease_factor, node.lease_grace_s) == (2.5, 6.0, 0.4)
    # the environment wins over the file; factor 0 is a flat lease of lease_min_s
    env |= {"EDGE_AGENT_MESH_LEASE_FACTOR": "0", "EDGE_AGENT_MESH_LEASE_GRACE_S": "0.25"}
    node = mesh_config(load_config(toml, env=env), "a1", False)
    assert (node.lease_min_s, node.lease_factor, node.lease_grace_s) == (2.5, 0.0, 0.25)
    # unset: the agent passes the mesh's own defaults on
    default, mesh_default = mesh_config(AgentConfig(), "a1", False), MeshConfig(agent_id="a1")
    assert (default.lease_factor, default.lease_grace_s) == (
        mesh_default.lease_factor,
        mesh_default.lease_grace_s,
    )
    # `edge-agent init`'s file holds them, and reads back the same
    rendered = tmp_path / "rendered.toml"
    rendered.write_text(render_default(AgentConfig(mesh_lease_factor=3.0, mesh_lease_grace_s=0.5)))
    again = load_config(rendered, env={})
    assert (again.mesh_lease_factor, again.mesh_lease_grace_s) == (3.0, 0.5)

    bad_env = {
        ("LEASE_FACTOR", "-1"): "[mesh] lease_factor must be a finite number >= 0",
        ("LEASE_FACTOR", "nan"): "[mesh] lease_factor must be a finite number >= 0",
        ("LEASE_FACTOR", "inf"): "[mesh] lease_factor must be a finite number >= 0",
        ("LEASE_GRACE_S", "0"): "[mesh] lease_grace_s must be a finite number > 0",
        ("LEASE_GRACE_S", "-0.5"): "[mesh] lease_grace_s must be a finite number > 0",
        ("LEASE_GRACE_S", "inf"): "[mesh] lease_grace_s must be a finite number > 0",
        ("LEASE_GRACE_S", "soon"): "EDGE_AGENT_MESH_LEASE_GRACE_S: expected a number",
    }
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    for (name, value), message in bad_env.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(empty, env={f"EDGE_AGENT_MESH_{name}": value})
    for line, message in {
        "lease_grace_s = 0.0": "[mesh] lease_grace_s must be a finite number > 0",
        "lease_factor = -2.0": "[mesh] lease_factor must be a finite number >= 0",
        "lease_factor = nan": "[mesh] lease_factor must be a finite number >= 0",
        'lease_factor = "fast"': f"{toml}: [mesh] lease_factor: expected a number",
    }.items():
        toml.write_text(f"[mesh]\n{line}\n")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(toml, env={})


def test_init_writes_a_fleet_key_readable_only_by_its_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.toml"
    assert cli_main(["init", "--path", str(path), "--new-fleet-key"]) == 0
    assert os.stat(path).st_mode & 0o777 == 0o600
    cfg = load_config(path, env={})
    assert cfg.mesh_on and len(cfg.mesh_fleet_key) >= 32
    out = capsys.readouterr().out
    assert FleetKey(cfg.mesh_fleet_key).fingerprint in out and cfg.mesh_fleet_key not in out
    assert cli_main(["init", "--path", str(path), "--force", "--fleet-key", KEY]) == 0
    assert load_config(path, env={}).mesh_fleet_key == KEY
    assert cli_main(["init", "--path", str(path), "--force", "--fleet-key", "short"]) == 2
    assert "at least 16" in capsys.readouterr().err
