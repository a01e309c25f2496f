"""Start the demo's fleet: the hub, then one emulated agent per board, in one mesh."""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

from cloud_hub.demo.grids import sites
from cloud_hub.demo.learning_watch import SUPEREXEC_POLL_S, learning_env
from cloud_hub.demo.processes import (
    START_TIMEOUT_S,
    Child,
    DemoError,
    call,
    child_env,
    spawn,
    wait_listening,
)
from edge_agent.mesh import FleetKey
from edge_agent.predictor.supernode import SUPEREXEC_POLL_ENV

PROFILES = ("rk3588", "jetson_orin_nano", "kria_kv260", "hailo8_host")


#: What the hub tells agents; short so the dashboard moves.
HEARTBEAT_S = 1.0


#: The mesh: agents say hello this often; trust between all of them is awaited this long.
MESH_HEARTBEAT_S = 0.5


def wait_mesh_started(child: Child, deadline: float) -> None:
    """Wait until the agent's mesh node announces itself and answers peers."""
    while not (doc := call(f"{child.url}/v1/peers")).get("started"):
        if child.proc.poll() is not None or time.monotonic() > deadline:
            raise DemoError(f"{child.name}: its mesh did not start; see {child.log}")
        time.sleep(0.05)
    child.mesh_id = str(doc["agent_id"])


def named(text: str, agents: list[Child]) -> str:
    """Return ``text`` with each agent's mesh id replaced by its name."""
    for agent in agents:
        if agent.mesh_id:
            text = text.replace(agent.mesh_id, agent.name)
    return text


def start_fleet(
    root: Path, n: int, children: list[Child], discover: bool = False, learning: bool = False
) -> tuple[Child, list[Child]]:
    """Start the hub, then ``n`` agents enrolled with it (found over mDNS if ``discover``)."""
    token, deadline = secrets.token_urlsafe(16), time.monotonic() + START_TIMEOUT_S
    admin = secrets.token_urlsafe(16)
    hub_env = {"CLOUD_HUB_JOIN_TOKEN": token, "CLOUD_HUB_ADMIN_TOKEN": admin,
               "CLOUD_HUB_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
               "CLOUD_HUB_ADVERTISE": "true" if discover else "false"}  # fmt: skip
    if learning:
        hub_env |= learning_env(n)
    argv = [sys.executable, "-m", "cloud_hub.cli", "run", "--port", "0"]
    hub = spawn(
        "hub", [*argv, "--data-dir", str(root / "hub")], child_env(hub_env, root), root / "hub"
    )
    hub.admin_token = admin
    children.append(hub)
    wait_listening(hub, root / "hub" / "hub.json", deadline)
    print(f"hub        pid {hub.proc.pid:<7} {hub.url}  (log {hub.log})", flush=True)
    key_file = write_fleet_key(root)
    grids, missing = sites(n)
    if missing:
        print(f"carbon: {missing}", flush=True)
    agents = []
    for profile, site in zip(PROFILES[:n], grids, strict=True):
        name = f"demo-{profile}"
        env = {"EDGE_AGENT_HUB_URL": hub.url, "EDGE_AGENT_HUB_JOIN_TOKEN": token,
               "EDGE_AGENT_HUB_AGENT_ID": name, "EDGE_AGENT_HUB_RETRY_S": "1",
               "EDGE_AGENT_HUB_LABELS": f"demo=yes,profile={profile}",
               "EDGE_AGENT_TELEMETRY_INTERVAL_S": "1" if learning else "2",
               # the mesh: one fleet key, found over mDNS on loopback; each agent's mesh id is
               # generated (announced without mDNS name probing), the demo shows its hub id
               "EDGE_AGENT_MESH_FLEET_KEY_FILE": str(key_file),
               "EDGE_AGENT_MESH_INTERFACES": "127.0.0.1",
               "EDGE_AGENT_MESH_HEARTBEAT_S": str(MESH_HEARTBEAT_S), **site.env()}  # fmt: skip
        if learning:  # its SuperNode's SuperExec picks up ClientApp work sooner
            env[SUPEREXEC_POLL_ENV] = SUPEREXEC_POLL_S
        if discover:  # the agent gets no URL: it finds the hub and makes it prove the token
            env |= {"EDGE_AGENT_HUB_URL": "mdns", "EDGE_AGENT_HUB_MDNS_INTERFACES": "127.0.0.1"}
        data = root / name
        argv = [sys.executable, "-m", "edge_agent.cli", "run", "--port", "0",
                "--data-dir", str(data), "--profile", profile]  # fmt: skip
        agent = spawn(name, argv, child_env(env, root), data)
        agent.site = site
        children.append(agent)
        agents.append(agent)
        # one at a time: an agent challenged while its mesh is still starting refuses, and
        # the challenger backs off for 30 s ([mesh] reject_backoff_s), so wait for each
        wait_listening(agent, root / agent.name / "agent.json", deadline)
        wait_mesh_started(agent, deadline)
        print(f"{agent.name:<26} pid {agent.proc.pid:<7} {agent.url}", flush=True)
    while {a.name for a in agents} - {r["id"] for r in call(f"{hub.url}/v1/agents")["agents"]}:
        if time.monotonic() > deadline:
            raise DemoError(f"agents did not enrol with the hub; see the logs in {root}")
        time.sleep(0.1)
    return hub, agents


def write_fleet_key(root: Path) -> Path:
    """Write a new fleet key to ``root/fleet.key`` (mode 0600); print only its fingerprint."""
    path = root / "fleet.key"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    key = FleetKey.generate()
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key + "\n")
    print(f"mesh: new fleet key, fingerprint {FleetKey(key).fingerprint} (the key: {path})")
    return path
