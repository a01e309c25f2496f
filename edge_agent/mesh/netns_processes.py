"""Processes inside the namespaces of a ``netns.Lan``: a mesh node (``NodeProcess``), an
``edge-agent run`` daemon (``AgentProcess``) and a node that spoofs the fleet's fingerprint.

Test infrastructure (needs root): nodes are driven over their Unix admin sockets, agents by a
short HTTP client started inside their namespace.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from edge_agent.api_token import DEFAULT_TOKEN_FILE, bearer, read_token
from edge_agent.mesh.netns import ROOT, START_TIMEOUT_S


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class NodeProcess:
    """One ``python -m edge_agent.mesh`` process in a namespace, driven over its admin socket."""

    def __init__(
        self,
        ns: str | None,
        workdir: Path,
        agent_id: str,
        profile: str,
        address: str,
        key_file: Path,
        settings: dict[str, object] | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.ledger = workdir / f"{agent_id}.db"
        self.state_file = workdir / f"{agent_id}.json"
        self.socket = str(workdir / f"{agent_id}.sock")
        cmd = [sys.executable, "-m", "edge_agent.mesh", "--profile", profile, "--time-scale", "0"]
        cmd += ["--fleet-key-file", str(key_file), "--ledger", str(self.ledger)]
        cmd += ["--state-file", str(self.state_file), "--agent-id", agent_id]
        cmd += ["--address", address, "--admin-socket", self.socket]
        for name, value in (settings or {}).items():
            cmd += ["--set", f"{name}={value}"]
        if ns is not None:
            cmd = ["ip", "netns", "exec", ns, *cmd]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return once the node listens (its state file is written); RuntimeError if it died."""
        deadline = time.monotonic() + timeout_s
        while not self.state_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.agent_id} exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.agent_id} did not start in {timeout_s}s")
            time.sleep(0.05)

    def call(self, method: str, path: str, body: Any = None, timeout_s: float = 30.0) -> Any:
        """Make one admin request; return the decoded JSON answer."""
        conn = _UnixHTTP(self.socket, timeout_s)
        try:
            data = None if body is None else json.dumps(body).encode()
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            doc = json.loads(resp.read())
        finally:
            conn.close()
        if resp.status != 200:
            raise RuntimeError(f"{self.agent_id} {path}: {resp.status} {doc}")
        return doc

    def status(self) -> dict[str, Any]:
        """Return the node's status (peers and counters)."""
        doc: dict[str, Any] = self.call("GET", "/status", timeout_s=5.0)
        return doc

    def online(self) -> set[str]:
        """Return the ids of the peers this node trusts and sees online."""
        return {p["agent_id"] for p in self.status()["peers"] if p["state"] == "online"}

    def stop(self) -> None:
        """Stop the node (SIGTERM, then SIGKILL)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


#: A node that shows the fleet's public fingerprint but holds another key (argv: address,
#: fleet fingerprint, ledger path).
SPOOFER = """
import asyncio, sys
from pathlib import Path
from edge_agent.mesh import FleetKey, MeshConfig
from edge_agent.mesh.standalone import emulated_node, serve
async def main() -> None:
    address, fleet_fp, ledger = sys.argv[1:4]
    cfg = MeshConfig(agent_id="npu-spoof", interfaces=(address,), address=address)
    node = emulated_node(cfg, FleetKey("a-wrong-key-for-this-fleet-0000"), ["rk3588"], Path(ledger))
    node.key.fingerprint = fleet_fp  # the fleet's public fingerprint, not its key
    node.peers.fingerprint = fleet_fp  # so it also challenges the members, with a wrong key
    async with serve(node, address):
        await asyncio.Event().wait()
asyncio.run(main())
"""

#: One HTTP request from inside a namespace (argv: URL, method, JSON body or ""; request
#: headers as JSON in $HETMESH_HEADERS, off the command line); prints the status, then the body.
_CLIENT = """
import json, os, sys, urllib.request, urllib.error
url, method, body = sys.argv[1:4]
headers = {"Content-Type": "application/json", **json.loads(os.environ["HETMESH_HEADERS"])}
req = urllib.request.Request(url, data=body.encode() or None, method=method, headers=headers)
try:
    with urllib.request.urlopen(req, timeout=10) as resp:
        status, text = resp.status, resp.read().decode()
