"""The dashboard in a real browser: Playwright driving Debian's chromium against a live hub.

Needs ``apt-get install chromium`` and ``pip install playwright`` (no ``playwright install``:
the system browser is used). Skipped with the reason when either is missing, unless
``HETMESH_REQUIRE_BROWSER=1`` (set in CI), where a missing browser fails the test.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub.agent_client import HubClient
from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.sim_agent import SimulatedAgent, board_devices

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
Client = TestClient[Any, Any]


def _browser_or_skip() -> Any:
    missing = None
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        missing = "the playwright package is not installed (pip install playwright)"
    if missing is None and not shutil.which(CHROMIUM):
        missing = f"{CHROMIUM} is missing (apt-get install chromium)"
    if missing is not None:
        if os.environ.get("HETMESH_REQUIRE_BROWSER") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    return async_playwright


async def _agent(client: Client, name: str, board: str, site: str) -> SimulatedAgent:
    hc = HubClient(str(client.make_url("")), name, client.session)
    await hc.enrol("tok", {"site": site}, board=board)
    devices = board_devices(board)
    for i, d in enumerate(devices):
        d["utilization"] = round(0.15 + 0.2 * i, 2)
    return SimulatedAgent(hc, devices)


@pytest.mark.asyncio
async def test_dashboard_shows_fleet_and_an_agent_going_offline(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    async_playwright = _browser_or_skip()
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
        lab.record("decision", {"task_id": f"t{n + 1:03d}", "device": device, "why_here": why}, 0)
    await lab.flush()
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
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = await browser.new_page(viewport={"width": 1280, "height": 820})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(url)
            for name in ("rk3588-lab", "orin-dock-2"):
                await page.wait_for_selector(
                    f'tr[data-agent="{name}"] td.state[data-state="online"]', timeout=10_000
                )
            await page.wait_for_selector("#conn.up", timeout=5_000)
            assert await page.locator("#devices tbody tr").count() == len(lab.devices) + len(
                edge.devices
            )
            assert "2.1 ms" in await page.locator("#decisions").inner_text()
            await page.wait_for_selector('#fleet td:text("edge@1")', timeout=10_000)
            await edge.stop()
            await page.wait_for_selector(
                'tr[data-agent="orin-dock-2"] td.state[data-state="offline"]', timeout=10_000
            )
            lab_state = page.locator('tr[data-agent="rk3588-lab"] td.state')
            assert await lab_state.get_attribute("data-state") == "online"
            assert "stale" in await page.locator("#devices").inner_text()
            shot = tmp_path / "dashboard.png"
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            target = os.environ.get("HETMESH_DASHBOARD_PNG")
            if target:
                shutil.copyfile(shot, target)
            assert errors == []
            await browser.close()
    finally:
        await lab.stop()
        await edge.stop()
        await asyncio.sleep(0)
