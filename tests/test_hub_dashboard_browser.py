"""The dashboard in a real browser: Playwright driving Debian's chromium against a live hub.

The browser comes from the ``chromium`` fixture (tests/conftest.py), which says when and why
it skips. ``HETMESH_DASHBOARD_PNG=docs/dashboard.png`` keeps the screenshot.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub.agent_client import HubClient
from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.sim_agent import SimulatedAgent, board_devices

Client = TestClient[Any, Any]


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
