"""The dashboard in a real browser: Playwright driving Debian's chromium against a live hub.

The browser comes from the ``chromium`` fixture (tests/conftest.py), which says when and why
it skips. ``HETMESH_DASHBOARD_PNG=docs/dashboard.png`` keeps the screenshot.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.models_api import FEDERATION
from cloud_hub.hub.sim_agent import SimulatedAgent, board_devices
from cloud_hub.learning.federation import RunRecord
from edge_agent.agent.config import AgentConfig
from edge_agent.protocol.hub_client import HubClient

Client = TestClient[Any, Any]
H = 3600.0
#: The conftest fixtures: hub_running, agent_daemon, site_agent, carbon_series_file,
#: peer_online, get_json, until.
HubRunning = Callable[[], AbstractAsyncContextManager[tuple[Any, str]]]
Serve = Callable[[AgentConfig], AbstractAsyncContextManager[str]]
SiteAgent = Callable[..., AgentConfig]
WriteSeries = Callable[[Path, float, list[float]], Path]
PeerOnline = Callable[[aiohttp.ClientSession, str, str], Awaitable[None]]
GetJson = Callable[[aiohttp.ClientSession, str], Awaitable[Any]]
Until = Callable[..., Awaitable[Any]]


async def _agent(client: Client, name: str, board: str, site: str) -> SimulatedAgent:
    hc = HubClient(str(client.make_url("")), name, client.session)
    await hc.enrol("tok", {"site": site}, board=board)
    devices = board_devices(board)
    for i, d in enumerate(devices):
        d["utilization"] = round(0.15 + 0.2 * i, 2)
    return SimulatedAgent(hc, devices)


@pytest.mark.asyncio
async def test_dashboard_shows_fleet_and_an_agent_going_offline(
    aiohttp_client: Any, chromium: Any, tmp_path: Path
) -> None:
    config = HubConfig(
        data_dir=tmp_path / "hub",
        port=0,
        join_token="tok",
        admin_token="adm",
        heartbeat_interval_s=0.2,  # stale after 0.6 s: the test waits under a second
        push_interval_s=0.1,
    )
    client: Client = await aiohttp_client(make_app(config))
    lab = await _agent(client, "rk3588-lab", "rk3588", "lab")
    edge = await _agent(client, "orin-dock-2", "jetson_orin_nano", "dock")
    lab.peers = []  # nobody sees orin-dock-2 once it stops: offline, not partitioned
    for n, (device, why) in enumerate(
        [
            ("rk3588/npu", "fastest feasible int8 device; 2.1 ms vs 3.4 ms on gpu"),
            ("rk3588/cpu", "npu busy (queue 40 ms); cpu meets the 50 ms deadline"),
        ]
    ):
        lab.record(
            "decision",
            {
                "task_id": f"t{n + 1:03d}",
                "device": device,
                "why_here": why,
                "policy": "balanced@1",
            },
            0,
        )
    # task outcomes within the throughput window: 6 done on the lab box (2..7 ms), 3 done
    # and 1 failed on the dock
    now = time.time()
    for n in range(6):
        done = {
            "id": f"l{n}",
            "state": "done",
            "device": "rk3588/npu",
            "latency_s": 0.002 + n / 1000,
        }
        lab.record("task", done, now)
    for n, state in enumerate(("done", "done", "done", "failed")):
        edge.record("task", {"id": f"e{n}", "state": state, "latency_s": 0.010}, now)
    await lab.flush()
    await edge.flush()
    admin = {"Authorization": "Bearer adm"}
    resp = await client.post("/v1/policies", json={"name": "edge", "template": "balanced"})
    assert resp.status == 401
    resp = await client.post(
        "/v1/policies", json={"name": "edge", "template": "latency-first"}, headers=admin
    )
    assert resp.status == 201
    resp = await client.post(
        "/v1/rollouts", json={"name": "edge", "version": 1, "selector": {}}, headers=admin
    )
    assert resp.status == 201, await resp.text()
    lab.start(0.1)
    edge.start(0.1)
    url = str(client.make_url("/"))
    try:
        page = await chromium.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(url)
        for name in ("rk3588-lab", "orin-dock-2"):
            await page.wait_for_selector(
                f'tr[data-agent="{name}"] td.state[data-state="online"]', timeout=10_000
            )
        await page.wait_for_selector("#conn.up", timeout=5_000)
        assert await page.title() == "hetmesh fleet"  # the head shared with the status page
        assert await page.locator('meta[name="viewport"]').count() == 1
        # the shared stylesheet (base.css, one copy for the status page and the dashboard) applied
        background = "getComputedStyle(document.body).backgroundColor"
        assert await page.evaluate(background) == "rgb(246, 247, 249)"
        assert await page.locator("#devices tbody tr").count() == len(lab.devices) + len(
            edge.devices
        )
        decisions = await page.locator("#decisions").inner_text()
        assert "2.1 ms" in decisions and "balanced@1" in decisions
        # throughput and latency, per agent and fleet-wide, from the synced task outcomes
        fleet = page.locator('#throughput tr[data-scope="fleet"] td')
        await fleet.first.wait_for(timeout=5_000)
        cells = await fleet.all_inner_texts()
        assert cells[0] == "fleet" and cells[2] == "9" and cells[3] == "1", cells
        assert cells[1] == f"{9 / 60:.2f}"  # 9 done in the 60 s window
        lab_row = await page.locator('#throughput tr[data-scope="rk3588-lab"] td').all_inner_texts()
        assert lab_row[2] == "6" and lab_row[4] == "4.0 ms" and lab_row[5] == "7.0 ms", lab_row
        assert await page.locator("#learning").count() == 1  # the predictor's panel goes here
        await page.wait_for_selector('#fleet td:text("edge@1")', timeout=10_000)
        shot = tmp_path / "dashboard.png"
        await page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        target = os.environ.get("HETMESH_DASHBOARD_PNG")
        if target:
            shutil.copyfile(shot, target)
        await edge.stop()
        await page.wait_for_selector(
            'tr[data-agent="orin-dock-2"] td.state[data-state="offline"]', timeout=10_000
        )
        lab_state = page.locator('tr[data-agent="rk3588-lab"] td.state')
        assert await lab_state.get_attribute("data-state") == "online"
        assert "stale" in await page.locator("#devices").inner_text()
        assert errors == []
    finally:
        await lab.stop()
        await edge.stop()
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_dashboard_shows_mesh_carbon_deferred_work_moves_and_the_true_run_id(
    chromium: Any,
    tmp_path: Path,
    hub_running: HubRunning,
    agent_daemon: Serve,
    site_agent: SiteAgent,
    carbon_series_file: WriteSeries,
    peer_online: PeerOnline,
    get_json: GetJson,
    until: Until,
) -> None:
    """A hub and two real agent daemons joined to it and peered in one mesh on loopback (hub
    ids "dirty" and "clean", mesh ids "mesh-dirty" and "mesh-clean"). The dirty site's grid is
    500 g/kWh this hour and 400 the next ones, so it holds deferrable work; the clean site's
    is 100 g/kWh. A forced re-evaluation moves that work to the clean site.

    The learning run is inserted into the hub's run history directly (a real Flower run takes
    minutes): its id is a 64-bit integer above 2**53, which a JavaScript number would round.
    """
    now = time.time()
    hour0 = now - now % H
    series = carbon_series_file(tmp_path / "dirty.csv", hour0 - H, [400.0, 500.0] + [400.0] * 46)
    body = {
        "semantics": {"gflops": 2.0},
        "requirements": {"model_format": None, "deadline_s": 6 * H},
        "deferrable": True,
    }
    run_id = 2**63 - 118_309  # ends ...881691 as the run id did
    async with hub_running() as (app, hub), aiohttp.ClientSession() as http:
        dirty_cfg = site_agent("dirty", hub, carbon_series=series)
        clean_cfg = site_agent("clean", hub, carbon_intensity_g_per_kwh=100.0)
        async with agent_daemon(dirty_cfg) as dirty, agent_daemon(clean_cfg) as _clean:
            await peer_online(http, dirty, "mesh-clean")
            held = []
            for _ in range(2):
                async with http.post(f"{dirty}/v1/tasks", json=body) as resp:
                    assert resp.status == 202, await resp.text()
                    task = (await resp.json())["task"]
                assert task["state"] == "deferred", task
                held.append(task)
            fed = app[FEDERATION]
            replies = [
                {"round": r, "train": 4, "train_failures": 0, "evaluate": e,
                 "evaluate_failures": 4 - e}
                for r, e in ((1, 4), (2, 3))
            ]  # fmt: skip
            fed.runs.append(
                RunRecord(
                    now - 60, run_id=run_id, ended_at=now - 5, status="completed", nodes=4,
                    rounds=replies,  # type: ignore[arg-type]
                )
            )  # fmt: skip
            learning = await get_json(http, f"{hub}/v1/learning")
            assert learning["runs"][-1]["run_id"] == str(run_id)  # a string in the JSON

            async def heard() -> bool:  # both sites' work, grids and mesh links with RTT
                fleet = await get_json(http, f"{hub}/v1/fleet")
                links = {(m["from"], m["to"]): m for m in fleet["mesh"]}
                sites = {c["agent_id"] for c in fleet["carbon"]}
                return (
                    {d["task_id"] for d in fleet["deferred"]} == {t["id"] for t in held}
                    and sites == {"dirty", "clean"}
                    and all(
                        links.get(k, {}).get("rtt_ms") is not None
                        for k in (("dirty", "clean"), ("clean", "dirty"))
                    )
                )

            await until(heard)
            page = await chromium.new_page(viewport={"width": 1400, "height": 1400})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(hub + "/")
            await page.wait_for_selector("#conn.up", timeout=10_000)

            # mesh: who trusts whom by hub agent name (not mesh id), online, with the RTT
            for a, b in (("dirty", "clean"), ("clean", "dirty")):
                row = page.locator(f'#mesh tr[data-from="{a}"][data-to="{b}"]')
                await row.wait_for(timeout=5_000)
                cells = await row.locator("td").all_inner_texts()
                assert cells[:3] == [a, b, "online"], cells
                assert re.fullmatch(r"[0-9.]+ ms", cells[3]), cells
                peers = page.locator(f'#fleet tr[data-agent="{a}"] td.peers')
                assert await peers.inner_text() == b

            # carbon: each site's intensity now and its next clean window
            # (the page names the date too when the hour is not today, UTC)
            clean_at = datetime.fromtimestamp(hour0 + H, UTC)
            today = clean_at.date() == datetime.now(UTC).date()
            next_hour = clean_at.strftime("%H:%M UTC" if today else "%Y-%m-%d %H:%M UTC")
            dirty_row = await page.locator('#carbon tr[data-site="dirty"] td').all_inner_texts()
            assert dirty_row == ["dirty", "500 g/kWh", f"400 g/kWh from {next_hour}"], dirty_row
            clean_row = await page.locator('#carbon tr[data-site="clean"] td').all_inner_texts()
            assert clean_row == ["clean", "100 g/kWh", "100 g/kWh now"], clean_row

            # deferred: both tasks held at the dirty site until its planned hour
            for task in held:
                cells = page.locator(f'#deferred tr[data-task="{task["id"]}"] td')
                cells_text = await cells.all_inner_texts()
                held_at = datetime.fromisoformat(task["held_until"])
                same_day = held_at.date() == datetime.now(UTC).date()
                until_hm = held_at.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC")
                assert cells_text[:3] == ["dirty", task["id"][:12], until_hm], cells_text

            # learning: the run id exactly, as a string, and the run's node count
            run = page.locator("#fl-runs tbody tr").first
            await run.wait_for(timeout=10_000)
            texts = await run.locator("td").all_inner_texts()
            assert texts[1] == str(run_id) and texts[3] == "4", texts
            assert texts[4] == "4/4 · 4/3", texts  # replies per round (train/evaluate)
            if os.environ.get("HETMESH_DASHBOARD_PNG"):
                await page.screenshot(path=os.environ["HETMESH_DASHBOARD_PNG"], full_page=True)

            # moves: the hub's re-evaluation moves the held work; each row ends done there
            moved = await get_json(http, f"{hub}/v1/reevaluation?fresh=1")
            ids = {m["task_id"] for m in moved["moves"] if m["move_id"]}
            assert ids == {t["id"] for t in held}, moved
            for task in held:
                outcome = page.locator(f'#moves tr[data-task="{task["id"]}"] td.outcome')
                await page.wait_for_function(
                    "sel => document.querySelector(sel)?.textContent === 'done on mesh-clean'",
                    arg=f'#moves tr[data-task="{task["id"]}"] td.outcome',
                    timeout=20_000,
                )
                route = page.locator(f'#moves tr[data-task="{task["id"]}"] td').nth(1)
                assert await route.inner_text() == "dirty → clean"
                assert await outcome.inner_text() == "done on mesh-clean"
            # moved work is no longer held at the dirty site
            await page.wait_for_selector("#deferred-empty:not([hidden])", timeout=10_000)
            assert errors == []
