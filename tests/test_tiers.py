"""Tiers: device tier labels from profiles, class routing by policy, spill-over when full."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.preempt import preempt_for
from edge_agent.agent.web.api import AGENT, make_app
from edge_agent.errors import PolicyError, ProfileError
from edge_agent.placement import (
    Placer,
    Policy,
    Requirements,
    Semantics,
    TaskContract,
    devices_from_profiles,
    tiers,
)
from edge_agent.resources.profile_schema import default_tier
from edge_agent.resources.profiles import load_profile, profiles_dir
from edge_agent.resources.vocab import DeviceKind, Health, Tier
from tests.support.jobs import placed_job

RULES = {"classes": {"detect": ["hot", "warm"], "batch": ["cold", "warm"]}}
NPU, ARM, X86 = "rk3588/npu", "rk3588/cpu", "generic_x86_server/cpu"


def placer(rules: dict[str, Any] = RULES) -> Placer:
    """rk3588 (NPU hot, ARM CPU warm) beside a generic x86 server (its CPU marked cold)."""
    policy = Policy.from_dict({"template": "latency-first", "rules": {"tiers": rules}})
    return Placer(devices_from_profiles(["rk3588", "generic_x86_server"]), policy)


def task(cls: str, max_latency_s: float = 0.0, kinds: tuple[str, ...] = ()) -> TaskContract:
    req = Requirements(kinds=kinds, max_latency_s=max_latency_s)
    return TaskContract(Semantics(1.0, precision="int8"), req, task_class=cls)


# --- profiles ------------------------------------------------------------------------
def test_default_tier_by_kind_and_profiles_without_a_tier(tmp_path: Path) -> None:
    assert default_tier(DeviceKind.NPU) is Tier.HOT
    assert default_tier(DeviceKind.GPU_NVIDIA) is Tier.HOT
    assert default_tier(DeviceKind.FPGA) is Tier.HOT
    assert default_tier(DeviceKind.CPU_X86) is Tier.WARM
    assert default_tier(DeviceKind.CPU_ARM) is Tier.COLD
    doc = json.loads((profiles_dir() / "rk3588.json").read_text())
    for dev in doc["devices"]:
        del dev["tier"]
    (tmp_path / "rk3588.json").write_text(json.dumps(doc))
    devices = load_profile(tmp_path / "rk3588.json").devices(emulated=True)
    assert {d.id.split("/")[1]: d.tier for d in devices} == {"cpu": Tier.COLD, "npu": Tier.HOT}
    bad = copy.deepcopy(doc)
    bad["devices"][0]["tier"] = "lukewarm"
    (tmp_path / "rk3588.json").write_text(json.dumps(bad))
    with pytest.raises(ProfileError, match=r"devices\[0\]\.tier"):
        load_profile(tmp_path / "rk3588.json")


def test_shipped_profiles_label_their_devices() -> None:
    tiers_of = {d.id: d.tier for d in devices_from_profiles(["rk3588", "generic_x86_server"])}
    assert tiers_of == {NPU: Tier.HOT, ARM: Tier.WARM, X86: Tier.COLD}


# --- rules ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"classes": {"detect": ["hott"]}}, "classes.detect: unknown tier 'hott'"),
        ({"classes": {"detect": []}}, "classes.detect: expected a non-empty list"),
        ({"classes": {"detect": ["hot", "hot"]}}, "a tier is listed twice"),
        ({"routes": {}}, "unknown key(s) routes"),
        ({"max_queue_s": {"hot": -1}}, "max_queue_s.hot: expected seconds >= 0"),
        ({"max_queue_s": {"tepid": 1}}, "max_queue_s: unknown tier 'tepid'"),
    ],
)
def test_tier_rules_are_validated_in_the_policy(rules: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=r"policy\.rules\.tiers") as err:
        Policy.from_dict({"template": "balanced", "rules": {"tiers": rules}})
    assert message in str(err.value)


# --- routing -------------------------------------------------------------------------
def test_classes_go_to_their_first_tier_and_others_anywhere() -> None:
    p = placer()
    detect = tiers.place_one(p, task("detect"))
    assert detect.device_id == NPU and detect.tier == "hot" and not detect.spilled
    batch = tiers.place_one(p, task("batch"))
    assert batch.device_id == X86 and batch.tier == "cold"
    assert batch.why_not(NPU) == (
        f"{NPU} excluded: tier hot is not one of this class's tiers (cold, warm)"
    )
    free = tiers.place_one(p, task("other"))
    assert free.tier is None and free.placed
    assert "tier" not in free.summary()
    assert "; tier cold" in batch.summary() and batch.to_dict()["tier"] == "cold"


def test_a_full_tier_spills_to_the_next_and_health_is_restored() -> None:
    p = placer()
    p.update_live(NPU, queued_s=1.0)  # the NPU cannot meet a 50 ms bound now
    d = tiers.place_one(p, task("detect", max_latency_s=0.05))
    assert d.placed and d.device_id == ARM
    assert d.tier == "warm" and d.spilled and d.spilled_from == ("hot",)
    assert "spilled from hot" in d.summary()
    assert "tier hot was full" in d.why_not(NPU)
    assert "not one of this class's tiers" in d.why_not(X86)
    assert d.rejections() == {"outside its tiers": 2}
    assert all(p.live(dev)["health"] == Health.ONLINE for dev in p.device_ids)
    # an offline device inside the tier is still reported as offline, not as outside it
    p.update_live(ARM, health=Health.OFFLINE)
    none = tiers.place_one(p, task("detect", max_latency_s=0.05))
    assert not none.placed and none.tier is None
    assert none.rejections() == {
        "offline": 1,
        "estimated latency over max_latency": 1,
        "outside its tiers": 1,
    }
    assert p.live(ARM)["health"] == Health.OFFLINE


def test_queue_limit_spills_and_when_every_tier_is_over_it_the_first_takes_it() -> None:
    p = placer({**RULES, "max_queue_s": {"hot": 0.01}})
    p.update_live(NPU, queued_s=0.5)
    d = tiers.place_one(p, task("detect"))
    assert d.tier == "warm" and d.spilled_from == ("hot",)
    q = placer({**RULES, "max_queue_s": {"hot": 0.01, "warm": 0.01}})
    q.update_live(NPU, queued_s=0.5)
    q.update_live(ARM, queued_s=0.5)
    first = tiers.place_one(q, task("detect"))
    assert first.device_id == NPU and first.tier == "hot" and not first.spilled
    assert q.live(ARM)["queued_s"] == pytest.approx(0.5)  # the warm try was released


def test_batch_placement_routes_each_task_in_priority_order() -> None:
    p = placer()
    batch = [task("batch"), task("other"), task("detect")]
    decisions = tiers.place(p, batch)
    assert [d.tier for d in decisions] == ["cold", None, "hot"]
    plain = Placer(devices_from_profiles(["rk3588"]))
    assert tiers.place(plain, [task("detect")])[0].tier is None  # no rules: one kernel call


# --- the agent -----------------------------------------------------------------------
@pytest.mark.asyncio
async def test_agent_records_the_tier_and_the_spill(
    aiohttp_client: Any, emulated_agent: Callable[..., AgentConfig]
) -> None:
    config = emulated_agent()
    client = await aiohttp_client(make_app(config))
    agent = client.server.app[AGENT]
    rules = {"classes": {"detect": ["hot", "warm"]}, "max_queue_s": {"hot": 0.0}}
    await agent.apply_policy({"template": "balanced", "version": 2, "rules": {"tiers": rules}})
    body = {
        "semantics": {"gflops": 2.0, "precision": "int8"},
        "requirements": {"model_format": None},
        "task_class": "detect",
    }
    resp = await client.post("/v1/tasks:batch", json={"tasks": [body] * 3})
    ids = [t["id"] for t in (await resp.json())["tasks"]]
    deadline = time.monotonic() + 10
    while True:
        docs = [await (await client.get(f"/v1/tasks/{i}/explain")).json() for i in ids]
        if all(doc.get("ok") for doc in docs) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.01)
    assert docs[0]["tier"] == "hot"
    spilled = [doc for doc in docs if doc["spilled_from"]]
    assert spilled and all(
        doc["tier"] == "warm" and doc["spilled_from"] == ["hot"] for doc in spilled
    )
    assert "spilled from hot" in spilled[0]["why_here"]


def test_preemption_places_the_urgent_task_by_its_tiers() -> None:
    """An urgent detect task preempts queued work on its own tiers, never the cold server."""
    p = placer()
    low = [task("other", kinds=("cpu_x86",)) for _ in range(8)]
    low += [task("other", kinds=("npu",)) for _ in range(8)]
    queued = [placed_job(f"low{i}", p.place_one(c)) for i, c in enumerate(low)]
    assert [j.decision.device_id for j in queued] == [X86] * 8 + [NPU] * 8
    npu_service = queued[-1].decision.service_s
    urgent = TaskContract(
        Semantics(1.0, precision="int8"),
        Requirements(deadline_s=3.5 * npu_service),
        task_class="detect",
        priority=10,
    )
    late = tiers.place_one(p, urgent)  # 8 tasks ahead on the NPU, ARM too slow
    assert late.placed and late.late and "deadline cannot be met" in late.summary()
    p.release(late)
    x86_queued = p.live(X86)["queued_s"]
    found = preempt_for(p, urgent, queued)  # the x86 jobs come first, and x86 is fastest
    assert found is not None
    decision, victims = found
    assert decision.device_id == NPU and decision.tier == "hot"
    assert victims and {v.decision.device_id for v in victims} == {NPU}
    assert p.live(X86)["queued_s"] == pytest.approx(x86_queued)  # cold work left alone
    assert all(p.live(d)["health"] == Health.ONLINE for d in p.device_ids)
