"""FPGA partial-reconfiguration slots: kernel model (both backends), Placer, profile, emulation."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.web.api import AGENT, make_app
from edge_agent.errors import InvalidInput, ProfileError
from edge_agent.placement import (
    Placer,
    Requirements,
    Semantics,
    TaskContract,
    devices_from_profiles,
    kernel,
)
from edge_agent.placement import layout as L
from edge_agent.resources.profile_schema import validate_profile
from edge_agent.resources.profiles import load_profile, profiles_dir

BACKENDS = ["python"] + (["native"] if kernel.native_available() else [])
FPGA = "kria_kv260/fpga"


def dpu(config: int, gflops: float = 8.0) -> TaskContract:
    req = Requirements(kinds=("fpga",), precision="int8", model_format=None, config_id=config)
    return TaskContract(Semantics(gflops=gflops, precision="int8"), req)


def placer(backend: str, slots: int | None = None, loaded: list[int] | None = None) -> Placer:
    p = Placer(devices_from_profiles(["kria_kv260"]), backend=backend)  # type: ignore[arg-type]
    p.update_live(FPGA, slots=slots, loaded_configs=loaded)
    return p


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loaded_slot_pays_no_reconfiguration(backend: str) -> None:
    p = placer(backend, 2, [1, 2])
    reconf = p.devices[1].capability.reconfig_s
    for cfg in (1, 2, 1, 2):
        d = p.place_one(dpu(cfg))
        assert d.device_id == FPGA
        assert d.charges[0] == pytest.approx(d.service_s)  # no reconfiguration charged
    d3 = p.place_one(dpu(3))  # loaded nowhere: one slot swap, the round-robin victim (slot 0)
    assert d3.charges[0] == pytest.approx(d3.service_s + reconf)
    ws = p._ws.devices[1]
    assert [ws[c] for c in L.SLOT_COLS[:2]] == [3.0, 2.0] and ws[L.DEV_SLOT_NEXT] == 1.0
    assert p.place_one(dpu(2)).charges[0] == pytest.approx(p.place_one(dpu(2)).service_s)
    d4 = p.place_one(dpu(4))  # replaces slot 1 now
    assert d4.charges[0] > d4.service_s and [ws[c] for c in L.SLOT_COLS[:2]] == [3.0, 4.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_slot_swaps_every_change_and_slots_share_the_fabric(backend: str) -> None:
    one, two = placer(backend, 1, [1]), placer(backend, 2, [1, 2])
    reconf = one.devices[1].capability.reconfig_s
    a, b = one.place_one(dpu(1)), one.place_one(dpu(2))
    assert a.charges[0] == pytest.approx(a.service_s)
    assert b.charges[0] == pytest.approx(b.service_s + reconf)
    # a slot holds half the fabric: twice the service time, and the queue drains two-wide
    half = two.place_one(dpu(1))
    assert half.service_s == pytest.approx(2 * a.service_s)
    assert half.energy_j == pytest.approx(a.energy_j)  # half the power for twice the time
    fresh = placer(backend, 2, [1, 2])
    fresh.update_live(FPGA, queued_s=4.0)
    lone = placer(backend, 1, [1])
    lone.update_live(FPGA, queued_s=4.0)
    lone_first = lone.place_one(dpu(1))
    assert lone_first.latency_s == pytest.approx(4.0 + a.service_s)
    slot_first = fresh.place_one(dpu(1))  # 4 s queued, drained by two slots side by side
    assert slot_first.latency_s == pytest.approx(2.0 + 2 * a.service_s)


def test_backends_agree_on_a_slotted_sequence() -> None:
    if len(BACKENDS) < 2:
        pytest.skip("native kernel not built")
    seq = [1, 2, 3, 1, 4, 2, 2, 5, 1]
    out = {}
    for backend in BACKENDS:
        p = placer(backend, 3, [1])
        out[backend] = [p.place_one(dpu(c)).to_dict()["estimate"] for c in seq]
        out[backend].append(p._ws.devices[1].tolist())
    assert out["native"] == out["python"]


def test_update_live_slots_and_loaded_configs_are_checked() -> None:
    p = placer("python", 2, [1, 2])
    assert p.live(FPGA)["slots"] == 2.0 and p.live(FPGA)["loaded_config"] == 1.0
    with pytest.raises(InvalidInput, match=r"slots must be an integer 1\.\.4"):
        p.update_live(FPGA, slots=5)
    with pytest.raises(InvalidInput, match="at most 2 configuration ids"):
        p.update_live(FPGA, loaded_configs=[1, 2, 3])
    with pytest.raises(InvalidInput, match="configuration ids >= 0"):
        p.update_live(FPGA, loaded_configs=[-1])
    p.update_live(FPGA, loaded_configs=[7])
    assert [p._ws.devices[1, c] for c in L.SLOT_COLS] == [7.0, 0.0, 0.0, 0.0]


def test_profile_pr_slots_labelled_unverified_and_checked(tmp_path: Path) -> None:
    prof = load_profile("kria_kv260")
    slots = prof.device_spec("fpga")["pr_slots"]
    assert slots["value"] == 2 and slots["status"] == "unverified" and slots["unit"] == "slots"
    assert prof.device_spec("fpga")["reconfig_s"]["status"] == "unverified"
    doc = json.loads((profiles_dir() / "kria_kv260.json").read_text())
    for dev_index, value, match in ((1, 9, r"pr_slots\.value.*1\.\.4"), (0, 2, "only an FPGA")):
        bad = copy.deepcopy(doc)
        bad["devices"][dev_index]["pr_slots"] = {**slots, "value": value}
        with pytest.raises(ProfileError, match=match):
            validate_profile(bad, "kria_bad.json")


async def _kv260_agent(aiohttp_client: Any, tmp_path: Path) -> tuple[Any, Any]:
    """An agent emulating the KV260 (FPGA with pr_slots 2), without service-time jitter."""
    config = AgentConfig(
        data_dir=tmp_path / "data",
        port=0,
        shutdown_grace_s=0.0,
        profile="kria_kv260",
        emulation_jitter=0.0,
    ).replace()
    client = await aiohttp_client(make_app(config))
    return client, client.app[AGENT]


async def _submit(client: Any, config_id: int) -> str:
    body = {
        "semantics": {"gflops": 0.1, "precision": "int8"},
        "requirements": {
            "kinds": ["fpga"],
            "model_format": None,
            "precision": "int8",
            "config_id": config_id,
        },
    }
    return str((await (await client.post("/v1/tasks", json=body)).json())["task"]["id"])


async def _finished(client: Any, task_id: str) -> dict[str, Any]:
    for _ in range(1000):
        task = (await (await client.get(f"/v1/tasks/{task_id}")).json())["task"]
        if task["state"] in ("done", "failed"):
            assert task["state"] == "done", task
            return dict(task)
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {task_id} did not finish")


@pytest.mark.asyncio
async def test_emulated_kv260_runs_two_configurations_side_by_side(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client, agent = await _kv260_agent(aiohttp_client, tmp_path)
    ex = agent.executor
    assert ex.slots(FPGA) == 2 and agent.placer.live(FPGA)["slots"] == 2.0  # from pr_slots
    assert ex.slots("kria_kv260/cpu") == 1
    reconf = agent.fleet.device(FPGA).capability.reconfig_s  # 1.0 s, unverified

    ids = [await _submit(client, 1), await _submit(client, 2)]
    for _ in range(500):  # both loading at once, one per slot
        if len(ex.running_jobs(FPGA)) == 2:
            break
        await asyncio.sleep(0.01)
    assert {j.task_id for j in ex.running_jobs(FPGA)} == set(ids)
    assert agent.jobs.queued() == []  # running in a slot is not queued (nor preemptible)
    fpga_doc = next(d for d in agent.devices() if d["id"] == FPGA)
    assert set(fpga_doc["running_tasks"]) == set(ids)
    a, b = [await _finished(client, i) for i in ids]
    assert a["result"]["reconfig_s"] == b["result"]["reconfig_s"] == pytest.approx(reconf)
    assert {a["result"]["slot"], b["result"]["slot"]} == {0, 1}
    assert max(a["started_at"], b["started_at"]) < min(a["finished_at"], b["finished_at"])
    assert b["finished_at"] - a["started_at"] < 2 * reconf  # the two loads overlapped
    assert ex.loaded(FPGA) == [1, 2]
    ws = agent.placer._ws.devices[1]
    assert [ws[c] for c in L.SLOT_COLS[:2]] == [1.0, 2.0]  # the placer knows both slots

    c = await _finished(client, await _submit(client, 1))  # loaded in slot 0: no load
    assert c["result"]["reconfig_s"] == 0.0 and c["result"]["slot"] == 0
    assert c["result"]["wall_s"] < 0.5 * reconf
    # half the fabric: twice the whole fabric's service time (no jitter here)
    whole = Placer(devices_from_profiles(["kria_kv260"])).place_one(dpu(1, 0.1)).service_s
    assert c["result"]["latency_s"] == pytest.approx(2 * whole)

    d = await _finished(client, await _submit(client, 3))  # loaded nowhere: replaces slot 0
    assert d["result"]["reconfig_s"] == pytest.approx(reconf) and d["result"]["slot"] == 0
    assert ex.loaded(FPGA) == [3, 2] and [ws[c] for c in L.SLOT_COLS[:2]] == [3.0, 2.0]
    assert agent.overrun.flagged == {}  # the load is not counted as an overrun
    assert agent.executor.busy_s[FPGA] < 3 * reconf  # fabric time: each slot counts half


@pytest.mark.asyncio
async def test_a_job_waits_for_the_busy_slot_holding_its_configuration(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """Configuration 1 loading in slot 0: a second job for 1 waits for it, no second load."""
    client, agent = await _kv260_agent(aiohttp_client, tmp_path)
    reconf = agent.fleet.device(FPGA).capability.reconfig_s
    first = await _submit(client, 1)
    for _ in range(500):
        if agent.executor.running_jobs(FPGA):
            break
        await asyncio.sleep(0.01)
    second = await _finished(client, await _submit(client, 1))
    done = await _finished(client, first)
    assert second["result"]["reconfig_s"] == 0.0 and second["result"]["slot"] == 0
    assert second["started_at"] >= done["finished_at"] - 0.05
    assert agent.executor.loaded(FPGA) == [1, 0]
    assert done["result"]["reconfig_s"] == pytest.approx(reconf)
