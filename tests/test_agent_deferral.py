"""Deferrable tasks: the shared window planner, the agent's Deferrer, and the daemon end to end."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.deferral import Deferral, Deferrer
from edge_agent.agent.sensing.carbon import CarbonSource
from edge_agent.agent.web.api import AGENT, make_app
from edge_agent.carbon_series import Series, load_series
from edge_agent.cli_agent_views import _task_rows
from edge_agent.placement import (
    Placer,
    Requirements,
    Semantics,
    TaskContract,
    devices_from_profiles,
)
from edge_agent.scheduling.window import HORIZON_H, HOUR_S, WindowPlanner

H = HOUR_S
#: The conftest fixtures: ``carbon_series_file`` (hourly CSV), ``emulated_agent``, ``until``.
WriteSeries = Callable[[Path, float, list[float]], Path]
MakeConfig = Callable[..., AgentConfig]
Until = Callable[..., Awaitable[Any]]


def curve(values: dict[int, float], default: float = 400.0) -> Any:
    return lambda hour: values.get(hour, default)


def test_planner_picks_the_cleanest_safe_hour() -> None:
    p = WindowPlanner(room_s=3600.0, safety=2.0, margin_s=600.0)
    w = p.choose(100 * H + 60, 60.0, 110 * H, curve({103: 100.0, 109: 50.0}))
    # hour 109 is cleaner, but 109h + 2 x 60 s + 600 s ends past the deadline (110h)? no:
    # 109h + 720 s <= 110h, so 109 is safe and wins
    assert (w.hour, w.release_s, w.forecast_g_per_kwh, w.guaranteed) == (109, 109 * H, 50.0, True)
    assert w.latest_start_s == 110 * H - 2 * 60 - 600
    tight = p.choose(100 * H, 60.0, 109 * H + 500, curve({103: 100.0, 109: 50.0}))
    assert tight.hour == 103  # 109 is not safe for this deadline


def test_planner_flat_forecast_releases_now_and_no_safe_hour_is_unguaranteed() -> None:
    p = WindowPlanner(room_s=3600.0)
    now = 10 * H + 5
    flat = p.choose(now, 10.0, 20 * H, curve({}))
    assert flat.release_s == now and flat.guaranteed
    rushed = p.choose(now, 600.0, now + 900, curve({}))
    assert rushed.release_s == now and not rushed.guaranteed


def test_planner_respects_load_room_and_the_load_forecast() -> None:
    p = WindowPlanner(room_s=1000.0, safety=1.0, margin_s=0.0)
    full = curve({5: 900.0})  # the predictor expects hour 5 nearly full
    w = p.choose(0.0, 200.0, 10 * H, curve({5: 10.0, 7: 20.0}), full)
    assert w.hour == 7
    # seasonal-naive from history: yesterday's hour 7 was full (31 is skipped although
    # cleaner), yesterday's hour 5 idle (29 fits)
    p.observe(7, 950.0)
    p.observe(5, 0.0)
    w2 = p.choose(24 * H, 200.0, 34 * H, curve({29: 10.0, 31: 5.0}))
    assert w2.hour == 29


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1000), min_size=48, max_size=48),
    st.lists(
        st.tuples(st.floats(0, 20 * H), st.floats(1, 1800), st.floats(0.5 * H, 24 * H)),
        min_size=1,
        max_size=30,
    ),
)
def test_planner_guaranteed_releases_keep_every_deadline(
    carbon: list[float], tasks: list[tuple[float, float, float]]
) -> None:
    """Held work run serially at its estimate from each release never ends past a deadline."""
    p = WindowPlanner(room_s=2 * H, safety=1.5, margin_s=60.0)
    holds = []
    for now, est, slack in sorted(tasks):
        w = p.choose(now, est, now + slack, lambda h: carbon[h % 48])
        assert now <= w.release_s <= max(now, w.latest_start_s)
        holds.append((w.release_s, est, now + slack, w.guaranteed))
    # serial execution at the estimate, in release order: guaranteed ones meet deadlines
    clock = 0.0
    for release, est, deadline, guaranteed in sorted(holds):
        clock = max(clock, release) + est
        if guaranteed and all(g for *_, g in holds):
            assert clock <= deadline


def test_planner_keeps_the_slack_of_work_held_into_the_same_hour() -> None:
    """Hypothesis found it: B joined A's release hour and, run first, pushed A past its deadline."""
    p = WindowPlanner(room_s=2 * H, safety=1.5, margin_s=60.0)
    carbon = lambda h: 1.0 if h < 14 else 0.0  # noqa: E731
    a = p.choose(0.0, 263.0, 50860.0, carbon)
    assert a.hour == 14 and a.guaranteed  # 5.5 s of slack left in hour 14
    b = p.choose(1.0, 202.0, 51172.0, carbon)
    assert b.hour != 14  # (released at once: its est would eat A's slack in any later hour)
    # whichever of the two runs first, both end by their deadlines
    for first, second in ((a, b), (b, a)):
        ests = {id(a): (263.0, 50860.0), id(b): (202.0, 51172.0)}
        clock = 0.0
        for w in (first, second):
            est, deadline = ests[id(w)]
            clock = max(clock, w.release_s) + est
            assert clock <= deadline


