"""``cloud-hub demo``: a hub and emulated agents on loopback, a mixed workload, live placements.

Every process is a real ``cloud-hub run`` / ``edge-agent run`` child on 127.0.0.1 with an
ephemeral port and its own data directory; each agent emulates a different board (labelled
``mode: emulated board`` on the hub). Children are stopped in a ``finally``, on Ctrl-C and on
SIGTERM alike, and waited for: the demo leaves no process behind.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from edge_agent.errors import HetmeshError

PROFILES = ("rk3588", "jetson_orin_nano", "kria_kv260", "hailo8_host")
#: What the hub tells agents; short so the dashboard moves.
HEARTBEAT_S = 1.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
#: One round of the mixed workload: the example models plus opaque contracts.
WORKLOAD: tuple[dict[str, Any], ...] = (
    {"model": "tiny_cnn_int8", "priority": 1, "tenant": "vision",
     "requirements": {"max_latency_s": 0.05}},
    {"model": "tiny_cnn_fp32", "tenant": "vision"},
    {"model": "mlp_fp32", "tenant": "batch"},
    {"model": "tiny_attention_fp32", "requirements": {"max_latency_s": 0.02}},
    {"task_class": "yolov8n-detect", "priority": 2, "tenant": "traffic",
     "semantics": {"gflops": 8.7, "param_bytes": 3.2e6, "precision": "int8"},
     "requirements": {"max_latency_s": 0.1}},
    {"task_class": "resnet50-classify", "tenant": "retail",
     "semantics": {"gflops": 8.2, "param_bytes": 25.6e6, "precision": "int8"},
     "requirements": {"max_latency_s": 0.2}},
    {"task_class": "batch-embed", "tenant": "batch", "semantics": {"gflops": 2.0}},
)  # fmt: skip


class DemoError(HetmeshError):
    """A demo process did not start or answer; the message names it and its log."""


class _Stop(Exception):
    """SIGTERM arrived."""


@dataclass
class Child:
    """One started process: what it is, its log, and (once listening) its URL."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    url: str = ""
    pending: dict[str, str] = field(default_factory=dict)  # task id -> workload label


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``cloud-hub demo``."""
    parser.add_argument(
        "--agents",
        type=int,
        default=len(PROFILES),
        metavar="N",
        help=f"agents to start, 1..{len(PROFILES)} (one board profile each)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="stop after S seconds (default: run until Ctrl-C)",
    )
    parser.add_argument(
        "--every",
        type=float,
        default=5.0,
        metavar="S",
        help="submit a workload round to every agent each S seconds",
    )
    parser.add_argument(
        "--data-dir", type=Path, metavar="DIR", help="keep all data here (default: a temp dir)"
    )
    parser.add_argument(
        "--discover",
        action="store_true",
        help="the hub announces itself over mDNS on loopback and agents find it there "
        '([hub] url = "mdns") instead of being given its URL',
    )


def _call(url: str, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _env(extra: dict[str, str], root: Path) -> dict[str, str]:
    """Return the child's environment: ours minus config files, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUD_HUB_", "EDGE_AGENT_"))}
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    empty = root / "empty.toml"
    empty.touch()
    return {**env, "CLOUD_HUB_CONFIG": str(empty), "EDGE_AGENT_CONFIG": str(empty), **extra}


def _spawn(name: str, argv: list[str], env: dict[str, str], data: Path) -> Child:
    data.mkdir(parents=True, exist_ok=True)
    log = data / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Child(name, proc, log)


def _wait_listening(child: Child, state: Path, deadline: float) -> None:
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


def _stop_all(children: list[Child]) -> None:
    """Stop the agents (they sync one last time), then the hub: SIGTERM, wait, SIGKILL."""
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


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM while children are being stopped (a second one waits)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stop

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _start(
    root: Path, n: int, children: list[Child], discover: bool = False
) -> tuple[Child, list[Child]]:
    """Start the hub, then ``n`` agents enrolled with it (found over mDNS if ``discover``)."""
    token, deadline = secrets.token_urlsafe(16), time.monotonic() + START_TIMEOUT_S
    hub_env = {"CLOUD_HUB_JOIN_TOKEN": token, "CLOUD_HUB_ADMIN_TOKEN": secrets.token_urlsafe(16),
               "CLOUD_HUB_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
               "CLOUD_HUB_ADVERTISE": "true" if discover else "false"}  # fmt: skip
    argv = [sys.executable, "-m", "cloud_hub.cli", "run", "--port", "0"]
    hub = _spawn("hub", [*argv, "--data-dir", str(root / "hub")], _env(hub_env, root), root / "hub")
    children.append(hub)
    _wait_listening(hub, root / "hub" / "hub.json", deadline)
    print(f"hub        pid {hub.proc.pid:<7} {hub.url}  (log {hub.log})", flush=True)
    agents = []
    for profile in PROFILES[:n]:
        name = f"demo-{profile}"
        env = {"EDGE_AGENT_HUB_URL": hub.url, "EDGE_AGENT_HUB_JOIN_TOKEN": token,
               "EDGE_AGENT_HUB_AGENT_ID": name, "EDGE_AGENT_HUB_RETRY_S": "1",
               "EDGE_AGENT_HUB_LABELS": f"demo=yes,profile={profile}",
               "EDGE_AGENT_TELEMETRY_INTERVAL_S": "2"}  # fmt: skip
        if discover:  # the agent gets no URL: it finds the hub and makes it prove the token
            env |= {"EDGE_AGENT_HUB_URL": "mdns", "EDGE_AGENT_HUB_MDNS_INTERFACES": "127.0.0.1"}
        data = root / name
        argv = [sys.executable, "-m", "edge_agent.cli", "run", "--port", "0",
                "--data-dir", str(data), "--profile", profile]  # fmt: skip
        agent = _spawn(name, argv, _env(env, root), data)
        children.append(agent)
        agents.append(agent)
    for agent in agents:
        _wait_listening(agent, root / agent.name / "agent.json", deadline)
        print(f"{agent.name:<26} pid {agent.proc.pid:<7} {agent.url}", flush=True)
    while {a.name for a in agents} - {r["id"] for r in _call(f"{hub.url}/v1/agents")["agents"]}:
        if time.monotonic() > deadline:
            raise DemoError(f"agents did not enrol with the hub; see the logs in {root}")
        time.sleep(0.1)
    return hub, agents


