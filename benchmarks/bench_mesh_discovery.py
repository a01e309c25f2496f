"""Mesh on loopback: time for a new agent to be trusted by its peers, and offload round trips.

    python benchmarks/bench_mesh_discovery.py [--peers 3] [--joins 5] [--tasks 300]

Real mDNS bound to 127.0.0.1, real signed HTTP, emulated boards with zero run time (so the
round trip is the mesh's own cost: bids, forward, ledger writes on both sides).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

from edge_agent.mesh import FleetKey, MeshConfig, MeshNode, new_agent_id
from edge_agent.mesh.standalone import emulated_node, serve
from edge_agent.placement import Requirements, Semantics, TaskContract

KEY = FleetKey(FleetKey.generate())


PROBE = False  # --probe: probe the mDNS name first, as for an id that is not unique by design


def make(tmp: Path, agent: str, profile: str) -> MeshNode:
    """Return a node with a generated (unique by construction) id, named after ``agent``."""
    agent_id = f"{agent}-{new_agent_id()}"
    cfg = MeshConfig(agent_id=agent_id, announce_burst=1000, heartbeat_s=5.0, probe_name=PROBE)
    return emulated_node(cfg, KEY, [profile], tmp / f"{agent}.db", time_scale=0.0)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def join(new: MeshNode, olds: list[MeshNode]) -> float:
    """Return ms from starting ``new`` until it and every old peer trust each other."""
    start = time.perf_counter()
    async with serve(new):
        for n in olds:
            await n.wait_for(lambda n=n: n.trusts(new.agent_id), 10)  # type: ignore[misc]
        await new.wait_for(lambda: all(new.trusts(o.agent_id) for o in olds), 10)
        return (time.perf_counter() - start) * 1e3


async def main(peers: int, joins: int, tasks: int, gap_s: float) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-mesh-"))
    async with contextlib.AsyncExitStack() as stack:
        olds = [make(tmp, f"peer{i}", "rk3588") for i in range(peers)]
        for n in olds:
            await stack.enter_async_context(serve(n))
        for n in olds:
            await n.wait_for(lambda n=n: n.counters["advertised"] >= 1, 10)  # type: ignore[misc]
        join_ms = []
        for j in range(joins):
            await asyncio.sleep(gap_s)
            join_ms.append(await join(make(tmp, f"new{j}", "rpi5"), olds))
        origin = make(tmp, "origin", "rpi5")
        await stack.enter_async_context(serve(origin))
        await origin.wait_for(lambda: all(origin.trusts(o.agent_id) for o in olds), 10)
        contract = TaskContract(
            Semantics(gflops=2.0, precision="int8"),
            Requirements(kinds=("npu",), precision="int8", model_format=None),
        )
        rtt_ms = []
        for _ in range(tasks):
            start = time.perf_counter()
            out = await origin.submit(contract)
            rtt_ms.append((time.perf_counter() - start) * 1e3)
            assert out["state"] == "done", out
    return {
        "peers": peers,
        "probe_name": PROBE,
        "discovery_loopback_ms": round(statistics.median(join_ms), 1),
        "discovery_loopback_max_ms": round(max(join_ms), 1),
        "discovery_loopback_n": len(join_ms),
        "offload_rtt_p50_ms": round(pct(rtt_ms, 0.5), 3),
        "offload_rtt_p99_ms": round(pct(rtt_ms, 0.99), 3),
        "offload_rtt_n": len(rtt_ms),
        "offload_tasks": tasks,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--peers", type=int, default=3)
    p.add_argument("--joins", type=int, default=5)
    p.add_argument("--tasks", type=int, default=300)
    p.add_argument("--gap-s", type=float, default=1.0, help="pause between joins")
    p.add_argument("--probe", action="store_true", help="probe mDNS names before announcing")
    a = p.parse_args()
    PROBE = a.probe
    res = asyncio.run(main(a.peers, a.joins, a.tasks, a.gap_s))
    print(
        f"new agent trusted by {a.peers} peers (median of {a.joins}): "
        f"{res['discovery_loopback_ms']} ms (max {res['discovery_loopback_max_ms']} ms)"
    )
    print(
        f"offload round trip over {a.tasks} tasks: p50 {res['offload_rtt_p50_ms']} ms, "
        f"p99 {res['offload_rtt_p99_ms']} ms"
    )
    print(json.dumps(res))