def test_a_far_deadline_plans_within_the_horizon() -> None:
    """Found from outside: deadline_s 1e12 made one submission plan every hour to it (a hang)."""
    p = WindowPlanner(room_s=2 * H, safety=1.5, margin_s=60.0)
    asked: list[int] = []

    def carbon(h: int) -> float:
        asked.append(h)
        return 100.0 + h % 24

    for i in range(200):  # held work piles up: each plan stays bounded all the same
        w = p.choose(i * 60.0, 30.0, 1e12, carbon)
        assert w.guaranteed and w.release_s >= i * 60.0
    assert max(asked) <= HORIZON_H + 4 and len(asked) <= 200 * (HORIZON_H + 1)


def test_backlog_carries_over_idle_hours() -> None:
    p = WindowPlanner(room_s=10 * H)
    p.planned = {0: 3 * H, 1: 0.5 * H, 5: 2 * H}
    # hour 0 leaves 2 h, hour 1 adds 0.5 h and drains 1 h (1.5 h), idle 2..4 drain it all;
    # hour 5 leaves 1 h, which hours 6 and 7 drain
    assert [p._backlog(h) for h in (0, 1, 2, 3, 5, 6, 7, 8)] == [
        0.0, 2 * H, 1.5 * H, 0.5 * H, 0.0, 1 * H, 0.0, 0.0
    ]  # fmt: skip


def deferrable(deadline_s: float) -> TaskContract:
    return TaskContract(Semantics(gflops=1.0), Requirements(deadline_s=deadline_s))


MARCH_1 = datetime(2031, 3, 1, tzinfo=UTC).timestamp()


@pytest.fixture
def march_grid(tmp_path: Path, carbon_series_file: WriteSeries) -> Series:
    """A grid from 2031-03-01 00:00 UTC: 388, 300, 212, 250, 400 and 50 g/kWh, hour by hour."""
    grid = [388.0, 300.0, 212.0, 250.0, 400.0, 50.0]
    return load_series(carbon_series_file(tmp_path / "g.csv", MARCH_1, grid))


def test_deferrer_plans_holds_explains_and_releases(march_grid: Series) -> None:
    start, series = MARCH_1, march_grid
    clock = [start + 600.0]
    released: list[str] = []

    async def release(task_id: str) -> None:
        released.append(task_id)

    placer = Placer(devices_from_profiles(["rk3588"]))
    d = Deferrer(placer, CarbonSource(0.0, series), release, clock=lambda: clock[0])
    plan = d.plan(deferrable(4 * H), clock[0] + 4 * H)  # hour 5 (50 g) is past the deadline
    assert plan is not None and plan.not_before == start + 2 * H
    assert plan.forecast_g_per_kwh == 212 and plan.now_g_per_kwh == 388 and plan.guaranteed
    assert plan.explain() == "deferred until 2031-03-01 02:00 UTC, carbon 212 vs 388 g/kWh now"
    est = placer.preview(deferrable(4 * H)).service_s
    assert plan.estimate_s == pytest.approx(est)
    assert plan.not_before <= plan.latest_start <= clock[0] + 4 * H - est - d.planner.margin_s
    assert Deferral.from_dict(plan.to_dict()) == plan
    d.hold("t1", plan)
    assert d.due() == [] and d.next_due() == plan.not_before
    clock[0] = plan.not_before
    assert d.due() == ["t1"] and len(d) == 0
    # no carbon configured: every hour alike, so it is released at once
    flat = Deferrer(placer, None, release, clock=lambda: clock[0]).plan(
        deferrable(4 * H), clock[0] + 4 * H
    )
    assert flat is not None and flat.not_before == clock[0] and flat.forecast_g_per_kwh is None


