"""The agent's own status page in a real browser, with no hub configured at all.

The browser is the ``chromium`` fixture (tests/conftest.py), shared with the hub dashboard's
test. The agent is the real aiohttp application emulating an rk3588 board.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from edge_agent.agent.api import make_app
from edge_agent.agent.config import AgentConfig

pytestmark = pytest.mark.asyncio
Client = TestClient[Any, Any]
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
    assert await page.locator("#status").inner_text() == "ok"
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
