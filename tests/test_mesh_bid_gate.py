"""The bid gate on loopback: signed summaries decide whom to ask, a token bucket bounds it.

Real MeshNodes (real mDNS, signed HTTP) with emulated boards: a Hailo-8 host (an ONNX int8
resnet50 on its x86 CPU, ~35 ms estimated: the HEF-only NPU cannot run it) and a Jetson
Orin Nano (on its GPU, ~3.4 ms). Its bid above-threshold is 1 s, so
before the gate the Hailo host never asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.mesh import FleetKey, MeshConfig, MeshNode
from edge_agent.mesh.standalone import emulated_node, serve
from edge_agent.placement import Requirements, Semantics, TaskContract

pytestmark = pytest.mark.asyncio
KEY = FleetKey("bid-gate-test-fleet-key-00000000")


def resnet(batch: int = 1) -> TaskContract:
    """resnet50 (8.2 GFLOP a frame), int8, compiled for ONNX: the Hailo NPU (HEF only) cannot
    run it."""
    return TaskContract.from_dict(
        {
            "task_class": "resnet50",
            "semantics": {"gflops": 8.2 * batch, "precision": "int8", "input_bytes": 150_528},
            "requirements": {"model_format": "onnx"},
        }
    )


def npu_int8() -> TaskContract:
    return TaskContract(
        Semantics(gflops=2.0, precision="int8"),
        Requirements(kinds=("npu",), precision="int8", model_format=None),
    )


def node(tmp: Path, agent: str, profile: str, **cfg: Any) -> MeshNode:
    base: dict[str, Any] = {"heartbeat_s": 0.3, "announce_burst": 100, "bid_above_s": 1.0}
    config = MeshConfig(agent_id=agent, **{**base, **cfg})
    return emulated_node(config, KEY, [profile], tmp / f"{agent}.db", time_scale=0.0)


@contextlib.asynccontextmanager
async def with_jetson(
    tmp: Path, job: TaskContract, peer_cfg: dict[str, Any] | None = None, **origin_cfg: Any
) -> AsyncIterator[tuple[MeshNode, MeshNode]]:
    """Serve a Hailo host and a Jetson that has run ``job`` itself (its summary carries the
    class); yield (hailo, jetson) once the Hailo host holds that summary."""
    origin = node(tmp, "hailo", "hailo8_host", **origin_cfg)
    jetson = node(tmp, "jetson", "jetson_orin_nano", **(peer_cfg or {}))
    jetson.recent.note(job)
    async with serve(origin), serve(jetson):
        await knows(origin, "jetson", job.task_class)
        yield origin, jetson


async def knows(origin: MeshNode, peer: str, task_class: str) -> None:
    """Wait until ``origin`` trusts ``peer`` and holds its summary with ``task_class``."""

    def ready() -> bool:
        p = origin.peers.peers.get(peer)
        return p is not None and p.summary is not None and task_class in p.summary.classes

    async with asyncio.timeout(10):
        while not ready():
            await asyncio.sleep(0.02)


async def test_a_peer_whose_summary_beats_local_gets_the_task(tmp_path: Path) -> None:
    async with with_jetson(tmp_path, resnet()) as (origin, jetson):
        summary = origin.peers.peers["jetson"].summary
        assert summary is not None and summary.kinds == ("cpu_arm", "gpu_nvidia")
        assert summary.classes["resnet50"] < 0.005  # ~3.4 ms on the GPU
        local = origin.placer.preview(resnet())
        assert 0.030 < local.latency_s < origin.cfg.bid_above_s  # under the old threshold
        out = await origin.submit(resnet(), key="y1")
        assert out["state"] == "done" and out["ran_on"] == "jetson", out["chain"]
        first = out["chain"][0]
        assert first["devices"] == ["hailo8_host/cpu"] and first["action"] == "forward to jetson"
        assert [b["peer"] for b in first["bids"]] == ["jetson"]
        assert first["bids"][0]["estimate_ms"] < 5
        assert origin.counters["bids_sent"] == 1 and jetson.counters["bids_received"] == 1


async def test_a_peer_no_better_than_local_is_not_asked(tmp_path: Path) -> None:
    origin = node(tmp_path, "hailo", "hailo8_host")
    twin = node(tmp_path, "twin", "hailo8_host")
    twin.recent.note(resnet())
    async with serve(origin), serve(twin):
        await knows(origin, "twin", "resnet50")
        out = await origin.submit(resnet(), key="y1")
        assert out["state"] == "done" and out["ran_on"] == "hailo"
        assert [link["action"] for link in out["chain"]] == ["run here"]
        assert origin.counters["bids_sent"] == 0 and twin.counters["bids_received"] == 0


async def test_a_stale_summary_is_not_used(tmp_path: Path) -> None:
    # heartbeats far apart: the summary from the hello is the only one within the test
    # batches of 4: a one-sample round trip cannot decide it
    slow = {"heartbeat_s": 30.0}
    async with with_jetson(tmp_path, resnet(4), slow, heartbeat_s=30.0, summary_max_age_s=1.0) as (
        origin,
        jetson,
    ):
        local = origin.placer.preview(resnet(4))
        assert [p.agent_id for p in origin.offloader.ask(resnet(4), local).peers] == ["jetson"]
        gate = origin.offloader.gate
        gate.clock = lambda: time.monotonic() + 1.5  # the summary is now 1.5 s old
        ask = origin.offloader.ask(resnet(4), local)
        assert ask.peers == () and "no fresh peer summary" in ask.reason
        out = await origin.submit(resnet(4), key="y1")
        assert out["ran_on"] == "hailo" and origin.counters["bids_sent"] == 0
        assert jetson.counters["bids_received"] == 0


async def test_a_burst_of_optional_asks_stays_within_the_bid_budget(tmp_path: Path) -> None:
    budget = {"bid_rate_per_s": 5.0, "bid_burst": 5.0}
    async with with_jetson(tmp_path, resnet(), **budget) as (origin, jetson):
        t0 = time.monotonic()
        outs = await asyncio.gather(*(origin.submit(resnet(), key=f"y{i}") for i in range(40)))
        elapsed = time.monotonic() - t0
        assert all(o["state"] == "done" for o in outs)
        sent, received = origin.counters["bids_sent"], jetson.counters["bids_received"]
        assert sent == received  # every bid message counted on both sides
        assert 1 <= received <= 5 + 5.0 * elapsed  # the burst, then the rate
        assert sent + origin.counters["bids_rate_limited"] >= 40  # the rest: refused by it
        assert 1 <= sum(o["ran_on"] == "jetson" for o in outs) <= sent  # only asked ones moved


async def test_necessary_asks_wait_for_the_budget_instead_of_flooding(tmp_path: Path) -> None:
    origin = node(tmp_path, "cpu", "rpi5", bid_rate_per_s=10.0, bid_burst=2.0)
    npu = node(tmp_path, "npu", "rk3588")
    async with serve(origin), serve(npu):
        await origin.wait_for(lambda: origin.trusts("npu"), 10)
        t0 = time.monotonic()
        outs = await asyncio.gather(*(origin.submit(npu_int8(), key=f"n{i}") for i in range(12)))
        elapsed = time.monotonic() - t0
        assert all(o["state"] == "done" and o["ran_on"] == "npu" for o in outs)
        assert npu.counters["bids_received"] == 12  # nothing here can run them: all asked
        assert elapsed >= (12 - 2) / 10.0 * 0.9  # ... at the bid rate, after the burst


async def test_a_zero_bid_rate_asks_peers_only_what_cannot_run_here(tmp_path: Path) -> None:
    off = {"bid_rate_per_s": 0.0, "bid_above_s": 0.0}
    async with with_jetson(tmp_path, resnet(), **off) as (origin, _):
        # over bid_above_s and beaten by the summary, yet not asked: the agent's asks are off
        out = await origin.submit(resnet(), key="r1")
        assert out["ran_on"] == "hailo" and origin.counters["bids_sent"] == 0
        # what nothing here can run (an fp16 task: neither the CPU nor the NPU offers it)
        fp16 = TaskContract(Semantics(gflops=8.2, precision="fp16"), Requirements())
        assert not origin.placer.preview(fp16).placed
        out = await origin.submit(fp16, key="h1")
        assert out["ran_on"] == "jetson" and origin.counters["bids_sent"] == 1
