"""Two real agents (`edge-agent run`'s serve(): mDNS mesh, HTTP, SQLite) and the bid gate.

The demo of issue 13.6: a Hailo-8 host runs an ONNX int8 resnet50 on its x86 CPU (~35 ms
estimated; its NPU takes HEF only) while a trusted Jetson Orin Nano peer runs it on its GPU
in ~3.4 ms.
Both are far under ``[mesh] bid_above_s`` (1 s), so before the gate the Hailo host never
asked. Once the Jetson's signed summary carries resnet50, the Hailo host asks it, and only
it, and the task runs there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import pytest

from edge_agent.agent.config import AgentConfig

#: resnet50 (8.2 GFLOP), int8, compiled for ONNX: the Hailo NPU (HEF only) cannot run it
RESNET = {
    "task_class": "resnet50",
    "semantics": {"gflops": 8.2, "precision": "int8", "input_bytes": 150_528},
    "requirements": {"model_format": "onnx"},
}
Serve = Callable[[AgentConfig], AbstractAsyncContextManager[str]]
Until = Callable[..., Awaitable[Any]]
GetJson = Callable[[aiohttp.ClientSession, str], Awaitable[Any]]
FinalTask = Callable[[aiohttp.ClientSession, str, str], Awaitable[dict[str, Any]]]
PeerOnline = Callable[[aiohttp.ClientSession, str, str], Awaitable[None]]


async def submit(http: aiohttp.ClientSession, base: str, doc: dict[str, Any]) -> str:
    async with http.post(f"{base}/v1/tasks", json=doc) as resp:
        assert resp.status == 202, await resp.text()
        return str((await resp.json())["task"]["id"])


@pytest.mark.asyncio
async def test_the_hailo_host_offloads_resnet50_to_the_jetson_its_summary_says_is_faster(
    site_agent: Callable[..., AgentConfig],
    agent_daemon: Serve,
    peer_online: PeerOnline,
    get_json: GetJson,
    until: Until,
    final_task: FinalTask,
) -> None:
    # two agents in one mesh (0.3 s heartbeats), joined to no hub
    hailo_cfg = site_agent("hailo", "", profile="hailo8_host")
    assert hailo_cfg.mesh_bid_above_s == 1.0  # the default: the old rule never asked here
    async with (
        aiohttp.ClientSession() as http,
        agent_daemon(hailo_cfg) as hailo,
        agent_daemon(site_agent("jetson", "", profile="jetson_orin_nano")) as jetson,
    ):
        jetson_id = (await get_json(http, f"{jetson}/v1/peers"))["agent_id"]
        hailo_id = (await get_json(http, f"{hailo}/v1/peers"))["agent_id"]
        await peer_online(http, hailo, jetson_id)
        await peer_online(http, jetson, hailo_id)

        # the Jetson runs resnet50 for itself: its own GPU beats the Hailo host, not asked
        own = await final_task(http, jetson, await submit(http, jetson, RESNET))
        assert own["state"] == "done" and own["device"] == "jetson_orin_nano/gpu"
        assert own["ran_on"] is None and own["chain"] is None

        async def summary_has_resnet() -> bool:
            rows = (await get_json(http, f"{hailo}/v1/peers"))["peers"]
            row = next(r for r in rows if r["agent_id"] == jetson_id)
            return bool(row["summary_classes"] >= 1 and row["summary_age_s"] < 1.0)

        await until(summary_has_resnet)
        task = await final_task(http, hailo, await submit(http, hailo, RESNET))
        assert task["state"] == "done" and task["ran_on"] == jetson_id, task
        assert task["device"] == f"{jetson_id}:jetson_orin_nano/gpu"
        origin, peer = task["chain"]
        assert origin["devices"] == ["hailo8_host/cpu"] and "est 35" in origin["summary"]
        assert [b["peer"] for b in origin["bids"]] == [jetson_id]
        assert origin["bids"][0]["estimate_ms"] < 5
        assert peer["node"] == jetson_id and peer["devices"] == ["jetson_orin_nano/gpu"]

        counters = (await get_json(http, f"{hailo}/v1/peers"))["counters"]
        assert counters["bids_sent"] == 1 and counters["summaries_received"] >= 1
        assert (await get_json(http, f"{jetson}/v1/peers"))["counters"]["bids_received"] == 1