except urllib.error.HTTPError as err:
    status, text = err.code, err.read().decode()
sys.stdout.write(f"{status}\\n{text}")
"""


def start_spoofer(ns: str, address: str, fingerprint: str, ledger: Path) -> subprocess.Popen[bytes]:
    """Start the spoofing node (``SPOOFER``) in namespace ``ns``."""
    return subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns,
            sys.executable,
            "-c",
            SPOOFER,
            address,
            fingerprint,
            str(ledger),
        ],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL,
    )


class AgentProcess:
    """One ``edge-agent run`` daemon in a namespace (emulated board, mesh on), over HTTP.

    The root namespace cannot reach the test addresses, so each request is made by a short
    Python client started inside the agent's namespace. ``mesh`` and ``hub`` are settings of
    its config's [mesh] and [hub] tables (no [hub]: it joins no hub).
    """

    def __init__(
        self,
        ns: str,
        workdir: Path,
        agent_id: str,
        profile: str,
        address: str,
        key_file: Path,
        mesh: dict[str, object] | None = None,
        port: int = 8470,
        hub: dict[str, object] | None = None,
    ) -> None:
        self.ns, self.agent_id, self.address, self.port = ns, agent_id, address, port
        self.data_dir = workdir / agent_id
        self.data_dir.mkdir()
        self.log = workdir / f"{agent_id}.log"
        settings = {"fleet_key_file": str(key_file), "agent_id": agent_id, **(mesh or {})}
        lines = [
            "[agent]",
            f"data_dir = {json.dumps(str(self.data_dir))}",
            f"profile = {json.dumps(profile)}",
            "[api]",
            f"host = {json.dumps(address)}",
            f"port = {port}",
            "[scheduler]",
            "telemetry_interval_s = 0",
            "emulation_jitter = 0",
            "shutdown_grace_s = 1",
            "[mesh]",
            *(f"{k} = {json.dumps(v)}" for k, v in settings.items()),
            *(["[hub]"] if hub else []),
            *(f"{k} = {json.dumps(v)}" for k, v in (hub or {}).items()),
        ]
        self.config = workdir / f"{agent_id}.toml"
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        cmd = [sys.executable, "-m", "edge_agent.cli", "run", "--config", str(self.config)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, *cmd],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return once the agent listens with its mesh started (agent.json is written)."""
        deadline = time.monotonic() + timeout_s
        while not (self.data_dir / "agent.json").exists():
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.agent_id} exited with {self.proc.returncode}: {tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.agent_id} did not start in {timeout_s}s")
            time.sleep(0.05)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """Make one request to the agent's API from inside its namespace, with its API token
        (``<data_dir>/api_token``); return the JSON (``/metrics``: the text)."""
        token = read_token(self.data_dir / DEFAULT_TOKEN_FILE)
        status, text = self.send(method, path, body, bearer(token) if token else {})
        if status >= 300:
            raise RuntimeError(f"{self.agent_id} {method} {path}: {status} {text!r}")
        return json.loads(text) if path != "/metrics" else text

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        ns: str | None = None,
    ) -> tuple[int, str]:
        """Make one request to the agent's API from namespace ``ns`` (default: its own) with
        ``headers`` only; return the status and the body."""
        url = f"http://{self.address}:{self.port}{path}"
        data = "" if body is None else json.dumps(body)
        cmd = ["ip", "netns", "exec", ns or self.ns, sys.executable, "-I", "-S", "-c", _CLIENT]
        env = {**os.environ, "HETMESH_HEADERS": json.dumps(headers or {})}
        proc = subprocess.run([*cmd, url, method, data], capture_output=True, timeout=30, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.agent_id} {method} {path}: {proc.stderr!r}")
        status, _, text = proc.stdout.decode().partition("\n")
        return int(status), text

    def stop(self) -> None:
        """Stop the agent (SIGTERM, then SIGKILL)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
