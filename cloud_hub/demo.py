"""``cloud-hub demo``: a hub and emulated agents on loopback, a mixed workload, live placements.

Every process is a real ``cloud-hub run`` / ``edge-agent run`` child on 127.0.0.1 with an
ephemeral port and its own data directory; each agent emulates a different board (labelled
``mode: emulated board`` on the hub). Children are stopped in a ``finally``, on Ctrl-C and on
SIGTERM alike, and waited for: the demo leaves no process behind.

The agents form one mesh: the demo makes a fleet key (only its fingerprint is printed; the
key is in ``<data dir>/fleet.key``, mode 0600), gives it to every agent with mDNS on
127.0.0.1, waits (bounded) until they trust each other, prints the peer table and submits
work the receiving board cannot run (an NPU-only int8 task to the Jetson, a DPU configuration
task only the KV260's FPGA takes to the RK3588), printing each one's chain, origin -> peer.
Each agent is a site on a different grid: the real 2022 hourly series of
``benchmarks/data/carbon_intensity`` (CISO, ERCO, NYIS, BPAT), or labelled illustrative
constants when the data is not installed. Two deferrable tasks go to the site with the
dirtiest grid now; the demo prints their deferral, asks the hub for one re-evaluation
(``GET /v1/reevaluation?fresh=1``) and prints the moves it issues and their outcomes while
the demo runs (a moved deferred task waits for the target's clean hour, usually later).

With ``--learning`` (Flower installed: ``pip install '.[learning]'``) the hub also runs a
Flower SuperLink, and after ``--learn-after`` seconds of telemetry the demo asks for one
training run: every agent starts its SuperNode, one FedAvg round trains the load predictor
on each agent's own per-device utilization, the hub registers the ONNX model, and each agent
pulls it, validates it on its own telemetry and swaps it in or records why not. The
dashboard's learning panel shows the run, the model's error and each agent's verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import os
import secrets
import signal
import socket
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

import psutil

from edge_agent.carbon_series import SeriesError, load_series, shipped_series_dir
from edge_agent.clikit import columns
from edge_agent.errors import HetmeshError
from edge_agent.mesh import FleetKey
from edge_agent.predictor.runtime import NOT_ENOUGH_DATA
from edge_agent.predictor.supernode import SUPEREXEC_POLL_ENV

PROFILES = ("rk3588", "jetson_orin_nano", "kria_kv260", "hailo8_host")
#: What the hub tells agents; short so the dashboard moves.
HEARTBEAT_S = 1.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
#: The training run ``--learning`` asks for: small buckets so a demo minute is enough data;
#: one round, every agent a node, bounded by the start and round timeouts.
LEARN_BUCKET_S = 2.0
LEARN_RUN_CONFIG = "window=8 bucket-s=2.0 local-epochs=20 lr=0.05 round-timeout-s=90.0"
LEARN_START_TIMEOUT_S = 60.0
#: The run plus every agent's verdict must be in by then (seconds after asking).
LEARN_DEADLINE_S = 240.0
LEARNING_EXTRA = "pip install '.[learning]'"
SUPEREXEC_POLL_S = "0.25"  # Flower's SuperExec polls for work every 1 s by default
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


#: The mesh: agents say hello this often; trust between all of them is awaited this long.
MESH_HEARTBEAT_S = 0.5
MESH_TIMEOUT_S = 30.0
#: Work the receiving board cannot run, so its agent offloads it to a peer:
#: (submitted to, a profile that can run it, label, why the first cannot, contract).
MESH_TASKS: tuple[tuple[str, str, str, str, dict[str, Any]], ...] = (
    ("jetson_orin_nano", "rk3588", "npu-int8 (NPU only)", "it has no NPU",
     {"task_class": "npu-int8", "tenant": "vision",
      "semantics": {"gflops": 2.0, "precision": "int8"},
      "requirements": {"kinds": ["npu"], "precision": "int8", "model_format": None}}),
    ("rk3588", "kria_kv260", "dpu-config-1 (FPGA only)", "it has no FPGA",
     {"task_class": "dpu-config-1", "tenant": "vision",
      "semantics": {"gflops": 2.0, "precision": "int8"},
      "requirements": {"config_id": 1, "precision": "int8", "model_format": None}}),
)  # fmt: skip
#: Each agent's grid: the real 2022 hourly series of benchmarks/data/carbon_intensity.
REGIONS = (("CISO", "California"), ("ERCO", "Texas"), ("NYIS", "New York"),
           ("BPAT", "Pacific Northwest"))  # fmt: skip
#: Used only when those files are not installed: illustrative, not measured (g/kWh).
FALLBACK_G_PER_KWH = {"CISO": 230.0, "ERCO": 400.0, "NYIS": 250.0, "BPAT": 90.0}
#: Deferrable work for the dirtiest site: held for a cleaner hour before its deadline.
DEFERRABLE: dict[str, Any] = {
    "task_class": "nightly-batch", "tenant": "batch", "deferrable": True,
    "semantics": {"gflops": 2.0},
    "requirements": {"model_format": None, "deadline_s": 8 * 3600.0},
}  # fmt: skip
DEFERRABLE_COUNT = 2
#: The re-evaluation is asked for once the dirty site's heartbeats carried its held work
#: (or after this long); issued moves are followed this long for their outcome.
REEVAL_WAIT_S = 20.0
MOVE_FOLLOW_S = 10.0
FINAL_MOVE = ("done", "failed", "refused", "expired")


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
    admin_token: str = ""  # the hub's, to ask for a training run
    mesh_id: str = ""  # the agent's id among its mesh peers
    site: Site | None = None  # the agent's grid


@dataclass(frozen=True)
class Site:
    """An agent's grid: a real hourly series, or an illustrative constant."""

    region: str
    name: str
    series: Path | None = None
    constant: float = 0.0

    def env(self) -> dict[str, str]:
        """Return the agent's ``[carbon]`` settings as environment variables."""
        env = {"EDGE_AGENT_CARBON_REGION": self.region}
        if self.series is not None:
            return env | {"EDGE_AGENT_CARBON_SERIES": str(self.series)}
        return env | {"EDGE_AGENT_CARBON_INTENSITY_G_PER_KWH": f"{self.constant:g}"}

    def now(self) -> float:
        """Return the intensity now (a 2022 series replays the same hour of 2022)."""
        if self.series is None:
            return self.constant
        return load_series(self.series).at_epoch(time.time())

    def label(self) -> str:
        where = f"{self.region} ({self.name})"
        if self.series is None:
            return f"{where}: constant {self.constant:g} g/kWh (illustrative, not measured)"
        return f"{where}: real 2022 hourly series {self.series.name}"


