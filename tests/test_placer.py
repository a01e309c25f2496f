"""Behaviour of the Placer on small hand-built fleets, on both kernel backends."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest

from edge_agent.errors import InvalidInput
from edge_agent.placement import (
    Capability,
    Decision,
    Device,
    LiveState,
    Placer,
    Policy,
    Requirements,
    Semantics,
    TaskContract,
    default_backend,
    native_available,
)
from edge_agent.placement.layout import OBJECTIVE_NAMES
from edge_agent.resources.vocab import DeviceKind, Health, Precision

BACKENDS = pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "native",
            marks=pytest.mark.skipif(not native_available(), reason="compiled kernel not built"),
        ),
        "python",
    ],
)

GB = 1e9


def dev(
    id: str,
    kind: DeviceKind = DeviceKind.GPU_NVIDIA,
    *,
    int8: float = 0.0,
    fp16: float = 0.0,
    fp32: float = 0.0,
    mem: float = 16 * GB,
    watts: float = 10.0,
    health: Health = Health.ONLINE,
    reconfig_s: float = 0.0,
    carbon: float = 0.0,
    utilization: float = 0.0,
) -> Device:
    """Return a device whose supported precisions are those with a nonzero peak."""
    mask = 0
    for prec, peak in ((Precision.INT8, int8), (Precision.FP16, fp16), (Precision.FP32, fp32)):
        if peak > 0:
            mask |= 1 << prec
    cap = Capability(
        peak_int8_gops=int8,
        peak_fp16_gops=fp16,
        peak_fp32_gops=fp32,
        memory_bytes=mem,
        memory_bw_gbs=100.0,
        idle_power_w=watts / 10,
        max_power_w=watts,
        precision_mask=mask,
        reconfig_s=reconfig_s,
    )
    return Device(
        id=id,
        kind=kind,
        name=id,
        capability=cap,
        live=LiveState(health=health, utilization=utilization),
        carbon_g_per_kwh=carbon,
    )


def task(
    gflops: float = 1.0,
    precision: str = "int8",
    *,
    cls: str = "default",
    priority: int = 0,
    **req: Any,
) -> TaskContract:
    return TaskContract(
        Semantics(gflops=gflops, precision=precision),
        Requirements(**req),
        task_class=cls,
        priority=priority,
    )


def placer(devices: list[Device], backend: str, policy: str = "latency-first", **kw: Any) -> Placer:
    return Placer(devices, Policy.template(policy), backend=backend, **kw)  # type: ignore[arg-type]


def mixed_fleet() -> list[Device]:
    return [
        dev("cpu", DeviceKind.CPU_ARM, int8=100, fp16=50, fp32=50, mem=8 * GB, watts=15),
        dev("gpu", DeviceKind.GPU_NVIDIA, int8=4000, fp16=2000, fp32=1000, mem=8 * GB, watts=60),
        dev("npu", DeviceKind.NPU, int8=10000, mem=4 * GB, watts=5),
    ]


def signature(d: Decision) -> tuple[Any, ...]:
    """Everything a decision says about the choice, without the backend label."""
    return (
        d.placed,
        d.device_ids,
        d.latency_s,
        d.service_s,
        d.energy_j,
        d.carbon_g,
        d.score,
        d.runner_up,
        d.runner_up_score,
        d.components,
        d.reject_counts,
        d.reasons,
    )


# --- precision and kinds -------------------------------------------------------------


@BACKENDS
def test_int8_task_goes_to_the_fast_int8_npu(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task(10.0, "int8"))
    assert d.placed
    assert d.device_ids == ("npu",)
    assert d.backend == backend
    assert d.rejections() == {}


@BACKENDS
def test_fp32_task_cannot_go_to_an_int8_only_npu(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task(10.0, "fp32"))
    assert d.device_id == "gpu"
    assert "precision unsupported" in d.why_not("npu")
    assert d.rejections() == {"precision unsupported": 1}
    assert "chosen" in d.why_not("gpu")
    assert "runner-up" in d.why_not("cpu")


@BACKENDS
def test_requirements_precision_overrides_semantics_in_placement(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(
        TaskContract(Semantics(gflops=10.0, precision="fp32"), Requirements(precision="int8"))
    )
    assert d.device_id == "npu"


# --- the architecture's example contract ---------------------------------------------

EXAMPLE = Requirements(
    kinds=("accelerator",),
    precision="int8",
    min_memory_bytes=8e9,
    device_count=2,
    max_latency_s=0.005,
)


def example_task(gflops: float = 10.0) -> TaskContract:
    return TaskContract(Semantics(gflops=gflops, precision="int8"), EXAMPLE)


def gang_fleet(second_npu_mem: float = 16 * GB) -> list[Device]:
    return [
        dev("cpu", DeviceKind.CPU_ARM, int8=20000, mem=64 * GB),  # fast, but not an accelerator
        dev("npu1", DeviceKind.NPU, int8=10000, mem=16 * GB),
        dev("gpu-small", DeviceKind.GPU_NVIDIA, int8=20000, mem=4 * GB),
        dev("npu2", DeviceKind.NPU, int8=10000, mem=second_npu_mem),
    ]


@BACKENDS
def test_example_contract_placed_on_two_distinct_accelerators(backend: str) -> None:
    p = placer(gang_fleet(), backend)
    d = p.place_one(example_task())
    assert d.placed
    assert len(d.device_ids) == 2
    assert len(set(d.device_ids)) == 2
    assert set(d.device_ids) == {"npu1", "npu2"}
    assert d.latency_s <= 0.005
    assert d.rejections() == {"kind not allowed": 1, "not enough free memory": 1}
    for dev_id in d.device_ids:
        assert p.live(dev_id)["memory_free_bytes"] == pytest.approx(8 * GB)
        assert p.live(dev_id)["queued_s"] > 0


@BACKENDS
def test_example_contract_not_placed_when_only_one_accelerator_qualifies(backend: str) -> None:
    p = placer(gang_fleet(second_npu_mem=4 * GB), backend)
    d = p.place_one(example_task())
    assert d.placed is False
    assert d.device_ids == ()
    assert d.device_id is None
    assert d.rejections() == {"kind not allowed": 1, "not enough free memory": 2}
    assert d.summary().startswith("not placed")
    assert "not enough free memory" in d.summary()
    # nothing was charged to the one device that did qualify
    assert p.live("npu1")["queued_s"] == 0.0
    assert p.live("npu1")["memory_free_bytes"] == 16 * GB


@BACKENDS
def test_example_contract_not_placed_when_latency_bound_cannot_be_met(backend: str) -> None:
    p = placer(gang_fleet(), backend)
    d = p.place_one(example_task(gflops=1000.0))  # 100 ms per device
    assert not d.placed
    assert d.device_ids == ()
    assert d.rejections()["estimated latency over max_latency"] == 2
    assert "latency" in d.why_not("npu1")
    assert "estimated latency over max_latency" in d.summary()


# --- no overbooking ------------------------------------------------------------------


@BACKENDS
def test_batch_never_overbooks_memory(backend: str) -> None:
    fleet = [dev("fast8", int8=8000, mem=8 * GB), dev("slow16", int8=2000, mem=16 * GB)]
    p = placer(fleet, backend)
    decisions = p.place([task(1.0, min_memory_bytes=3 * GB) for _ in range(8)])
    on = [d.device_id for d in decisions]
    assert on.count("fast8") <= 2
    assert on.count("slow16") <= 5
    assert sum(d.placed for d in decisions) == 7  # 2 + 5 fit, the eighth does not
    assert on[0] == "fast8"
    unplaced = [d for d in decisions if not d.placed]
    assert unplaced[0].rejections() == {"not enough free memory": 2}
    assert p.live("fast8")["memory_free_bytes"] == pytest.approx(2 * GB)
    assert p.live("slow16")["memory_free_bytes"] == pytest.approx(1 * GB)


@BACKENDS
def test_batch_spreads_once_the_fast_queue_makes_it_slower(backend: str) -> None:
    fleet = [dev("fast", int8=6000), dev("slow", int8=2000)]  # 3x slower
    p = placer(fleet, backend)
    decisions = p.place([task(3.0) for _ in range(12)])
    on = [d.device_id for d in decisions]
    assert all(d.placed for d in decisions)
    assert on[0] == "fast"
    assert on.index("slow") >= 2  # fast keeps winning while its queue is short
    assert {"fast", "slow"} == set(on)
    assert on.count("fast") > on.count("slow")
    for device in ("fast", "slow"):
        latencies = [d.latency_s for d in decisions if d.device_id == device]
        assert all(b > a for a, b in itertools.pairwise(latencies))
        charged = sum(d.service_s for d in decisions if d.device_id == device)
        assert p.live(device)["queued_s"] == pytest.approx(charged)


@BACKENDS
def test_successive_place_one_calls_charge_the_queue(backend: str) -> None:
    p = placer([dev("only", int8=1000)], backend)
    first, second = p.place_one(task()), p.place_one(task())
    assert second.latency_s > first.latency_s
    assert second.latency_s == pytest.approx(first.latency_s + first.service_s)


# --- priority ------------------------------------------------------------------------


def priority_fleet() -> list[Device]:
    # the fast device fits one 3 GB task; the slow one fits many
    return [dev("fast", int8=8000, mem=4 * GB), dev("slow", int8=1000, mem=32 * GB)]


@BACKENDS
def test_high_priority_task_listed_last_gets_the_better_device(backend: str) -> None:
    p = placer(priority_fleet(), backend)
    tasks = [
        task(cls="a", min_memory_bytes=3 * GB),
        task(cls="b", min_memory_bytes=3 * GB),
        task(cls="urgent", priority=10, min_memory_bytes=3 * GB),
    ]
    decisions = p.place(tasks)
    assert len(decisions) == len(tasks)
    assert [d.task for d in decisions] == tasks
    assert [d.task.task_class for d in decisions] == ["a", "b", "urgent"]
    assert decisions[2].device_id == "fast"
    assert decisions[0].device_id == "slow"
    assert decisions[1].device_id == "slow"


@BACKENDS
def test_equal_priority_keeps_input_order(backend: str) -> None:
    p = placer(priority_fleet(), backend)
    decisions = p.place([task(cls=c, min_memory_bytes=3 * GB) for c in ("a", "b", "c")])
    assert [d.device_id for d in decisions] == ["fast", "slow", "slow"]
    assert [d.task.task_class for d in decisions] == ["a", "b", "c"]


@BACKENDS
def test_earlier_deadline_goes_first_at_equal_priority(backend: str) -> None:
    p = placer(priority_fleet(), backend)
    decisions = p.place(
        [
            task(cls="late", min_memory_bytes=3 * GB, deadline_s=60.0),
            task(cls="soon", min_memory_bytes=3 * GB, deadline_s=10.0),
        ]
    )
    assert [d.device_id for d in decisions] == ["slow", "fast"]


@BACKENDS
def test_empty_batch_returns_no_decisions(backend: str) -> None:
    assert placer(priority_fleet(), backend).place([]) == []


@BACKENDS
def test_batch_larger_than_the_workspace(backend: str) -> None:
    p = placer([dev("a", int8=1000, mem=1e15), dev("b", int8=1000, mem=1e15)], backend)
    decisions = p.place([task(cls=f"c{i % 9}") for i in range(150)])
    assert len(decisions) == 150
    assert all(d.placed for d in decisions)
    assert [d.task.task_class for d in decisions] == [f"c{i % 9}" for i in range(150)]


# --- feedback ------------------------------------------------------------------------


def feedback_fleet() -> list[Device]:
    return [dev("fast", int8=2000, watts=10), dev("other", int8=1000, watts=10)]  # 2x slower


@BACKENDS
def test_feedback_moves_a_slow_class_away_and_only_that_class(backend: str) -> None:
    p = placer(feedback_fleet(), backend)
    assert p.place_one(task(cls="a")).device_id == "fast"  # baseline
    p.advance(10.0)
    d = p.place_one(task(cls="a"))
    for _ in range(10):
        if d.device_id != "fast":
            break
        p.feedback(d, latency_s=5.0 * d.service_s)
        d = p.place_one(task(cls="a"))
    assert d.device_id == "other"
    p.feedback(d, latency_s=d.service_s)
    assert p.correction("a", "fast") > 2.0
    assert p.correction("a", "other") == pytest.approx(1.0)
    assert p.correction("b", "fast") == 1.0  # a class never seen
    b = p.place_one(task(cls="b"))
    assert b.device_id == "fast"
    assert p.correction("b", "fast") == 1.0


@BACKENDS
def test_feedback_correction_follows_the_measured_ratio(backend: str) -> None:
    p = placer([dev("only", int8=2000)], backend, learning_rate=1.0)
    d = p.place_one(task(cls="a"))
    p.feedback(d, latency_s=3.0 * d.service_s)
    assert p.correction("a", "only") == pytest.approx(3.0)
    again = p.place_one(task(cls="a"))
    assert again.service_s == pytest.approx(3.0 * d.service_s)
    half = placer([dev("only", int8=2000)], backend, learning_rate=0.5)
    d = half.place_one(task(cls="a"))
    half.feedback(d, latency_s=4.0 * d.service_s)
    assert half.correction("a", "only") == pytest.approx(4.0)  # the first sample replaces
    d = half.place_one(task(cls="a"))
    half.feedback(d, latency_s=d.base_s)  # measured = the uncorrected model (ratio 1)
    assert half.correction("a", "only") == pytest.approx(2.0)  # halfway in log space


@BACKENDS
def test_feedback_releases_queue_and_memory(backend: str) -> None:
    p = placer(feedback_fleet(), backend)
    d = p.place_one(task(min_memory_bytes=2 * GB))
    assert p.live("fast")["queued_s"] > 0.0
    assert p.live("fast")["memory_free_bytes"] == pytest.approx(14 * GB)
    p.feedback(d, latency_s=d.service_s)
    assert p.live("fast")["queued_s"] == pytest.approx(0.0, abs=1e-12)
    assert p.live("fast")["memory_free_bytes"] == pytest.approx(16 * GB)


@BACKENDS
def test_feedback_releases_reconfiguration_time_too(backend: str) -> None:
    fpga = dev("fpga", DeviceKind.FPGA, int8=1000, reconfig_s=0.5)
    p = placer([fpga], backend)
    d = p.place_one(task(config_id=2))
    assert d.latency_s >= 0.5  # the bitstream swap is part of the estimate
    p.feedback(d, latency_s=d.service_s)
    assert p.live("fpga")["queued_s"] == pytest.approx(0.0, abs=1e-9)


@BACKENDS
def test_releasing_a_gang_leaves_other_work_queued(backend: str) -> None:
    fleet = [dev("fast", int8=4000, mem=64 * GB), dev("slow", int8=1000, mem=64 * GB)]
    p = placer(fleet, backend)
    gang = p.place_one(task(8.0, device_count=2))
    assert set(gang.device_ids) == {"fast", "slow"}
    solo = p.place_one(task(1.0))
    assert solo.device_id == "fast"
    p.feedback(gang, latency_s=gang.service_s)
    # only the gang's own charge leaves the fast device; the solo task is still queued
    assert p.live("fast")["queued_s"] == pytest.approx(solo.service_s)
    assert p.live("slow")["queued_s"] == pytest.approx(0.0, abs=1e-12)


@BACKENDS
def test_many_task_classes_keep_their_corrections(backend: str) -> None:
    p = placer(feedback_fleet(), backend)
    d = p.place_one(task(cls="a"))
    p.feedback(d, latency_s=2.0 * d.service_s)
    learned = p.correction("a", "fast")
    for i in range(10):  # grows the correction matrix past its initial rows
        assert p.place_one(task(cls=f"new{i}")).placed
    assert p.correction("a", "fast") == learned
    assert p.correction("new9", "fast") == 1.0


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


# --- determinism ---------------------------------------------------------------------


def determinism_fleet() -> list[Device]:
    return [
        dev(
            "cpu",
            DeviceKind.CPU_X86,
            int8=300,
            fp16=150,
            fp32=150,
            mem=32 * GB,
            watts=65,
            carbon=400,
        ),
        dev(
            "gpu",
            DeviceKind.GPU_NVIDIA,
            int8=20000,
            fp16=10000,
            fp32=5000,
            mem=8 * GB,
            watts=70,
            carbon=400,
            utilization=0.3,
        ),
        dev("npu", DeviceKind.NPU, int8=6000, fp16=3000, mem=4 * GB, watts=6, carbon=50),
        dev(
            "fpga",
            DeviceKind.FPGA,
            int8=1500,
            mem=2 * GB,
            watts=10,
            reconfig_s=0.2,
            health=Health.SUSPECT,
        ),
        dev(
            "peer-gpu",
            DeviceKind.GPU_OTHER,
            int8=8000,
            fp16=4000,
            fp32=2000,
            mem=16 * GB,
            watts=40,
            carbon=20,
        ),
    ]


def determinism_tasks() -> list[TaskContract]:
    tasks = []
    for i in range(40):
        prec = ("int8", "fp16", "fp32")[i % 3]
        tasks.append(
            TaskContract(
                Semantics(
                    gflops=0.5 + (i * 7 % 11),
                    param_bytes=(i % 5) * 1e8,
                    activation_bytes=(i % 3) * 5e7,
                    precision=prec,
                ),
                Requirements(
                    device_count=1 + (i % 7 == 0),
                    config_id=int(i % 4 == 1),
                    max_latency_s=0.5 if i % 6 == 0 else 0.0,
                ),
                task_class=f"class{i % 5}",
                priority=i % 4,
            )
        )
    return tasks


def run_scenario(backend: str) -> list[tuple[Any, ...]]:
    p = placer(determinism_fleet(), backend, "balanced")
    out = [signature(d) for d in p.place(determinism_tasks())]
    first = p.place_one(determinism_tasks()[3])
    p.feedback(first, latency_s=first.service_s * 1.7)
    out += [signature(d) for d in p.place(determinism_tasks()[:10])]
    return out


@BACKENDS
def test_same_inputs_give_identical_decisions(backend: str) -> None:
    first, second = run_scenario(backend), run_scenario(backend)
    assert first == second
    assert any(s[0] for s in first) and any(len(s[1]) == 2 for s in first)


@pytest.mark.skipif(not native_available(), reason="compiled kernel not built")
def test_both_backends_give_identical_decisions() -> None:
    assert run_scenario("native") == run_scenario("python")


# --- bad input -----------------------------------------------------------------------


@BACKENDS
def test_nan_utilization_is_rejected_and_loses_nothing(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    p.place_one(task())
    before = {i: p.live(i) for i in p.device_ids}
    with pytest.raises(InvalidInput, match="utilization"):
        p.update_live("gpu", utilization=float("nan"))
    with pytest.raises(InvalidInput, match="utilization"):
        p.update_live("gpu", queued_s=5.0, utilization=1.5)  # one bad value: nothing applied
    assert {i: p.live(i) for i in p.device_ids} == before
    reference = placer(mixed_fleet(), backend)
    reference.place_one(task())
    assert signature(p.place_one(task(3.0, "fp16"))) == signature(
        reference.place_one(task(3.0, "fp16"))
    )


@BACKENDS
@pytest.mark.parametrize("field", ["queued_s", "memory_free_bytes", "predicted_utilization"])
def test_update_live_rejects_bad_numbers(backend: str, field: str) -> None:
    p = placer(mixed_fleet(), backend)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(InvalidInput, match=field):
            p.update_live("gpu", **{field: bad})
    assert p.place_one(task()).placed


@BACKENDS
def test_update_live_rejects_an_unknown_health(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    with pytest.raises(InvalidInput):
        p.update_live("gpu", health=7)  # type: ignore[arg-type]
    assert p.live("gpu")["health"] == float(Health.ONLINE)


@BACKENDS
def test_update_live_applies_good_values(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    p.update_live("gpu", utilization=0.5, queued_s=0.25, memory_free_bytes=1 * GB)
    live = p.live("gpu")
    assert (live["utilization"], live["queued_s"], live["memory_free_bytes"]) == (0.5, 0.25, GB)


@BACKENDS
def test_advance_rejects_bad_seconds_and_loses_nothing(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    p.place_one(task())
    queued = p.live("npu")["queued_s"]
    for bad in (float("nan"), -1.0):
        with pytest.raises(InvalidInput):
            p.advance(bad)
        assert p.live("npu")["queued_s"] == queued
    assert p.place_one(task()).placed


@BACKENDS
def test_unknown_device_id_raises(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    with pytest.raises(InvalidInput, match="nope"):
        p.update_live("nope", utilization=0.5)
    with pytest.raises(InvalidInput, match="nope"):
        p.live("nope")
    with pytest.raises(InvalidInput, match="nope"):
        p.correction("default", "nope")
    d = p.place_one(task())
    assert "not a device of this fleet" in d.why_not("nope")


@BACKENDS
@pytest.mark.parametrize("latency", [0.0, -1.0, float("nan"), float("inf")])
def test_feedback_with_bad_latency_raises_and_changes_nothing(backend: str, latency: float) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task())
    queued = p.live("npu")["queued_s"]
    with pytest.raises(InvalidInput, match="latency"):
        p.feedback(d, latency_s=latency)
    assert p.live("npu")["queued_s"] == queued
    assert p.correction("default", "npu") == 1.0


@BACKENDS
def test_feedback_with_bad_energy_or_unplaced_decision_raises(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task())
    with pytest.raises(InvalidInput, match="energy"):
        p.feedback(d, latency_s=d.service_s, energy_j=-1.0)
    unplaced = p.place_one(task(kinds=("fpga",)))
    assert not unplaced.placed
    with pytest.raises(InvalidInput):
        p.feedback(unplaced, latency_s=0.01)


@BACKENDS
def test_duplicate_device_ids_raise(backend: str) -> None:
    with pytest.raises(InvalidInput, match="unique"):
        placer([dev("x", int8=1000), dev("x", int8=2000)], backend)


@BACKENDS
def test_bad_learning_rate_raises(backend: str) -> None:
    for lr in (0.0, 1.5, float("nan")):
        with pytest.raises(InvalidInput, match="learning_rate"):
            placer(mixed_fleet(), backend, learning_rate=lr)


# --- explanation ---------------------------------------------------------------------


@BACKENDS
def test_decision_to_dict_is_json_and_explains(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task(10.0, "fp32"))
    doc = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert doc["placed"] is True
    assert doc["devices"] == ["gpu"]
    assert set(doc["estimate"]) >= {"latency_s", "service_s", "energy_j", "carbon_g"}
    assert doc["estimate"]["latency_s"] == d.latency_s > 0
    assert list(doc["components"]) == list(OBJECTIVE_NAMES)
    assert len(doc["components"]) == len(OBJECTIVE_NAMES) == 7
    assert all(math.isfinite(v) and v >= 0 for v in doc["components"].values())
    assert sum(doc["components"].values()) == pytest.approx(d.score)
    assert doc["runner_up"] == "cpu"
    assert doc["runner_up_score"] >= doc["score"]
    assert doc["rejections"] == {"precision unsupported": 1}
    assert doc["summary"] == d.summary()
    assert "gpu" in doc["summary"]
    assert doc["backend"] == backend


@BACKENDS
def test_unplaced_decision_to_dict_is_json(backend: str) -> None:
    p = placer(mixed_fleet(), backend)
    d = p.place_one(task(kinds=("fpga",)))
    doc = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert doc["placed"] is False
    assert doc["devices"] == []
    assert doc["runner_up"] is None
    assert doc["runner_up_score"] is None
    assert doc["rejections"] == {"kind not allowed": 3}
    assert doc["summary"].startswith("not placed")


def test_pure_python_env_forces_the_python_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETMESH_PURE_PYTHON", "1")
    assert default_backend() == "python"
    assert Placer(mixed_fleet()).backend == "python"
    monkeypatch.delenv("HETMESH_PURE_PYTHON")
    assert default_backend() == ("native" if native_available() else "python")
