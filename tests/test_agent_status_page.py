"""The agent's own status page in a real browser, with no hub configured at all.

The browser is the ``chromium`` fixture (tests/conftest.py), shared with the hub dashboard's
test. The agent is the real aiohttp application emulating an rk3588 board; the mesh test
runs two real agent daemons (``agent_daemon``) in one mesh on loopback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.web.api import make_app

pytestmark = pytest.mark.asyncio
Client = TestClient[Any, Any]
H = 3600.0
#: The conftest fixtures: agent_daemon, site_agent, carbon_series_file, peer_online.
Serve = Callable[[AgentConfig], AbstractAsyncContextManager[str]]
SiteAgent = Callable[..., AgentConfig]
WriteSeries = Callable[[Path, float, list[float]], Path]
PeerOnline = Callable[[aiohttp.ClientSession, str, str], Awaitable[None]]
QUICK = {"task_class": "quick", "semantics": {"gflops": 0.01}, "requirements": {"kinds": ["cpu"]}}
SLOW = {  # about 2 s on the emulated NPU
    "task_class": "slow",
    "semantics": {"gflops": 2000.0, "precision": "int8"},
    "requirements": {"kinds": ["npu"]},
}


async def test_status_page_shows_devices_tasks_and_no_hub(
    aiohttp_client: Any, chromium: Any, tmp_path: Path
) -> None:
    config = AgentConfig(
        data_dir=tmp_path / "agent", port=0, profile="rk3588", shutdown_grace_s=0.0
    )
    assert not config.hub_url
    client: Client = await aiohttp_client(make_app(config))
    ids = []
    for _ in range(3):
        resp = await client.post("/v1/tasks", json=QUICK)
        assert resp.status == 202, await resp.text()
        ids.append((await resp.json())["task"]["id"])
    doc = await (await client.get("/v1/status")).json()
    assert doc["ok"] and doc["health"]["hub"] is None
    page = await chromium.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(str(client.make_url("/")))
    await page.wait_for_selector("#conn.up", timeout=10_000)
    assert await page.title() == "hetmesh agent"  # the head shared with the dashboard
    assert await page.locator('meta[name="viewport"]').count() == 1
    assert await page.locator("#status").inner_text() == "ok"
    assert await page.locator("#token-form").is_hidden()  # on loopback no token is asked for
    # the shared stylesheet (base.css, one copy for the status page and the dashboard) applied
    background = "getComputedStyle(document.body).backgroundColor"
    assert await page.evaluate(background) == "rgb(246, 247, 249)"
    names = [d["id"] for d in doc["devices"]]
    rows = page.locator("#devices tbody tr")
    assert await rows.count() == len(names) and {"rk3588/cpu", "rk3588/npu"} <= set(names)
    assert all("%" in t for t in await page.locator("#devices .pct").all_inner_texts())
    for task_id in ids:  # every task finished, with its decision summary ("why here")
        cells = page.locator(f'#tasks tr[data-task="{task_id}"] td')
        await page.wait_for_selector(f'#tasks tr[data-task="{task_id}"] td.task-done')
        texts = await cells.all_inner_texts()
        assert texts[2] == "rk3588/cpu" and texts[4].startswith("rk3588/cpu: est"), texts
    hub = await page.locator('#hub dd[data-key="hub"]').inner_text()
    assert "none configured" in hub
    policy = await page.locator('#policy dd[data-key="policy"]').inner_text()
    assert policy == f"{doc['policy']['name']}@{doc['policy']['version']}"

    # a long task shows on its device while it runs, and the device's utilization rises
    resp = await client.post("/v1/tasks", json=SLOW)
    slow = (await resp.json())["task"]["id"]
    npu = '#devices tr[data-device="rk3588/npu"]'
    await page.wait_for_selector(f'{npu} td:text-is("{slow[:12]}")', timeout=10_000)
    await page.wait_for_function(
        "sel => parseInt(document.querySelector(sel + ' .pct').textContent) > 0",
        arg=npu,
        timeout=10_000,
    )
    assert errors == []


async def test_status_page_loads_as_a_skeleton_then_shows_mesh_and_deferred_work(
    chromium: Any,
    tmp_path: Path,
    agent_daemon: Serve,
    site_agent: SiteAgent,
    carbon_series_file: WriteSeries,
    peer_online: PeerOnline,
) -> None:
    """Two real agent daemons in one mesh on loopback; the "dirty" one's grid (500 g/kWh this
    hour, 400 the next ones) holds deferrable work for a later hour."""
    now = time.time()
    hour0 = now - now % H
    series = carbon_series_file(tmp_path / "dirty.csv", hour0 - H, [400.0, 500.0] + [400.0] * 46)
    dirty_cfg = site_agent("dirty", "", carbon_series=series)
    clean_cfg = site_agent("clean", "", carbon_intensity_g_per_kwh=100.0)
    body = {
        "semantics": {"gflops": 2.0},
        "requirements": {"model_format": None, "deadline_s": 6 * H},
        "deferrable": True,
    }
    async with (
        aiohttp.ClientSession() as http,
        agent_daemon(dirty_cfg) as dirty,
        agent_daemon(clean_cfg) as _clean,
    ):
        await peer_online(http, dirty, "mesh-clean")
        held = {}
        for _ in range(2):
            async with http.post(f"{dirty}/v1/tasks", json=body) as resp:
                assert resp.status == 202, await resp.text()
                task = (await resp.json())["task"]
            assert task["state"] == "deferred" and task["held_until"], task
            held[task["id"]] = task["held_until"]

        page = await chromium.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # hold the first /v1/status answer back to see the page before it has any data
        release = asyncio.Event()

        async def hold_first(route: Any) -> None:
            await release.wait()  # set before the page polls again: holds the first only
            await route.continue_()

        await page.route("**/v1/status", hold_first)
        await page.goto(dirty + "/", wait_until="domcontentloaded")
        assert await page.evaluate("document.body.classList.contains('loading')")
        assert await page.locator("#conn").inner_text() == "loading…"
        assert await page.locator("#tasks tbody tr.skel").count() == 2
        assert await page.locator("#mesh tbody tr.skel").count() == 1
        assert not await page.locator("#tasks-empty").is_visible()  # not "No tasks yet."
        assert not await page.locator("#deferred-empty").is_visible()
        release.set()
        # data within one second of the agent's first answer
        await page.wait_for_selector("#conn.up", timeout=1_000)
        assert not await page.evaluate("document.body.classList.contains('loading')")
        assert await page.locator(".skel").count() == 0

        # the mesh panel: the peer by its mesh id, online, with the heartbeat's round trip
        peer = page.locator('#mesh tr[data-peer="mesh-clean"]')
        assert await peer.locator("td.state").get_attribute("data-state") == "online"
        await page.wait_for_function(
            "() => /^[0-9.]+ ms$/.test(document.querySelector("
            "'#mesh tr[data-peer=\"mesh-clean\"] td.rtt').textContent)",
            timeout=10_000,
        )
        assert await page.locator("#mesh-id").inner_text() == "as mesh-dirty"

        # deferred work: each held task with its held_until, and counted in the queue figure
        for task_id, until_iso in held.items():
            row = page.locator(f'#deferred tr[data-task="{task_id}"] td')
            assert await row.all_inner_texts() == [task_id[:12], until_iso]
        queue = await page.locator('#health dd[data-key="queue"]').inner_text()
        assert queue.startswith("2 queued: 0 waiting, 2 deferred;"), queue
        tasks = await page.locator('#health dd[data-key="tasks"]').inner_text()
        assert "2 deferred" in tasks, tasks
        assert errors == []


async def test_status_page_asks_for_the_api_token_once_and_keeps_it_for_the_tab(
    aiohttp_client: Any, chromium: Any, tmp_path: Path
) -> None:
    """``[api] auth = "token"``: the page's files load, its data call is refused until the
    operator gives the token; a wrong one asks again; the right one is sent from then on."""
    config = AgentConfig(
        data_dir=tmp_path / "agent", port=0, profile="rk3588", shutdown_grace_s=0.0, auth="token"
    )
    client: Client = await aiohttp_client(make_app(config))
    token = config.token_path.read_text().strip()
    page = await chromium.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    sent: list[str | None] = []
    page.on("request", lambda r: sent.append(r.headers.get("authorization")))
    await page.goto(str(client.make_url("/")))
    form = page.locator("#token-form")
    await form.wait_for(state="visible", timeout=10_000)
    assert await page.locator("#conn").inner_text() == "token needed"
    assert str(config.token_path) in await page.locator("#token-why").inner_text()
    assert await page.evaluate("document.body.classList.contains('loading')")  # no data shown

    await page.fill("#token", "not-the-token-0123456789")
    await page.click("#token-form button")
    await form.wait_for(state="visible", timeout=10_000)  # refused: asked again
    assert "wrong" in await page.locator("#token-why").inner_text()

    await page.fill("#token", token)
    await page.click("#token-form button")
    await page.wait_for_selector("#conn.up", timeout=10_000)
    assert await page.locator("#status").inner_text() == "ok"
    assert await form.is_hidden()
    assert await page.evaluate("sessionStorage.getItem('hetmesh-agent-token')") == token
    await page.reload()  # the same tab keeps it: no question asked again
    await page.wait_for_selector("#conn.up", timeout=10_000)
    assert await form.is_hidden()
    assert f"Bearer {token}" in sent
    assert errors == []