def sites(n: int) -> tuple[list[Site], str]:
    """Return the grids of ``n`` agents and, when the real series are missing, why."""
    folder = shipped_series_dir()
    out, missing = [], ""
    for region, name in REGIONS[:n]:
        path = folder / f"{region}_hourly_2022.csv"
        try:
            load_series(path)
        except (OSError, SeriesError) as err:
            missing = missing or f"no usable {path} ({err}); using illustrative constants"
            out.append(Site(region, name, constant=FALLBACK_G_PER_KWH[region]))
        else:
            out.append(Site(region, name, path))
    return out, missing


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
        help="stop after S seconds (default: run until Ctrl-C); with --learning, not before "
        "the training run and every agent's verdict are in",
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
    parser.add_argument(
        "--learning",
        action="store_true",
        help="train the load predictor: the hub runs a Flower SuperLink, the agents SuperNodes, "
        "one federated round on their own telemetry; agents validate and use the model "
        f"(needs Flower: {LEARNING_EXTRA})",
    )
    parser.add_argument(
        "--learn-after",
        type=float,
        default=45.0,
        metavar="S",
        help="with --learning: collect S seconds of telemetry, then train (default 45)",
    )


def _call(url: str, method: str = "GET", body: Any = None, token: str = "") -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data, headers, method=method)
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
    with log.open("ab") as out:  # own process group: Ctrl-C reaches the demo, which stops all
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, process_group=0
        )
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


def _wait_mesh_started(child: Child, deadline: float) -> None:
    """Wait until the agent's mesh node announces itself and answers peers."""
    while not (doc := _call(f"{child.url}/v1/peers")).get("started"):
        if child.proc.poll() is not None or time.monotonic() > deadline:
            raise DemoError(f"{child.name}: its mesh did not start; see {child.log}")
        time.sleep(0.05)
    child.mesh_id = str(doc["agent_id"])


def _named(text: str, agents: list[Child]) -> str:
    """Return ``text`` with each agent's mesh id replaced by its name."""
    for agent in agents:
        if agent.mesh_id:
            text = text.replace(agent.mesh_id, agent.name)
    return text