def _submit_round(agents: list[Child], counter: Iterator[int]) -> None:
    for agent in agents:
        for contract in WORKLOAD:
            label = str(contract.get("model") or contract["task_class"])
            task = _call(f"{agent.url}/v1/tasks", "POST", contract)["task"]
            agent.pending[task["id"]] = f"{label}#{next(counter)}"


def _report(agents: list[Child]) -> int:
    """Print the tasks that finished since the last call; return how many."""
    shown = 0
    for agent in agents:
        if not agent.pending:
            continue
        for task in _call(f"{agent.url}/v1/tasks?limit=1000")["tasks"]:
            label = agent.pending.get(task["id"])
            if label is None or task["state"] not in ("done", "failed", "cancelled"):
                continue
            del agent.pending[task["id"]]
            shown += 1
            result = task.get("result") or {}
            if task["state"] != "done":
                why = str(task.get("error") or "").removeprefix("not placed: ")
                print(f"{task['id'][:8]}  {label:<24} {agent.name:<26} {task['state']}: {why}")
                continue
            est, got = result.get("estimate_s"), result.get("latency_s")
            ms = f"est {1000 * (est or 0.0):8.3f} ms  measured {1000 * (got or 0.0):8.3f} ms"
            print(f"{task['id'][:8]}  {label:<24} {agent.name:<26} {task['device']:<28} {ms}")
    sys.stdout.flush()
    return shown


def _drain(hub: Child, agents: list[Child], until: float) -> None:
    """Wait (until ``until``) for every agent's outbox to reach the hub; print the hub's view."""
    base = {a.name: _call(f"{a.url}/v1/health")["hub"]["heartbeats"] for a in agents}
    while time.monotonic() < until:
        links = {a.name: _call(f"{a.url}/v1/health")["hub"] for a in agents}
        # two heartbeats later, a whole exchange (heartbeat, then sync) began after the call
        if all(s["heartbeats"] >= base[n] + 2 and s["pending"] == 0 for n, s in links.items()):
            break
        time.sleep(0.1)
    fleet = _call(f"{hub.url}/v1/fleet")
    for row in fleet["agents"]:
        print(f"hub: {row['id']:<26} {row['state']:<12} board {row['board']:<18} "
              f"records synced {row['applied']}, lost {row['lost']}")  # fmt: skip
    print(f"hub: {len(fleet['decisions'])} recent decisions on the dashboard", flush=True)


def run(args: argparse.Namespace) -> int:
    """Run the demo until Ctrl-C, SIGTERM or ``--duration``; 0 after a clean stop."""
    if not 1 <= args.agents <= len(PROFILES):
        raise DemoError(f"--agents: expected 1..{len(PROFILES)}, got {args.agents}")
    children: list[Child] = []
    with contextlib.ExitStack() as stack:
        root = args.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root.mkdir(parents=True, exist_ok=True)
        stack.enter_context(_sigterm_stops())
        try:
            hub, agents = _start(root, args.agents, children, args.discover)
            print(f"dashboard: {hub.url}/   (Ctrl-C to stop)", flush=True)
            end = time.monotonic() + (args.duration if args.duration is not None else 1e18)
            counter, next_round = itertools.count(1), 0.0
            while time.monotonic() < end:
                if time.monotonic() >= next_round:
                    _submit_round(agents, counter)
                    next_round = time.monotonic() + args.every
                _report(agents)
                time.sleep(0.2)
            while any(a.pending for a in agents) and time.monotonic() < end + 10:
                _report(agents)
                time.sleep(0.1)
            _drain(hub, agents, time.monotonic() + 5 * HEARTBEAT_S)
        except (KeyboardInterrupt, _Stop):
            print("stopping", flush=True)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            raise DemoError(f"a demo process stopped answering: {err}; logs in {root}") from err
        finally:
            with _shielded():
                _stop_all(children)
            print("stopped: " + ", ".join(f"{c.name} ({c.proc.returncode})" for c in children))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``cloud-hub demo`` without the ``cloud-hub`` command line."""
    parser = argparse.ArgumentParser(prog="cloud-hub demo", description=__doc__)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
