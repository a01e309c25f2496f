"""Hub heartbeat capacity: the largest fleet one hub holds at heartbeat round-trip p99 <= 50 ms.

    python benchmarks/bench_hub_heartbeat.py [--curve 1000,2000,4000,8000,12000,16000]
                                             [--interval 5] [--duration 15] [--quick]

The hub runs as its own process (``cloud-hub run`` code, real SQLite file in WAL mode;
heartbeats commit with synchronous=NORMAL, everything else FULL: docs/hub-protocol.md §3).
The simulated agents run in this process (``hub_heartbeat_load``): each enrols with the
join token, holds its own keep-alive connection, and sends a real heartbeat
(two devices) signed with its own key, fresh nonce and timestamp, every interval the hub's
answer names, at a random phase; it checks the hub's signature on every answer.

The fleet grows through the ``--curve`` sizes, ``--duration`` seconds of heartbeats at each.
Per step: the round trip p50/p99 (sign, send; the hub verifies signature, window and nonce,
stores, signs its answer; the agent checks it) with its sample count, errors, heartbeats/s,
the interval the hub asked for, and the CPU of the hub and of the load generator (percent of
one core, and microseconds per heartbeat: the figure a noisy shared box does not move much).
``hub_max_agents_p99_50ms`` is the largest size whose p99 stayed <= 50 ms with no errors
(issue 15: >= 8,000 with the load generator on the same cores); the curve stops after the
second size over the bound. The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hub_heartbeat_load import RawAgent, heartbeat_loop  # noqa: E402

from cloud_hub.hub.config import HubConfig  # noqa: E402
from edge_agent.protocol.hub_client import HubClient  # noqa: E402

try:  # the generator's own loop: uvloop where installed, as the hub and the agent
    import uvloop

    LOOP, run_loop = "uvloop", uvloop.run
except ImportError:
    LOOP, run_loop = "asyncio", asyncio.run

P99_BOUND_MS = 50.0
TARGET_AGENTS = 8000
SIZES = "1000,2000,4000,8000,12000,16000"
#: Seconds between two ticks of the load generator's loop-lag probe.
LAG_TICK_S = 0.01
#: Enrolments (and first connections) in flight at once while the fleet grows.
ENROL_AT_ONCE = 100
RUN = (
    "import sys; from edge_agent.clikit import CommandLine; from cloud_hub.hub.cli import register;"
    "cli = CommandLine('cloud-hub', 'hub', '0'); register(cli); sys.exit(cli.main(sys.argv[1:]))"
)


def start_hub(
    data: Path, interval: float, cap: float, fleet: int
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the hub process on an ephemeral loopback port, room for ``fleet`` connections."""
    config = data / "hub.toml"
    config.write_text(
        f'[hub]\ndata_dir = "{data}"\njoin_token = "bench"\n'
        f"[api]\nport = 0\nmax_connections = {max(4096, fleet + 512)}\n"
        f"[liveness]\nheartbeat_interval_s = {interval}\nmax_heartbeats_per_s = {cap}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", RUN, "run", "--config", str(config)], env=env)
    deadline = time.monotonic() + 30
    while not (data / "hub.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the hub did not start")
        time.sleep(0.05)
    port = json.loads((data / "hub.json").read_text())["port"]
    return proc, f"http://127.0.0.1:{port}"


