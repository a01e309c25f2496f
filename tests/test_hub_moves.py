"""The hub's re-evaluation moves work: a hub and two real agents in one mesh, on loopback.

The "dirty" agent's grid (a carbon series) is 500 g/kWh now and 400 later, so it holds a
deferrable task for a later hour; the "clean" agent's grid is 100 g/kWh all day. A forced
re-evaluation (``?fresh=1``) issues the move; the dirty agent gets it in its heartbeat
answer, forwards the task to the clean agent through the mesh's exactly-once offload, and
the task runs there once. A move to a node that is no trusted peer is refused and reported.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from cloud_hub.hub.reevaluate import Move
from cloud_hub.hub.request_auth import HUB
from edge_agent.agent.config import AgentConfig

pytestmark = pytest.mark.asyncio
H = 3600.0
#: The conftest fixtures: agent_daemon, until, get_json, final_task, peer_online, site_agent,
#: hub_running, ...
Serve = Callable[[AgentConfig], AbstractAsyncContextManager[str]]
Until = Callable[..., Awaitable[Any]]
GetJson = Callable[[aiohttp.ClientSession, str], Awaitable[Any]]
FinalTask = Callable[[aiohttp.ClientSession, str, str], Awaitable[dict[str, Any]]]
PeerOnline = Callable[[aiohttp.ClientSession, str, str], Awaitable[None]]
#: ``sites(hub_url, **dirty_changes)``: the dirty and the clean agent, peered (below).
Sites = Callable[..., AbstractAsyncContextManager[tuple[aiohttp.ClientSession, str, str]]]
#: ``site_agent(name, hub_url, **changes)`` and ``hub_running()`` (below).
SiteAgent = Callable[..., AgentConfig]
HubRunning = Callable[[], AbstractAsyncContextManager[tuple[web.Application, str]]]


@pytest.fixture
def sites(
    tmp_path: Path,
    agent_daemon: Serve,
    peer_online: PeerOnline,
    site_agent: SiteAgent,
    carbon_series_file: Callable[[Path, float, list[float]], Path],
) -> Sites:
    """Return ``sites(hub_url, **dirty_changes)``: serve the "dirty" agent (a grid of 500
    g/kWh this hour, 400 the others) and the "clean" one (100 g/kWh), both joined to the hub;
    yield (an HTTP session, the dirty agent's URL, the clean one's) once they are peered."""

    @contextlib.asynccontextmanager
    async def start(
        hub: str, **dirty_changes: Any
    ) -> AsyncIterator[tuple[aiohttp.ClientSession, str, str]]:
        now = time.time()
        hour0 = now - now % H
        grid = [400.0, 500.0] + [400.0] * 46
        series = carbon_series_file(tmp_path / "dirty.csv", hour0 - H, grid)
        dirty_cfg = site_agent("dirty", hub, carbon_series=series, **dirty_changes)
        clean_cfg = site_agent("clean", hub, carbon_intensity_g_per_kwh=100.0)
        async with (
            aiohttp.ClientSession() as http,
            agent_daemon(dirty_cfg) as dirty,
            agent_daemon(clean_cfg) as clean,
        ):
            await peer_online(http, dirty, "mesh-clean")
            yield http, dirty, clean

    return start


async def test_a_deferred_task_moves_to_the_clean_site_and_a_bad_move_is_refused(
    hub_running: HubRunning, sites: Sites, until: Until, get_json: GetJson, final_task: FinalTask
) -> None:
    now = time.time()
    body = {
        "semantics": {"gflops": 2.0},
        "requirements": {"model_format": None, "deadline_s": 6 * H},
        "deferrable": True,
    }
    async with hub_running() as (app, hub), sites(hub) as (http, dirty, clean):
        ids = []
        for _ in range(2):
            async with http.post(f"{dirty}/v1/tasks", json=body) as resp:
                assert resp.status == 202, await resp.text()
                task = (await resp.json())["task"]
            assert task["state"] == "deferred" and task["not_before"] > now
            ids.append(task["id"])
        moved_id, kept_id = ids

        # the hub hears both sites (their work, grids and mesh peers), then evaluates
        reevaluator = app[HUB].reevaluator

        async def heard() -> bool:
            site = reevaluator.sites.get("dirty")
            return bool(
                site is not None
                and "clean" in reevaluator.sites
                and {w.id for w in site.deferred} == set(ids)
                and "mesh-clean" in site.peers
            )

        await until(heard)
        # a move to a node that is not a trusted peer of the origin: refused, reported
        ghost = Move(
            kept_id, "default", "dirty", "ghost", 400.0, 10.0, time.time(),
            1.0, 0.1, 0.9, 0.9, False, "mesh-ghost", True,
        )  # fmt: skip
        bad = reevaluator.issue(ghost)
        assert bad is not None

        doc = await get_json(http, f"{hub}/v1/reevaluation?fresh=1")
        [move] = [m for m in doc["moves"] if m["task_id"] == moved_id]
        assert move["target"] == "clean" and move["to"] == "mesh-clean"
        assert move["executable"] and move["move_id"]
        # the kept task has a move under way already (the ghost one): not issued twice
        assert all(m["move_id"] in (None, bad["id"]) for m in doc["moves"] if m is not move)
        row = await final_task(http, dirty, moved_id)
        assert row["state"] == "done" and row["ran_on"] == "mesh-clean", row
        origin_link = row["chain"][0]
        assert origin_link["node"] == "mesh-dirty"
        assert origin_link["action"].startswith("forward to mesh-clean: moved by hub re-eval")
        assert f"(saving {move['saving_g']:.3g} g)" in origin_link["action"]
        explain = await get_json(http, f"{dirty}/v1/tasks/{moved_id}/explain")
        assert explain["ran_on"] == "mesh-clean"
        assert "moved by hub re-evaluation" in explain["chain"][0]["action"]

        # it ran exactly once, on the clean agent, as a task naming its origin
        ran = (await get_json(http, f"{clean}/v1/tasks"))["tasks"]
        assert [(t["origin"], t["state"]) for t in ran] == [("mesh-dirty", "done")]

        # the other task stays deferred at the origin: the ghost move was refused
        kept = (await get_json(http, f"{dirty}/v1/tasks/{kept_id}"))["task"]
        assert kept["state"] == "deferred"

        async def settled() -> dict[str, Any] | None:
            doc = await get_json(http, f"{hub}/v1/reevaluation")
            states = {r["id"]: r for r in doc["executed"]}
            done, refused = states[move["move_id"]], states[bad["id"]]
            if done["state"] == "done" and refused["state"] == "refused":
                return states
            return None

        states = await until(settled)
        assert states[move["move_id"]]["ran_on"] == "mesh-clean"
        assert states[bad["id"]]["reason"] == "mesh-ghost is not a trusted online mesh peer"
        assert reevaluator.pending("dirty") == []
        assert reevaluator.issue(ghost) is bad  # a refused move is never issued again
        assert reevaluator.pending("dirty") == []


async def test_work_run_for_a_peer_counts_against_its_tenants_pool_there(
    site_agent: SiteAgent,
    agent_daemon: Serve,
    get_json: GetJson,
    final_task: FinalTask,
    peer_online: PeerOnline,
) -> None:
    from edge_agent.placement.pools import PoolSpec

    npu_task = {
        "semantics": {"gflops": 2.0, "precision": "int8"},
        "requirements": {"kinds": ["npu"], "precision": "int8", "model_format": None},
    }
    origin_cfg = site_agent("cpu", "", profile="rpi5", mesh_bid_above_s=0.1)
    # the NPU box gives tenant "lab" no accelerator time at all; "field" is not pooled
    peer_cfg = site_agent("npu", "", pools={"lab": PoolSpec(accelerator_share=0.0)})
    async with (
        aiohttp.ClientSession() as http,
        agent_daemon(origin_cfg) as origin,
        agent_daemon(peer_cfg) as peer,
    ):
        await peer_online(http, origin, "mesh-npu")
        ids = {}
        for tenant in ("lab", "field"):
            async with http.post(f"{origin}/v1/tasks", json={**npu_task, "tenant": tenant}) as r:
                assert r.status == 202, await r.text()
                ids[tenant] = (await r.json())["task"]["id"]
        field = await final_task(http, origin, ids["field"])
        assert field["state"] == "done" and field["ran_on"] == "mesh-npu"
        lab = await final_task(http, origin, ids["lab"])
        assert lab["state"] == "failed" and lab["ran_on"] is None
        refusal = next(link for link in lab["chain"] if link["action"] == "attempt failed")
        assert refusal["node"] == "mesh-npu"
        assert "refused for mesh-cpu: waiting: pool lab full" in refusal["summary"]
        rows = (await get_json(http, f"{peer}/v1/tasks"))["tasks"]
        by_state = sorted((t["state"], t["origin"]) for t in rows)
        assert by_state == [("done", "mesh-cpu"), ("failed", "mesh-cpu")]
        [failed] = [t for t in rows if t["state"] == "failed"]
        assert "pool lab full" in failed["error"]


async def test_a_queued_task_waiting_for_its_pool_moves_to_the_clean_site(
    hub_running: HubRunning, sites: Sites, until: Until, get_json: GetJson, final_task: FinalTask
) -> None:
    from edge_agent.placement.pools import PoolSpec

    cpu = {"model_format": None, "kinds": ["cpu"]}
    long_task = {"semantics": {"gflops": 500.0}, "requirements": cpu, "tenant": "lab"}
    short_task = {"semantics": {"gflops": 2.0}, "requirements": cpu, "tenant": "lab"}
    dirty_changes: dict[str, Any] = {
        "mesh_bid_above_s": 1000.0,  # the mesh is not offered it: it waits here
        "mesh_bid_rate_per_s": 0.0,  # (nor asked about it on a peer's summary)
        "pools": {"lab": PoolSpec(cpu_cores=1.0)},  # one lab task on the CPU at a time
    }
    async with (
        hub_running() as (app, hub),
        sites(hub, **dirty_changes) as (http, dirty, clean),
    ):
        ids = []
        for body in (long_task, short_task):
            async with http.post(f"{dirty}/v1/tasks", json=body) as resp:
                assert resp.status == 202, await resp.text()
                ids.append((await resp.json())["task"]["id"])
        blocker, waiting = ids
        reevaluator = app[HUB].reevaluator

        async def heard() -> bool:
            site = reevaluator.sites.get("dirty")
            queued = {w.id for w in site.deferred if w.queued} if site else set()
            return waiting in queued and "clean" in reevaluator.sites

        await until(heard)
        doc = await get_json(http, f"{hub}/v1/reevaluation?fresh=1")
        [move] = doc["moves"]
        assert move["task_id"] == waiting and move["queued"] and move["executable"]
        assert (move["origin_g_per_kwh"], move["target_g_per_kwh"]) == (500.0, 100.0)
        row = await final_task(http, dirty, waiting)
        assert row["state"] == "done" and row["ran_on"] == "mesh-clean", row
        assert "moved by hub re-evaluation" in row["chain"][0]["action"]
        still = (await get_json(http, f"{dirty}/v1/tasks/{blocker}"))["task"]
        assert still["state"] == "running"  # the move did not wait for the pool here
        ran = (await get_json(http, f"{clean}/v1/tasks"))["tasks"]
        assert [(t["origin"], t["state"]) for t in ran] == [("mesh-dirty", "done")]
