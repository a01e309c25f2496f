"""Hub re-evaluation: agents report grid forecasts and deferred work; the hub finds paying moves."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.reevaluate import Reevaluator
from cloud_hub.hub.site_report import parse_report
from edge_agent.agent.core.deferral import Deferrer
from edge_agent.agent.sensing.carbon import CarbonSource
from edge_agent.carbon_series import grams
from edge_agent.errors import InvalidInput
from edge_agent.placement import (
    Placer,
    Requirements,
    Semantics,
    TaskContract,
    devices_from_profiles,
)
from edge_agent.protocol.hub_client import HubClient, HubRejected

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
    assert doc["ok"] and doc["sites"] == 4 and doc["deferred"] == 2
    assert len(doc["moves"]) == 2
    assert doc["executed"] == []  # no site is in the mesh: nothing can be forwarded
    for move in doc["moves"]:
        assert move["origin"] == "dirty" and move["target"] == "clean"
        assert move["executable"] is False and move["move_id"] is None and move["to"] is None
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


def _deferred(task_id: str, now: float, g: float = 300.0) -> dict[str, Any]:
    return {
        "id": task_id,
        "energy_j": 3.6e6,
        "deadline_at": now + 4 * H,
        "not_before": now + H,
        "latest_start": now + 3 * H,
        "g_per_kwh": g,
    }


def _site(g: float, mesh_id: str | None, peers: list[str]) -> dict[str, Any]:
    return {"carbon": {"hour": 1000, "forecast": [g] * 24}, "mesh_id": mesh_id, "peers": peers}


async def test_moves_are_issued_to_mesh_peers_once_and_settled_by_outcomes() -> None:
    now = [1000 * H]
    ev = Reevaluator(lambda: now[0], interval_s=60.0)
    dirty = {**_site(300.0, "m-dirty", ["m-clean"]), "deferred": [_deferred("t1", now[0])]}
    ev.observe("dirty", dirty)
    ev.observe("clean", _site(50.0, "m-clean", ["m-dirty"]))
    ev.observe("far", _site(10.0, "m-far", []))  # cleaner, but not a peer of the origin
    doc = ev.evaluate({"dirty", "clean", "far"})
    [move] = doc["moves"]
    # the best target is "far", which the origin cannot reach: listed, not issued
    assert move["target"] == "far" and not move["executable"] and move["move_id"] is None
    ev.observe("far", _site(10.0, None, []))  # and without the mesh at all
    ev.observe("clean", _site(50.0, "m-clean", ["m-dirty"]))
    doc = ev.evaluate({"dirty", "clean"})
    [move] = doc["moves"]
    assert move["to"] == "m-clean" and move["executable"] and move["move_id"]
    [pending] = ev.pending("dirty")
    assert pending["id"] == move["move_id"] and pending["task_id"] == "t1"
    assert pending["to"] == "m-clean" and pending["reason"].startswith("moved by hub")
    assert pending["saving_g"] == pytest.approx(250.0) and ev.pending("clean") == []
    again = ev.evaluate({"dirty", "clean"})  # issued once: the same move, not a second one
    assert again["moves"][0]["move_id"] == move["move_id"] and len(ev.records) == 1
    # the origin refuses: the move is settled and never issued again
    refusal = {"id": move["move_id"], "state": "refused", "reason": "m-clean is not trusted"}
    ev.observe("clean", {**_site(50.0, "m-clean", []), "move_outcomes": [refusal]})
    assert ev.records[move["move_id"]]["state"] == "issued"  # only its origin settles it
    ev.observe("dirty", {**dirty, "move_outcomes": [refusal]})
    assert ev.pending("dirty") == []
    ev.evaluate({"dirty", "clean"})
    [record] = ev.view()["executed"]
    assert record["state"] == "refused" and record["reason"] == "m-clean is not trusted"
    assert ev.pending("dirty") == []
    with pytest.raises(InvalidInput, match=r"move_outcomes\[0\]\.state"):
        ev.observe("dirty", {**dirty, "move_outcomes": [{"id": "x", "state": "maybe"}]})


async def test_an_accepted_move_ends_done_and_an_unanswered_one_expires() -> None:
    now = [1000 * H]
    ev = Reevaluator(lambda: now[0], interval_s=60.0)
    work = [_deferred("a", now[0]), _deferred("b", now[0])]
    ev.observe("dirty", {**_site(300.0, "m-dirty", ["m-clean"]), "deferred": work})
    ev.observe("clean", _site(50.0, "m-clean", []))
    ids = {m["task_id"]: m["move_id"] for m in ev.evaluate({"dirty", "clean"})["moves"]}
    outcomes = [
        {"id": ids["a"], "state": "accepted", "reason": "forwarding"},
    ]
    ev.observe("dirty", {**_site(300.0, "m-dirty", ["m-clean"]), "move_outcomes": outcomes})
    assert [p["task_id"] for p in ev.pending("dirty")] == ["b"]
    outcomes = [{"id": ids["a"], "state": "done", "ran_on": "m-clean"}]
    ev.observe("dirty", {**_site(300.0, "m-dirty", ["m-clean"]), "move_outcomes": outcomes})
    now[0] += 61  # "b" was not answered and its origin no longer reports it
    ev.evaluate({"dirty", "clean"})
    states = {r["task_id"]: (r["state"], r["ran_on"]) for r in ev.view()["executed"]}
    assert states == {"a": ("done", "m-clean"), "b": ("expired", None)}


async def test_queued_work_is_judged_on_the_hour_now() -> None:
    now = 1000 * H
    ev = Reevaluator(lambda: now)
    queued = {"id": "q", "energy_j": 3.6e6, "g_per_kwh": 300.0, "deadline_at": None}
    ev.observe("o", {**_site(300.0, "m-o", ["m-t"]), "queued": [queued]})
    # the target is clean only from the next hour on: no use to a task that runs now
    ev.observe("t", {"carbon": {"hour": 1000, "forecast": [290.0] + [10.0] * 23}, "mesh_id": "m-t"})
    doc = ev.evaluate({"o", "t"})
    assert doc["queued"] == 1 and doc["deferred"] == 0 and doc["moves"] == []
    ev.observe("t", {"carbon": {"hour": 1000, "forecast": [100.0] * 24}, "mesh_id": "m-t"})
    [move] = ev.evaluate({"o", "t"})["moves"]
    assert move["queued"] and move["start_at"] == now and move["saving_g"] == pytest.approx(200.0)


async def test_reevaluate_interval_is_configured_and_checked(tmp_path: Path) -> None:
    from cloud_hub.hub.config import ConfigError, load_config

    toml = tmp_path / "hub.toml"
    toml.write_text("[hub]\nreevaluate_s = 30\n")
    assert load_config(toml, env={}).reevaluate_s == 30.0
    assert load_config(None, env={}).reevaluate_s == 300.0
    with pytest.raises(ConfigError, match="reevaluate_s must be a finite number > 0"):
        load_config(toml, env={"CLOUD_HUB_REEVALUATE_S": "0"})
    with pytest.raises(ConfigError, match="reevaluate_s: expected a number"):
        toml.write_text('[hub]\nreevaluate_s = "often"\n')
        load_config(toml, env={})