def _stop_all(children: list[Child]) -> None:
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _learning_env(n: int) -> dict[str, str]:
    """The hub's settings for one bounded training run with all ``n`` agents as nodes."""
    return {"CLOUD_HUB_LEARNING_PORT": str(_free_port()),
            "CLOUD_HUB_LEARNING_EVERY_S": "86400",  # the demo asks for its run
            "CLOUD_HUB_LEARNING_ROUNDS": "1", "CLOUD_HUB_LEARNING_MIN_NODES": str(n),
            "CLOUD_HUB_LEARNING_START_TIMEOUT_S": str(LEARN_START_TIMEOUT_S),
            "CLOUD_HUB_LEARNING_RUN_CONFIG": LEARN_RUN_CONFIG,
            SUPEREXEC_POLL_ENV: SUPEREXEC_POLL_S}  # fmt: skip


def _start(
    root: Path, n: int, children: list[Child], discover: bool = False, learning: bool = False
) -> tuple[Child, list[Child]]:
    """Start the hub, then ``n`` agents enrolled with it (found over mDNS if ``discover``)."""
    token, deadline = secrets.token_urlsafe(16), time.monotonic() + START_TIMEOUT_S
    admin = secrets.token_urlsafe(16)
    hub_env = {"CLOUD_HUB_JOIN_TOKEN": token, "CLOUD_HUB_ADMIN_TOKEN": admin,
               "CLOUD_HUB_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
               "CLOUD_HUB_ADVERTISE": "true" if discover else "false"}  # fmt: skip
    if learning:
        hub_env |= _learning_env(n)
    argv = [sys.executable, "-m", "cloud_hub.cli", "run", "--port", "0"]
    hub = _spawn("hub", [*argv, "--data-dir", str(root / "hub")], _env(hub_env, root), root / "hub")
    hub.admin_token = admin
    children.append(hub)
    _wait_listening(hub, root / "hub" / "hub.json", deadline)
    print(f"hub        pid {hub.proc.pid:<7} {hub.url}  (log {hub.log})", flush=True)
    key_file = _fleet_key(root)
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
        agent = _spawn(name, argv, _env(env, root), data)
        agent.site = site
        children.append(agent)
        agents.append(agent)
        # one at a time: an agent challenged while its mesh is still starting refuses, and
        # the challenger backs off for 30 s ([mesh] reject_backoff_s), so wait for each
        _wait_listening(agent, root / agent.name / "agent.json", deadline)
        _wait_mesh_started(agent, deadline)
        print(f"{agent.name:<26} pid {agent.proc.pid:<7} {agent.url}", flush=True)
    while {a.name for a in agents} - {r["id"] for r in _call(f"{hub.url}/v1/agents")["agents"]}:
        if time.monotonic() > deadline:
            raise DemoError(f"agents did not enrol with the hub; see the logs in {root}")
        time.sleep(0.1)
    return hub, agents


def _fleet_key(root: Path) -> Path:
    """Write a new fleet key to ``root/fleet.key`` (mode 0600); print only its fingerprint."""
    path = root / "fleet.key"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    key = FleetKey.generate()
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key + "\n")
    print(f"mesh: new fleet key, fingerprint {FleetKey(key).fingerprint} (the key: {path})")
    return path


def _wait_trusted(agents: list[Child], timeout_s: float) -> None:
    """Wait (bounded) until every agent trusts every other one; print the peer table."""
    if len(agents) < 2:
        print("mesh: one agent, no peers (--agents 2 or more shows offload)", flush=True)
        return
    started, names = time.monotonic(), {a.name for a in agents}
    while True:
        docs = {a.name: _call(f"{a.url}/v1/peers") for a in agents}
        online = {n: {_named(p["agent_id"], agents) for p in d["peers"] if p["state"] == "online"}
                  for n, d in docs.items()}  # fmt: skip
        lacking = {
            n: sorted(names - {n} - seen) for n, seen in online.items() if names - {n} - seen
        }
        waited = time.monotonic() - started
        if not lacking or waited > timeout_s:
            break
        time.sleep(0.2)
    if lacking:
        print(f"mesh: not all agents trust each other after {timeout_s:g} s: "
              + "; ".join(f"{n} lacks {', '.join(m)}" for n, m in lacking.items()))  # fmt: skip
    else:
        print(f"mesh: all {len(agents)} agents trust each other after {waited:.1f} s")
    print("mesh: ids " + ", ".join(f"{a.name} = {a.mesh_id}" for a in agents))
    rows = [("mesh:", "AGENT", "PEER", "ADDRESS", "STATE", "RTT MS", "KINDS")]
    for name, doc in docs.items():
        for p in doc["peers"]:
            rtt = "-" if p.get("rtt_ms") is None else f"{p['rtt_ms']:.1f}"
            peer = _named(p["agent_id"], agents)
            rows.append(("mesh:", name, peer, p["address"], p["state"], rtt, p["kinds"]))
    print("\n".join(columns(rows, right={5})), flush=True)


