"""A throwaway LAN of Linux network namespaces for mesh tests and benchmarks (needs root).

One bridge namespace and N host namespaces, each joined to the bridge by a veth pair, with
multicast on and a 224.0.0.0/4 route on every host interface. Addresses come from a private
test range and exist only inside these namespaces; nothing is routed out of them, and no
link is ever created in the caller's namespace. Node processes run there with
``ip netns exec``; the test drives them over their Unix admin sockets (file system, not
network, so they reach across namespaces).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from edge_agent.mesh.credential import FleetKey

#: The /24 the hosts live in: 10.99.0.11, .12, ... (inside the namespaces only).
SUBNET = "10.99.0"
#: How long a node or agent process in a namespace may take to come up: a bound, not a wait
#: (a daemon on a busy 2-core box, importing, checking its database, can take tens of s).
START_TIMEOUT_S = 90.0
ROOT = Path(__file__).resolve().parents[2]


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, or no ``ip netns``)."""


def _ip(*args: str, first: bool = False) -> None:
    """Run ``ip``; a failure of the ``first`` call means namespaces are unavailable here."""
    try:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        raise NetnsUnavailable("the 'ip' command (iproute2) is not installed") from None
    if proc.returncode != 0:
        error = NetnsUnavailable if first else RuntimeError
        raise error(f"ip {' '.join(args)}: {proc.stderr.strip()}")