async def grow(url: str, agents: list[RawAgent], size: int) -> None:
    """Enrol agents (the real client) up to ``size``, each then connecting and beating once."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(i: int) -> RawAgent:
            client = HubClient(url, f"agent-{i:05d}", session)
            answer = await client.enrol("bench", {"rack": str(i % 8)})
            agent = RawAgent(client.agent_id, str(answer["key"]), answer["hub_id"], host, int(port))
            agent.interval_s = client.heartbeat_interval_s
            await agent.connect()  # and its first heartbeat, as a daemon after enrolling:
            await agent.beat()  # the step measures a fleet in its steady state
            return agent

        for start in range(len(agents), size, ENROL_AT_ONCE):
            stop = min(size, start + ENROL_AT_ONCE)
            agents += await asyncio.gather(*(one(i) for i in range(start, stop)))


async def handler_buckets(url: str) -> dict[float, float]:
    """Return the hub's own heartbeat-handling histogram (``le`` -> cumulative count)."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as resp:
        text = await resp.text()
    prefix = 'hetmesh_hub_heartbeat_seconds_bucket{le="'
    return {
        float(line[len(prefix) :].split('"')[0]): float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def bucket_p99_ms(before: dict[float, float], after: dict[float, float]) -> float | None:
    """Return the upper bound of the bucket holding the 99th percentile between two reads."""
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1] if counts else 0.0
    for le, cumulative in counts:
        if total and cumulative >= 0.99 * total:
            return le * 1e3
    return None


def cpu_pressure() -> float | None:
    """Return the share of the last 10 s in which some runnable task waited for a CPU (PSI):
    near 100 the hub's one event-loop thread gets only its fair share of a core."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return float(line.split("avg10=")[1].split()[0])


def _cpu(proc: psutil.Process) -> tuple[float, float]:
    """Return the process's (user + system, system) CPU seconds."""
    t = proc.cpu_times()
    return float(t.user + t.system), float(t.system)


async def measure(agents: list[RawAgent], duration: float, hub: psutil.Process) -> dict[str, Any]:
    """Heartbeat from every agent for ``duration`` s; return latency, rate and CPU figures."""
    me = psutil.Process()
    connects0 = sum(a.connects for a in agents)
    (hub0, sys0), (me0, _), wall0 = _cpu(hub), _cpu(me), time.perf_counter()
    latencies: list[float] = []
    errors: list[str] = []
    until = wall0 + duration
    lags: list[float] = []

    async def lag() -> None:  # the generator's own loop: a stall here is not the hub's
        while time.perf_counter() < until:
            t = time.perf_counter()
            await asyncio.sleep(LAG_TICK_S)
            lags.append(time.perf_counter() - t - LAG_TICK_S)

    await asyncio.gather(lag(), *(heartbeat_loop(a, until, latencies, errors) for a in agents))
    (hub1, sys1), (me1, _), wall1 = _cpu(hub), _cpu(me), time.perf_counter()
    latencies.sort()
    n, wall = len(latencies), wall1 - wall0

    def pick(q: float) -> float | None:
        return round(latencies[min(n - 1, int(q * n))] * 1e3, 2) if n else None

    per_beat = 1e6 / max(1, n)
    return {
        "agents": len(agents),
        "interval_s": statistics.median(a.interval_s for a in agents),
        "heartbeats": n,
        "heartbeats_per_s": round(n / wall, 1),
        "errors": len(errors),
        "error_sample": sorted(set(errors))[:3],
        "connects": sum(a.connects for a in agents) - connects0,
        "p50_ms": pick(0.50),
        "p99_ms": pick(0.99),
        "max_ms": pick(1.0),
        "hub_cpu_pct": round(100 * (hub1 - hub0) / wall, 1),
        "hub_cpu_us_per_heartbeat": round((hub1 - hub0) * per_beat, 1),
        "hub_sys_cpu_us_per_heartbeat": round((sys1 - sys0) * per_beat, 1),
        "hub_rss_mb": round(hub.memory_info().rss / 2**20, 1),
        "load_cpu_pct": round(100 * (me1 - me0) / wall, 1),
        "load_cpu_us_per_heartbeat": round((me1 - me0) * per_beat, 1),
        "load_loop_lag_ms_p99": round(sorted(lags)[int(0.99 * len(lags))] * 1e3, 1),
        "load_loop_lag_ms_max": round(max(lags) * 1e3, 1),
    }