@pytest.mark.asyncio
async def test_agent_defers_persists_across_restart_and_releases(
    aiohttp_client: Any,
    tmp_path: Path,
    carbon_series_file: WriteSeries,
    emulated_agent: MakeConfig,
    until: Until,
) -> None:
    now = time.time()
    hour0 = now - now % H
    # dirty now, clean two hours on, dirty again after: the task waits for hour0 + 2h
    grid = [300.0] * 24 + [388.0, 300.0, 212.0, 390.0]
    series = carbon_series_file(tmp_path / "grid.csv", hour0 - 24 * H, grid)
    config = emulated_agent(carbon_series=series, carbon_update_s=1.0)
    body = {
        "semantics": {"gflops": 0.5},
        "requirements": {"model_format": None, "deadline_s": 6 * H},
        "deferrable": True,
    }
    client = await aiohttp_client(make_app(config))
    bad = await client.post("/v1/tasks", json={**body, "requirements": {"model_format": None}})
    assert bad.status == 400 and "deadline_s > 0" in (await bad.json())["error"]
    doc = await (await client.post("/v1/tasks", json=body)).json()
    task = doc["task"]
    assert task["state"] == "deferred" and task["not_before"] == hour0 + 2 * H
    explain = await (await client.get(f"/v1/tasks/{task['id']}/explain")).json()
    assert explain["state"] == "deferred" and explain["placed"] is False
    when = datetime.fromtimestamp(hour0 + 2 * H, UTC).strftime("%H:%M UTC")
    assert f"{when}, carbon 212 vs" in explain["why_here"]
    row = _task_rows([task])[1]
    assert "deferred until" in row and task["held_until"] in row
    assert task["held_until"] == datetime.fromtimestamp(hour0 + 2 * H, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    # once it has run, the hold stays in HELD UNTIL and never reads as an error
    done = {**task, "state": "done", "error": None}
    assert "deferred until" not in _task_rows([done])[1]
    assert task["held_until"] in _task_rows([done])[1]
    # a second one, cancelled while held
    other = (await (await client.post("/v1/tasks", json=body)).json())["task"]
    assert (await client.post(f"/v1/tasks/{other['id']}:cancel")).status == 200
    planner = client.app[AGENT].deferrer.planner
    held_s = sum(planner.planned.values())
    keyed = [
        await (await client.post("/v1/tasks", json=body, headers={"Idempotency-Key": "k"})).json()
        for _ in range(2)
    ]
    assert [k["created"] for k in keyed] == [True, False]
    one = keyed[0]["task"]["deferral"]["estimate_s"]
    assert sum(planner.planned.values()) == pytest.approx(held_s + one)  # the retry held nothing
    assert (await client.post(f"/v1/tasks/{keyed[0]['task']['id']}:cancel")).status == 200
    await client.close()

    client = await aiohttp_client(make_app(config))  # restart: still held, not run
    agent = client.app[AGENT]
    assert agent.deferrer.held() == {task["id"]: hour0 + 2 * H}
    row = (await (await client.get(f"/v1/tasks/{task['id']}")).json())["task"]
    assert row["state"] == "deferred"
    agent.deferrer.clock = lambda: hour0 + 2 * H + 1  # its hour has come
    agent.deferrer.poke()

    async def done() -> dict[str, Any] | None:
        row = (await (await client.get(f"/v1/tasks/{task['id']}")).json())["task"]
        return row if row["state"] == "done" else None

    row = await until(done)
    assert row["state"] == "done" and not agent.deferrer.held()
    explain = await (await client.get(f"/v1/tasks/{task['id']}/explain")).json()
    assert explain["placed"] and explain["deferral"]["not_before"] == hour0 + 2 * H
    assert math.isfinite(explain["estimate"]["carbon_g"])


@pytest.mark.asyncio
async def test_a_moved_task_keeps_its_deadline_and_goes_to_its_peer_at_the_targets_hour(
    march_grid: Series, until: Until
) -> None:
    start, series = MARCH_1, march_grid
    clock = [start + 600.0]
    released: list[str] = []
    forwarded: list[tuple[str, str | None]] = []

    async def release(task_id: str) -> None:
        released.append(task_id)

    async def forward(task_id: str, plan: Deferral) -> None:
        forwarded.append((task_id, plan.moved_to))

    placer = Placer(devices_from_profiles(["rk3588"]))
    d = Deferrer(placer, CarbonSource(0.0, series), release, clock=lambda: clock[0])
    plan = d.plan(deferrable(4 * H), clock[0] + 4 * H)
    assert plan is not None and plan.not_before == start + 2 * H
    d.hold("t1", plan)
    planned = sum(d.planner.planned.values())
    assert [w["id"] for w in d.report()["deferred"]] == ["t1"]
    # the target's clean hour is after the task's latest safe start: refused, plan unchanged
    with pytest.raises(ValueError, match="latest safe start"):
        d.moved("t1", "peer-b", plan.latest_start + 1, "mv-1", "moved by hub re-evaluation")
    with pytest.raises(ValueError, match="no longer deferred"):
        d.moved("nope", "peer-b", clock[0], "mv-1", "moved")
    moved = d.moved("t1", "peer-b", start + H, "mv-1", "moved by hub re-evaluation (saving 1 g)")
    assert moved.not_before == start + H and moved.latest_start == plan.latest_start
    assert moved.deadline_at == plan.deadline_at and moved.moved_to == "peer-b"
    assert "then forwarded to peer-b: moved by hub re-evaluation" in moved.explain()
    assert Deferral.from_dict(moved.to_dict()) == moved
    d.move("t1", moved)
    assert d.held() == {"t1": start + H}
    assert sum(d.planner.planned.values()) < planned  # its room here is freed
    assert d.report()["deferred"] == []  # never offered to the hub twice
    with pytest.raises(ValueError, match="moved to peer-b already"):
        d.moved("t1", "peer-c", start + H, "mv-2", "moved")
    # at the target's hour the task goes to the peer, not the local queue; without a
    # forward hook (no mesh) it would be queued here, still before its latest start
    d.forward = forward
    runner = asyncio.create_task(d.run(poll_s=0.01))
    try:
        clock[0] = start + H
        d.poke()
        await until(lambda: forwarded)
    finally:
        runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
    assert forwarded == [("t1", "peer-b")] and released == []
    # after a restart the moved plan is held again, its room not counted here
    again = Deferrer(placer, CarbonSource(0.0, series), release, clock=lambda: clock[0])
    again.restore("t1", moved)
    assert again.held() == {"t1": start + H} and sum(again.planner.planned.values()) == 0


def test_the_heartbeat_reports_queued_work_bounded() -> None:
    clock = 1000 * H
    placer = Placer(devices_from_profiles(["rk3588"]))

    async def release(task_id: str) -> None:
        return None

    d = Deferrer(placer, CarbonSource(321.0), release, clock=lambda: clock)
    contract = TaskContract(Semantics(gflops=1.0), Requirements(), task_class="detect")
    waiting = [(f"q{i}", contract, math.inf if i else clock + H) for i in range(80)]
    report = d.report(waiting)
    assert len(report["queued"]) == 50  # QUEUED_MAX
    first, second = report["queued"][:2]
    assert first["id"] == "q0" and first["deadline_at"] == clock + H
    assert second["deadline_at"] is None and second["task_class"] == "detect"
    assert first["g_per_kwh"] == 321.0
    assert first["energy_j"] == pytest.approx(placer.preview(contract).energy_j)
    assert Deferrer(placer, None, release).report(waiting) == {
        "carbon": None,
        "deferred": [],
        "queued": [],
    }