class Lan:
    """A bridge namespace plus ``hosts`` host namespaces; ``close()`` deletes them all."""

    def __init__(self, hosts: int) -> None:
        if os.geteuid() != 0:
            raise NetnsUnavailable("network namespaces need root")
        self.tag = f"hm{uuid.uuid4().hex[:6]}"  # unique per run; veth names stay <= 15 chars
        self.bridge_ns = f"{self.tag}-br"
        self.names: list[str] = []
        try:
            _ip("netns", "add", self.bridge_ns, first=True)
            self.names.append(self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "set", "lo", "up")
            _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
            _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            for i in range(hosts):
                self.add_host(i)
        except BaseException:
            self.close()
            raise

    def ns(self, i: int) -> str:
        """Return host ``i``'s namespace name."""
        return f"{self.tag}-h{i}"

    def address(self, i: int) -> str:
        """Return host ``i``'s address."""
        return f"{SUBNET}.{11 + i}"

    def host_if(self, i: int) -> str:
        """Return host ``i``'s interface name (inside its namespace)."""
        return f"{self.tag}h{i}"

    def add_host(self, i: int) -> None:
        """Create host ``i``: a namespace, a veth pair to the bridge, address and routes."""
        ns, dev, peer = self.ns(i), self.host_if(i), f"{self.tag}b{i}"
        _ip("netns", "add", ns)
        self.names.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer,
            "netns", self.bridge_ns)  # fmt: skip
        _ip("-n", self.bridge_ns, "link", "set", peer, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", dev)
        _ip("-n", ns, "link", "set", dev, "multicast", "on", "up")
        _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", dev)

    def link(self, i: int, up: bool) -> None:
        """Cut (``up=False``) or restore host ``i``'s link, on the host's side."""
        _ip("-n", self.ns(i), "link", "set", self.host_if(i), "up" if up else "down")
        if up:
            with contextlib.suppress(NetnsUnavailable):  # the route goes with the link
                _ip("-n", self.ns(i), "route", "add", "224.0.0.0/4", "dev", self.host_if(i))

    def close(self) -> None:
        """Delete every namespace this LAN made (its veths go with them)."""
        for name in reversed(self.names):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        self.names.clear()


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

#: One HTTP request from inside a namespace (argv: URL, method, JSON body or "").
_CLIENT = """
import sys, urllib.request, urllib.error
url, method, body = sys.argv[1:4]
req = urllib.request.Request(url, data=body.encode() or None, method=method,
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=10) as resp:
        sys.stdout.write(resp.read().decode())
except urllib.error.HTTPError as err:
    sys.stdout.write(err.read().decode()); sys.exit(3)
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
    Python client started inside the agent's namespace.
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
        """Make one request to the agent's API from inside its namespace; return the JSON."""
        url = f"http://{self.address}:{self.port}{path}"
        data = "" if body is None else json.dumps(body)
        cmd = ["ip", "netns", "exec", self.ns, sys.executable, "-I", "-S", "-c", _CLIENT]
        proc = subprocess.run([*cmd, url, method, data], capture_output=True, timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.agent_id} {method} {path}: {proc.stdout!r} {proc.stderr!r}")
        return json.loads(proc.stdout) if path != "/metrics" else proc.stdout.decode()

    def stop(self) -> None:
        """Stop the agent (SIGTERM, then SIGKILL)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def ledger_rows(path: Path, key: str) -> list[tuple[str, int, str, str]]:
    """Return a mesh ledger's (role, attempt, target, state) rows for ``key``, by attempt."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(
            "SELECT role, attempt, target, state FROM mesh_ledger WHERE key = ? ORDER BY attempt",
            (key,),
        ).fetchall()
    return [(str(r), int(a), str(t), str(s)) for r, a, t, s in rows]


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """Return ``check()``'s first truthy value, polling; AssertionError naming ``what`` if none."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


class Member(Protocol):
    """A member process: ``NodeProcess`` or ``AgentProcess``."""

    def wait_ready(self, timeout_s: float = ...) -> None: ...

    def stop(self) -> None: ...


M = TypeVar("M", bound=Member)
#: Starts a member: (namespace, workdir, agent id, profile, address, key file, settings).
Start = Callable[[str, Path, str, str, str, Path, dict[str, object]], M]


class Fleet(Generic[M]):
    """Members on hosts 0..n-1 of ``lan`` holding the fleet key, and on host n a spoofer that
    shows the fleet's fingerprint without its key (its ledger: ``spoof_ledger``)."""

    def __init__(
        self,
        lan: Lan,
        work: Path,
        start: Start[M],
        hosts: Sequence[tuple[str, str]],
        key_text: str,
        settings: dict[str, object],
    ) -> None:
        self.lan, self.work = lan, work
        key_file = work / "fleet.key"
        key_file.write_text(key_text, encoding="utf-8")
        self.members: dict[str, M] = {}
        self.spoof_ledger = work / "npu-spoof.db"
        n, fingerprint = len(hosts), FleetKey(key_text).fingerprint
        self.spoofer = start_spoofer(lan.ns(n), lan.address(n), fingerprint, self.spoof_ledger)
        try:
            for i, (agent_id, profile) in enumerate(hosts):
                self.members[agent_id] = start(
                    lan.ns(i), work, agent_id, profile, lan.address(i), key_file, settings
                )
            for member in self.members.values():
                member.wait_ready()
        except BaseException:
            self.close()
            raise

    def host(self, agent_id: str) -> int:
        """Return the host number (for ``lan.link``) of member ``agent_id``."""
        return list(self.members).index(agent_id)

    def close(self) -> None:
        """Stop every member and the spoofer."""
        for member in self.members.values():
            member.stop()
        if self.spoofer.poll() is None:
            self.spoofer.kill()
        self.spoofer.wait(5)


@contextlib.contextmanager
def start_fleet(
    start: Start[M],
    hosts: Sequence[tuple[str, str]],
    key_text: str,
    settings: dict[str, object],
) -> Iterator[Fleet[M]]:
    """Yield a ``Fleet`` on a fresh LAN of ``len(hosts) + 1`` hosts; remove it all after.

    Raises NetnsUnavailable (before starting anything) where namespaces cannot be made.
    """
    lan = Lan(hosts=len(hosts) + 1)
    work = Path(tempfile.mkdtemp(prefix="hmnetns-"))  # short: Unix socket paths are limited
    try:
        fleet = Fleet(lan, work, start, hosts, key_text, settings)
        try:
            yield fleet
        finally:
            fleet.close()
    finally:
        lan.close()
        shutil.rmtree(work, ignore_errors=True)
