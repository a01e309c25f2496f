"""Hub re-evaluation: agents report grid forecasts and deferred work; the hub finds paying moves."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub.agent_client import HubClient, HubRejected
from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.reevaluate import Reevaluator, parse_report
from edge_agent.agent.carbon import CarbonSource
from edge_agent.agent.deferral import Deferrer
from edge_agent.carbon_series import grams
from edge_agent.errors import InvalidInput
from edge_agent.placement import (
    Placer,
    Requirements,
    Semantics,
    TaskContract,
    devices_from_profiles,
)

pytestmark = pytest.mark.asyncio
Client = TestClient[Any, Any]
TOKEN = "join-me"
H = 3600.0


async def _nothing(task_id: str) -> None:
    return None


def site(g: float, held: int = 0, now: float | None = None) -> Deferrer:
    """An agent's Deferrer on a constant grid of ``g``, holding ``held`` deferrable tasks."""
    clock = time.time() if now is None else now
    d = Deferrer(
        Placer(devices_from_profiles(["rk3588"])), CarbonSource(g), _nothing, clock=lambda: clock
    )
    for i in range(held):
        contract = TaskContract(Semantics(gflops=50.0), Requirements(deadline_s=8 * H))
        plan = d.plan(contract, clock + 8 * H)
        assert plan is not None
        d.hold(f"task-{i}", plan)
    return d


def body(d: Deferrer, utilization: float) -> dict[str, Any]:
    dev = {"id": "rk3588/cpu", "kind": "cpu", "utilization": utilization, "health": "online"}
    return {"status": "ok", "devices": [dev], "peers": [], **d.report()}


async def test_moves_that_pay_through_the_hub_api(aiohttp_client: Any, tmp_path: Path) -> None:
    config = HubConfig(data_dir=tmp_path / "hub", port=0, join_token=TOKEN, admin_token="adm")
    client: Client = await aiohttp_client(make_app(config))
    agents = {}
    for agent_id in ("dirty", "clean", "busy", "mild"):
        hc = HubClient(str(client.make_url("")), agent_id, client.session)
        await hc.enrol(TOKEN, {}, board="rk3588")
        agents[agent_id] = hc
    dirty = site(400.0, held=2)
    await agents["dirty"].heartbeat(body(dirty, 0.1))
    await agents["clean"].heartbeat(body(site(100.0), 0.2))
    await agents["busy"].heartbeat(body(site(20.0), 0.95))  # cleanest, but no room
    await agents["mild"].heartbeat(body(site(350.0), 0.0))  # not clearly lower (< 20 %)
    doc = await (await client.get("/v1/reevaluation?fresh=1")).json()
    assert doc["ok"] and doc["sites"] == 4 and doc["deferred"] == 2 and doc["executed"] is False
    assert len(doc["moves"]) == 2
    for move in doc["moves"]:
        assert move["origin"] == "dirty" and move["target"] == "clean"
        plan = dirty._plans[move["task_id"]]
        assert move["origin_carbon_g"] == pytest.approx(grams(plan.energy_j, 400.0))
        assert move["saving_g"] == pytest.approx(grams(plan.energy_j, 300.0))
        assert move["saving_fraction"] == pytest.approx(0.75)
    assert doc["saving_g"] == pytest.approx(sum(m["saving_g"] for m in doc["moves"]))
    latest = await (await client.get("/v1/reevaluation")).json()
    assert latest["moves"] == doc["moves"]  # the last evaluation is kept
    bad = body(dirty, 0.1)
    bad["deferred"][0]["energy_j"] = "lots"
    resp = await agents["dirty"].session.post(
        str(client.make_url("/v1/agents/dirty/heartbeat")), data=b"{}"
    )
    assert resp.status == 401  # unsigned: refused before any report is read
    with pytest.raises(HubRejected, match=r"deferred\[0\]\.energy_j"):
        await agents["dirty"].heartbeat(bad)


async def test_forecast_window_and_deadline_limit_the_move() -> None:
    now = 1000 * H
    ev = Reevaluator(lambda: now)
    origin = {
        "carbon": {"hour": 1000, "forecast": [300.0] * 24},
        "devices": [],
        "deferred": [
            {
                "id": "t",
                "energy_j": 3.6e6,
                "deadline_at": now + 4 * H,
                "not_before": now,
                "latest_start": now + 2 * H - 1,
                "g_per_kwh": 300.0,
            }
        ],
    }
    # the target is clean only from hour 1003 on: after the task's latest start
    forecast = [290.0, 280.0, 280.0] + [10.0] * 20
    ev.observe("o", origin)
    ev.observe("t", {"carbon": {"hour": 1000, "forecast": forecast}})
    assert ev.evaluate({"o", "t"})["moves"] == []
    forecast[1] = 60.0  # clean in hour 1001: in the window
    ev.observe("t", {"carbon": {"hour": 1000, "forecast": forecast}})
    [move] = ev.evaluate({"o", "t"})["moves"]
    assert move["target_g_per_kwh"] == 60.0 and move["start_at"] == now + H
    assert move["saving_g"] == pytest.approx(240.0)  # 1 kWh x (300 - 60) g
    assert ev.evaluate({"o"})["moves"] == []  # the target is not current
    with pytest.raises(InvalidInput, match=r"body\.carbon\.forecast"):
        parse_report({"carbon": {"hour": 1, "forecast": []}}, now)