def _submit_mesh_work(agents: list[Child]) -> None:
    """Submit to a board work only another board can run: its agent offloads it to a peer."""
    by_profile = {a.name.removeprefix("demo-"): a for a in agents}
    for to, needs, label, why, contract in MESH_TASKS:
        agent = by_profile.get(to)
        if agent is None or needs not in by_profile:
            continue
        task = _call(f"{agent.url}/v1/tasks", "POST", contract)["task"]
        agent.pending[task["id"]] = label
        print(f"mesh: submitted {label} to {agent.name}: {why}, a peer runs it")
    sys.stdout.flush()


def _show_sites(agents: list[Child]) -> Child | None:
    """Print each agent's grid and intensity now; return the dirtiest site's agent."""
    now = {a.name: a.site.now() for a in agents if a.site is not None}
    for agent in agents:
        if agent.site is not None:
            print(f"carbon: {agent.name:<26} {agent.site.label()}, "
                  f"{now[agent.name]:.0f} g/kWh now")  # fmt: skip
    sys.stdout.flush()
    return max(agents, key=lambda a: now.get(a.name, -1.0)) if now else None


def _submit_deferrable(agent: Child, count: int) -> list[str]:
    """Submit ``count`` deferrable tasks to ``agent``; print each one's deferral."""
    hours = DEFERRABLE["requirements"]["deadline_s"] / 3600
    ids = []
    for _ in range(count):
        task = _call(f"{agent.url}/v1/tasks", "POST", DEFERRABLE)["task"]
        ids.append(task["id"])
        why = (task.get("deferral") or {}).get("why")
        what = why if task["state"] == "deferred" and why else f"{task['state']} (not held)"
        print(f"carbon: {task['id'][:8]}  {DEFERRABLE['task_class']} (deadline {hours:g} h) "
              f"on {agent.name}: {what}")  # fmt: skip
    sys.stdout.flush()
    return ids


class _MoveWatch:
    """Asks the hub for one re-evaluation once the dirty site reported its held work, then
    prints the moves issued for it and their outcomes (for ``MOVE_FOLLOW_S`` seconds)."""

    def __init__(self, hub: Child, agents: list[Child], dirty: Child, ids: list[str]) -> None:
        self.hub, self.agents, self.dirty, self.ids = hub, agents, dirty, set(ids)
        self.base = _call(f"{dirty.url}/v1/health")["hub"]["heartbeats"]
        self.deadline = time.monotonic() + REEVAL_WAIT_S
        self.asked = False
        self.moves: dict[str, str] = {}  # move id -> last state printed
        self.next_poll = 0.0
        self.done = not ids

    def step(self) -> None:
        """Do what is due now (call often; it polls at most once a second)."""
        now = time.monotonic()
        if self.done or now < self.next_poll:
            return
        self.next_poll = now + 0.5
        if not self.asked:
            beats = _call(f"{self.dirty.url}/v1/health")["hub"]["heartbeats"]
            if beats < self.base + 2 and now < self.deadline:
                return  # two heartbeats: one began after the tasks were held
            self._evaluate()
            return
        records = _call(f"{self.hub.url}/v1/reevaluation")["executed"]
        for r in records:
            if r["id"] in self.moves and r["state"] != self.moves[r["id"]]:
                self.moves[r["id"]] = r["state"]
                print(_named(f"hub move {r['id']}: {r['state']}" + _outcome(r), self.agents))
        # accepted: the origin holds the (deferred) task for the target's clean hour, later
        settled = all(s in ("accepted", *FINAL_MOVE) for s in self.moves.values())
        if settled or now > self.deadline:
            if not settled:
                print(f"hub moves: the origin did not answer within {MOVE_FOLLOW_S:g} s; "
                      "GET /v1/reevaluation shows the outcome later")  # fmt: skip
            self.done = True
        sys.stdout.flush()

    def _evaluate(self) -> None:
        self.asked = True
        doc = _call(f"{self.hub.url}/v1/reevaluation?fresh=1")
        ours = [m for m in doc["moves"] if m["task_id"] in self.ids]
        print(f"hub re-evaluation (GET /v1/reevaluation?fresh=1): {doc['sites']} sites, "
              f"{doc['deferred']} deferred, {doc['queued']} queued; {len(doc['moves'])} moves "
              f"would pay, saving {doc['saving_g']:.3g} g CO2")  # fmt: skip
        for m in ours:
            at = time.strftime("%H:%M UTC", time.gmtime(m["start_at"]))
            how = (
                f"issued as {m['move_id']}"
                if m["move_id"]
                else "not issued ("
                + (
                    "already issued"
                    if m["executable"]
                    else "the target is no trusted mesh peer of the origin"
                )
                + ")"
            )
            print(f"hub move: {m['task_id'][:8]} {m['origin']} -> {m['target']}: "
                  f"{m['origin_g_per_kwh']:.0f} -> {m['target_g_per_kwh']:.0f} g/kWh at {at}, "
                  f"saving {m['saving_g']:.3g} g; {how}")  # fmt: skip
            if m["move_id"]:
                self.moves[m["move_id"]] = "issued"
        if not ours:
            print("hub move: none for the held tasks (no current site is >= 20 % cleaner "
                  "before their latest start with load <= 70 %)")  # fmt: skip
        self.deadline = time.monotonic() + MOVE_FOLLOW_S
        self.done = not self.moves
        sys.stdout.flush()