async def curve(url: str, sizes: list[int], duration: float, hub_pid: int) -> dict[str, Any]:
    """Grow the fleet through ``sizes``; return each step and the largest with p99 <= 50 ms."""
    steps: list[dict[str, Any]] = []
    best, over = 0, 0
    agents: list[RawAgent] = []
    hub = psutil.Process(hub_pid)
    for size in sorted(sizes):
        await grow(url, agents, size)
        # long enough for every agent to beat at the interval the hub now asks for
        asked = max(a.interval_s for a in agents)
        buckets = await handler_buckets(url)
        # thousands of simulated agents share this one process: a full collection of their
        # objects would stall every agent at once (~0.1-0.3 s at 8,000), which separate agents
        # never do, so the agents made so far are frozen out of the collector, as the hub's are
        gc.collect()
        gc.freeze()
        step = await measure(agents, max(duration, asked), hub)
        # the hub's own time from request to answer (verify, store, commit, sign): the rest
        # of the round trip is waiting to be read, scheduled and written
        step["hub_handler_p99_ms_at_most"] = bucket_p99_ms(buckets, await handler_buckets(url))
        step |= {
            "hub_asks_interval_s": asked,
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "cpu_pressure_some_pct": cpu_pressure(),
        }
        steps.append(step)
        print(
            f"{size:>6} agents every {step['interval_s']:g} s: {step['heartbeats_per_s']:.0f}/s,"
            f" p50 {step['p50_ms']} / p99 {step['p99_ms']} ms (n {step['heartbeats']}),"
            f" errors {step['errors']}, hub handler p99 <= {step['hub_handler_p99_ms_at_most']} ms,"
            f" hub CPU {step['hub_cpu_pct']}%"
            f" ({step['hub_cpu_us_per_heartbeat']} us/heartbeat), load generator"
            f" {step['load_cpu_pct']}% ({step['load_cpu_us_per_heartbeat']} us/heartbeat,"
            f" its loop late by <= {step['load_loop_lag_ms_p99']} ms p99),"
            f" load average {step['load_avg_1m']:.1f},"
            f" CPU pressure {step['cpu_pressure_some_pct']}%",
            flush=True,
        )
        if step["p99_ms"] is not None and step["p99_ms"] <= P99_BOUND_MS and not step["errors"]:
            best = max(best, size)
        else:
            over += 1
            if over >= 2:
                break
    for agent in agents:
        agent.close()
    return {"curve": steps, "hub_max_agents_p99_50ms": best}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curve", default=SIZES, help=f"fleet sizes, ascending (default {SIZES})")
    parser.add_argument("--agents", type=int, help="one fleet size instead of a curve")
    parser.add_argument(
        "--interval", type=float, default=5.0, help="the hub's heartbeat_interval_s"
    )
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of heartbeats a size")
    parser.add_argument(
        "--max-heartbeats-per-s",
        type=float,
        default=HubConfig().max_heartbeats_per_s,
        help="the hub's [liveness] max_heartbeats_per_s (0: every agent at --interval)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI smoke: 50 and 200 agents, 1 s, 3 s each"
    )
    args = parser.parse_args()
    if args.quick:
        args.curve, args.interval, args.duration = "50,200", 1.0, 3.0
    sizes = [args.agents] if args.agents else [int(x) for x in args.curve.split(",")]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # one descriptor per agent
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_hub(Path(tmp), args.interval, args.max_heartbeats_per_s, max(sizes))
        try:
            found = run_loop(curve(url, sizes, args.duration, proc.pid))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    result = {
        "hub_max_agents_p99_50ms": found["hub_max_agents_p99_50ms"],
        "target_hub_max_agents_p99_50ms": TARGET_AGENTS,
        "p99_bound_ms": P99_BOUND_MS,
        "heartbeat_interval_s": args.interval,
        "max_heartbeats_per_s": args.max_heartbeats_per_s,
        "event_loop": LOOP,
        "step_duration_s": args.duration,
        "quick": args.quick,
        "cores": os.cpu_count(),
        "load_avg_1m_before": round(load_before, 2),
        "curve": found["curve"],
    }
    print(json.dumps(result))
    if args.quick:  # the smoke run fails on any refused or lost heartbeat
        return 0 if all(s["errors"] == 0 and s["heartbeats"] for s in found["curve"]) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
