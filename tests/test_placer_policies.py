"""Policies change the Placer's choice; device health takes devices out or ranks them lower."""

from __future__ import annotations

from edge_agent.placement import Device, Policy
from edge_agent.resources.vocab import DeviceKind, Health
from tests.support.placer_fleet import BACKENDS, dev, placer, task

# --- policies ------------------------------------------------------------------------


def power_fleet() -> list[Device]:
    return [
        dev("gpu", DeviceKind.GPU_NVIDIA, int8=2000, watts=60),
        dev("npu", DeviceKind.NPU, int8=1000, watts=5),
    ]  # 2x slower, 12x less power


@BACKENDS
def test_energy_first_and_latency_first_choose_differently(backend: str) -> None:
    fast = placer(power_fleet(), backend, "latency-first").place_one(task(2.0))
    frugal = placer(power_fleet(), backend, "energy-first").place_one(task(2.0))
    assert fast.device_id == "gpu"
    assert frugal.device_id == "npu"
    assert frugal.energy_j < fast.energy_j
    assert frugal.latency_s > fast.latency_s
    assert fast.runner_up == "npu" and frugal.runner_up == "gpu"
    assert fast.policy == "latency-first@1"


@BACKENDS
def test_changing_the_policy_changes_the_choice(backend: str) -> None:
    p = placer(power_fleet(), backend, "latency-first")
    d = p.place_one(task(2.0))
    p.release(d)
    p.policy = Policy.from_dict({"template": "energy-first", "version": 4})
    d2 = p.place_one(task(2.0))
    assert (d.device_id, d2.device_id) == ("gpu", "npu")
    assert d2.policy == "energy-first@4"


# --- health --------------------------------------------------------------------------


@BACKENDS
def test_offline_device_is_never_chosen(backend: str) -> None:
    fleet = [dev("gpu", int8=8000, health=Health.OFFLINE), dev("npu", DeviceKind.NPU, int8=1000)]
    p = placer(fleet, backend)
    decisions = p.place([task() for _ in range(5)])
    assert all(d.device_id == "npu" for d in decisions)
    assert "offline" in decisions[0].why_not("gpu")
    assert decisions[0].rejections() == {"offline": 1}


@BACKENDS
def test_update_live_offline_takes_a_device_out(backend: str) -> None:
    p = placer([dev("gpu", int8=8000), dev("npu", DeviceKind.NPU, int8=1000)], backend)
    assert p.place_one(task()).device_id == "gpu"
    p.update_live("gpu", health=Health.OFFLINE)
    d = p.place_one(task())
    assert d.device_id == "npu"
    assert d.why_not("gpu") == "gpu rejected: offline"
    p.update_live("npu", health=Health.OFFLINE)
    none = p.place_one(task())
    assert not none.placed
    assert none.rejections() == {"offline": 2}


@BACKENDS
def test_suspect_device_loses_to_an_equal_online_one(backend: str) -> None:
    twins = [dev("a", int8=1000, health=Health.SUSPECT), dev("b", int8=1000)]
    assert placer(twins, backend).place_one(task()).device_id == "b"
    equal = [dev("a", int8=1000), dev("b", int8=1000)]
    assert placer(equal, backend).place_one(task()).device_id == "a"  # ties: lowest index


def test_a_blend_takes_a_queue_guard_only_from_parts_that_make_most_of_it() -> None:
    """Found re-running bench_sim_openb: a 70 % fragmentation blend inherited its 30 %
    balanced part's 1.5x queue guard and packed GPUs like balanced (frag_blend_vs_binpack at
    90 % went 1.00 -> 2.26); a minor part's guard must not overrule the blend."""
    frag = Policy.from_dict({"name": "fragmentation", "weights": {"fragmentation": 1}})
    balanced = Policy.template("balanced")
    assert Policy.blend([(frag, 0.7), (balanced, 0.3)]).queue_guard() == 0.0
    assert Policy.blend([(frag, 0.3), (balanced, 0.7)]).queue_guard() == balanced.queue_guard()
    assert Policy.blend({"balanced": 0.5, "energy-first": 0.5}).queue_guard() == 1.5  # strictest