def _outcome(record: dict[str, Any]) -> str:
    """Return what a move's state means, for the line that prints it."""
    state = record["state"]
    if state == "accepted" and not record.get("queued"):
        at = time.strftime("%H:%M UTC", time.gmtime(record["start_at"]))
        return (f" — {record['origin']} holds the task until {record['target']}'s clean hour "
                f"({at}), then forwards it there; that is after this demo's window")  # fmt: skip
    if state == "done":
        return f" — ran on {record.get('ran_on')}"
    if state in ("failed", "refused", "expired"):
        return f" — {record.get('reason') or record.get('error') or ''}"
    return ""


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
            if task.get("ran_on"):  # offloaded: where it ran and the chain, origin -> peer
                print(f"{task['id'][:8]}  {label:<24} {agent.name:<26} offloaded, ran on "
                      f"{_named(task['device'], agents)}  {ms}\n"
                      f"          chain: {_named(_chain(task), agents)}")  # fmt: skip
                continue
            print(f"{task['id'][:8]}  {label:<24} {agent.name:<26} {task['device']:<28} {ms}")
    sys.stdout.flush()
    return shown


def _chain(task: dict[str, Any]) -> str:
    """Return a task's decision chain as "origin: action -> peer: action"."""
    links = task.get("chain") or []
    return " -> ".join(f"{link.get('node')}: {link.get('action')}" for link in links) or "-"


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
        peers = _named(",".join(row.get("peers") or []), agents) or "-"
        print(f"hub: {row['id']:<26} {row['state']:<12} board {row['board']:<18} "
              f"records synced {row['applied']}, lost {row['lost']}; "
              f"mesh peers {peers}")  # fmt: skip
    print(f"hub: {len(fleet['decisions'])} recent decisions on the dashboard", flush=True)


