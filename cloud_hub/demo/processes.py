"""The demo's child processes: start one, wait until it listens, call it, stop them all.

Children are real ``cloud-hub run`` / ``edge-agent run`` processes, each in its own process
group (Ctrl-C reaches only the demo, which stops them), with their logs in their data dirs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import psutil

from edge_agent.errors import HetmeshError

if TYPE_CHECKING:
    from cloud_hub.demo.grids import Site


START_TIMEOUT_S = 60.0


STOP_TIMEOUT_S = 15.0


class DemoError(HetmeshError):
    """A demo process did not start or answer; the message names it and its log."""


class Stop(Exception):
    """Ctrl-C or SIGTERM arrived (raised once; later ones are ignored while stopping)."""


@dataclass
class Child:
    """One started process: what it is, its log, and (once listening) its URL."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    url: str = ""
    pending: dict[str, str] = field(default_factory=dict)  # task id -> workload label
    admin_token: str = ""  # the hub's, to ask for a training run
    mesh_id: str = ""  # the agent's id among its mesh peers
    site: Site | None = None  # the agent's grid


def call(url: str, method: str = "GET", body: Any = None, token: str = "") -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data, headers, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def child_env(extra: dict[str, str], root: Path) -> dict[str, str]:
    """Return the child's environment: ours minus config files, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUD_HUB_", "EDGE_AGENT_"))}
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding cloud_hub
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    empty = root / "empty.toml"
    empty.touch()
    return {**env, "CLOUD_HUB_CONFIG": str(empty), "EDGE_AGENT_CONFIG": str(empty), **extra}


def spawn(name: str, argv: list[str], env: dict[str, str], data: Path) -> Child:
    data.mkdir(parents=True, exist_ok=True)
    log = data / f"{name}.log"
    with log.open("ab") as out:  # own process group: Ctrl-C reaches the demo, which stops all
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0
        )
    return Child(name, proc, log)


def wait_listening(child: Child, state: Path, deadline: float) -> None:
    """Set ``child.url`` from the address file it writes once listening."""
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            tail = child.log.read_text(errors="replace")[-2000:]
            raise DemoError(f"{child.name} exited with {child.proc.returncode}:\n{tail}")
        with contextlib.suppress(OSError, ValueError, KeyError):
            doc = json.loads(state.read_text(encoding="utf-8"))
            if doc["pid"] == child.proc.pid:
                child.url = f"http://127.0.0.1:{int(doc['port'])}"
                return
        time.sleep(0.05)
    raise DemoError(f"{child.name} did not start within {START_TIMEOUT_S:g} s; see {child.log}")


def stop_all(children: list[Child]) -> None:
    """Stop the agents (they sync one last time), then the hub: SIGTERM, wait, SIGKILL.

    Processes the children started (Flower's SuperLink and SuperNodes and the processes
    those start) are noted first; any still running once their parent is gone are killed.
    """
    family: list[psutil.Process] = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            family += psutil.Process(child.proc.pid).children(recursive=True)
    for group in (children[1:], children[:1]):
        for child in group:
            if child.proc.poll() is None:
                child.proc.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in group:
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
    _, alive = psutil.wait_procs(family, timeout=5.0)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            print(f"killing leftover pid {proc.pid} ({proc.name()})", flush=True)
            proc.kill()
    psutil.wait_procs(alive, timeout=5.0)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM while children are being stopped (a second one waits)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def signals_stop() -> Iterator[None]:
    """Turn the first Ctrl-C or SIGTERM into ``Stop``; ignore any later one until the end.

    Without this a second Ctrl-C landing while the first is handled (in a print, in the
    closing summary, before the children are shielded) ends in a KeyboardInterrupt traceback.
    """
    sigs = (signal.SIGINT, signal.SIGTERM)

    def stop(signum: int, frame: FrameType | None) -> None:
        for sig in sigs:
            signal.signal(sig, signal.SIG_IGN)
        raise Stop

    previous = {sig: signal.signal(sig, stop) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