class _LearningWatch:
    """Asks the hub for one training run at ``at`` and prints how it goes, agent by agent."""

    def __init__(self, hub: Child, agents: list[Child], at: float) -> None:
        self.hub, self.agents, self.at = hub, agents, at
        self.asked_at: float | None = None  # wall clock, to tell our run from older ones
        self.deadline = 0.0
        self.next_poll = 0.0
        self.nodes_shown: list[str] = []
        self.version: int | None = None
        self.ended = False
        self.verdicts: dict[str, tuple[bool, str]] = {}
        self.done = False

    def step(self) -> None:
        """Do what is due now (call often; it polls the hub at most once a second)."""
        now = time.monotonic()
        if self.done or now < max(self.at, self.next_poll):
            return
        self.next_poll = now + 1.0
        if self.asked_at is None:
            self.asked_at = time.time()
            self.deadline = now + LEARN_DEADLINE_S
            _call(f"{self.hub.url}/v1/learning/runs", "POST", {}, self.hub.admin_token)
            print("learning: asked the hub for a training run; agents start their SuperNodes")
            return
        doc = _call(f"{self.hub.url}/v1/learning")
        ours = [r for r in doc["runs"] if r["started_at"] >= self.asked_at - 1.0]
        reports: dict[str, Any] = doc["agents"]
        if ours and not self.ended:
            self._show_run(ours[0], doc, reports)
        if self.ended and not self.done:
            self._show_verdicts(reports)
        if not self.done and now > self.deadline:
            print(f"learning: not finished within {LEARN_DEADLINE_S:g} s; see the logs")
            self.done = True
        sys.stdout.flush()

    def _show_run(self, run: dict[str, Any], doc: dict[str, Any], reports: dict[str, Any]) -> None:
        nodes = sorted(a for a, r in reports.items() if (r.get("supernode") or {}).get("running"))
        if run["status"] == "running":
            if nodes != self.nodes_shown and nodes:
                print(f"learning: SuperNodes running on {', '.join(nodes)} "
                      f"(SuperLink {doc['superlink']})")  # fmt: skip
            self.nodes_shown = nodes
            return
        self.ended = True
        if run["status"] != "completed" or run["model_version"] is None:
            print(f"learning: run {run['run_id']} {run['status']}: {run.get('error')}")
            self.done = True
            return
        self.version = int(run["model_version"])
        model = next(m for m in doc["models"] if m["version"] == self.version)
        m = model["metrics"]
        print(f"learning: run {run['run_id']} completed, {m.get('rounds_completed', 0):g} round; "
              f"model v{self.version} registered; federated eval MAE "
              f"{m.get('eval_rel_mae', float('nan')):.3f} vs EWMA "
              f"{m.get('ewma_rel_mae', float('nan')):.3f} (relative to mean load)")  # fmt: skip

    def _show_verdicts(self, reports: dict[str, Any]) -> None:
        final = 0
        for agent in self.agents:
            report = reports.get(agent.name) or {}
            verdict = (report.get("model") or {}).get("last_verdict") or {}
            if verdict.get("version") != self.version:
                continue
            key = (bool(verdict["accepted"]), str(verdict["reason"]))
            waiting = key[1].startswith(NOT_ENOUGH_DATA)
            final += not waiting
            if key == self.verdicts.get(agent.name):
                continue
            self.verdicts[agent.name] = key
            what = "not validated yet" if waiting else ("accepted" if key[0] else "refused")
            print(f"learning: {agent.name:<26} model v{self.version} {what}: {key[1]}")
        if final == len(self.agents):
            print(f"learning: done; the dashboard's learning panel: {self.hub.url}/#learning")
            self.done = True


def run(args: argparse.Namespace) -> int:
    """Run the demo until Ctrl-C, SIGTERM or ``--duration``; 0 after a clean stop."""
    if not 1 <= args.agents <= len(PROFILES):
        raise DemoError(f"--agents: expected 1..{len(PROFILES)}, got {args.agents}")
    learning = bool(getattr(args, "learning", False))
    missing = [m for m in ("flwr", "cryptography") if importlib.util.find_spec(m) is None]
    if learning and missing:
        raise DemoError(
            f"--learning needs Flower ({', '.join(missing)} not installed); install the "
            f"learning extra: {LEARNING_EXTRA}"
        )
    children: list[Child] = []
    with contextlib.ExitStack() as stack:
        root = args.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root.mkdir(parents=True, exist_ok=True)
        stack.enter_context(_sigterm_stops())
        try:
            hub, agents = _start(root, args.agents, children, args.discover, learning)
            print(f"dashboard: {hub.url}/   (Ctrl-C to stop)", flush=True)
            dirty = _show_sites(agents)
            _wait_trusted(agents, MESH_TIMEOUT_S)
            _submit_mesh_work(agents)
            held = _submit_deferrable(dirty, DEFERRABLE_COUNT) if dirty else []
            moves = _MoveWatch(hub, agents, dirty, held) if dirty and len(agents) > 1 else None
            watch = None
            if learning:
                watch = _LearningWatch(hub, agents, time.monotonic() + args.learn_after)
                print(f"learning: on; training starts after {args.learn_after:g} s of telemetry")
            else:
                print(f"learning: off (--learning trains the load predictor; {LEARNING_EXTRA})")
            end = time.monotonic() + (args.duration if args.duration is not None else 1e18)
            counter, next_round = itertools.count(1), 0.0
            watches = [w for w in (watch, moves) if w is not None]
            while time.monotonic() < end or not all(w.done for w in watches):
                if time.monotonic() >= next_round:
                    _submit_round(agents, counter)
                    next_round = time.monotonic() + args.every
                _report(agents)
                for w in watches:
                    w.step()
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
