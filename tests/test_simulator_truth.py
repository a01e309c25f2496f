"""Ground truth comes from published or measured figures, never from the kernel's roofline."""

from __future__ import annotations

import math

import pytest

from cloud_hub.simulator import parse_fleet, run
from cloud_hub.simulator.agents import feasibility
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.truth import (
    SCALED_SIGMA,
    GroundTruth,
    published_s,
    roofline_s,
    scaled_s,
)
from cloud_hub.simulator.workload import Workload
from edge_agent.placement import Policy

# hailo8_host: the NPU publishes one latency row (resnet50_v1, 2.936 ms), the host CPU none
HAILO = parse_fleet({"boxes": [{"id": "h", "profile": "hailo8_host"}]}, "f.json")
NPU = next(sd for sd in HAILO.devices if sd.local_id == "npu")
CPU = next(sd for sd in HAILO.devices if sd.local_id == "cpu")


def test_a_pair_without_a_figure_is_scaled_from_the_devices_own_published_figure() -> None:
    assert published_s(NPU, "mobilenet_v2", "int8") is None
    seconds, ref = scaled_s(NPU, "mobilenet_v2", "int8") or (0.0, "")
    assert ref == "resnet50"  # the only model with a figure there
    ratio = model_info("mobilenet_v2").gops / model_info("resnet50").gops
    assert seconds == pytest.approx(2.936e-3 * ratio)
    truth = GroundTruth(HAILO, [("mobilenet_v2", "int8"), ("resnet50", "int8")], 1, 0.0, 7)
    assert truth.source[("mobilenet_v2", "int8")][NPU.index] == "scaled"
    assert truth.source[("resnet50", "int8")][NPU.index] == "published"
    assert truth.base[("resnet50", "int8")][NPU.index] == pytest.approx(2.936e-3)
    # the scaled pair carries its own factor (seeded), not the kernel's roofline
    factor = truth.base[("mobilenet_v2", "int8")][NPU.index] / seconds
    assert factor != pytest.approx(1.0) and abs(math.log(factor)) < 5 * SCALED_SIGMA
    assert truth.base[("mobilenet_v2", "int8")][NPU.index] != pytest.approx(
        roofline_s(NPU, "mobilenet_v2", "int8"), rel=1e-3
    )
    again = GroundTruth(HAILO, [("mobilenet_v2", "int8")], 1, 0.0, 7)
    assert again.base == {("mobilenet_v2", "int8"): truth.base[("mobilenet_v2", "int8")]}


def test_a_device_with_no_figure_is_left_out_and_never_given_work() -> None:
    types = [("mobilenet_v2", "int8")]
    truth = GroundTruth(HAILO, types, 1, 0.0, 1)
    assert truth.source[types[0]][CPU.index] == "none"
    assert math.isinf(truth.base[types[0]][CPU.index])
    kernel_ok = feasibility(HAILO, types)
    assert CPU.index in kernel_ok[types[0]]  # the kernel would place there
    assert truth.available(kernel_ok) == {types[0]: [NPU.index]}
    assert truth.available(kernel_ok, published_only=True) == {types[0]: []}
    assert truth.coverage(truth.available(kernel_ok)) == 0.0  # the NPU pair is scaled
    wl = Workload(
        path="<mix>",
        mix=({"model": "mobilenet_v2", "precision": "int8", "weight": 1.0,
              "max_latency_ms": 50.0, "priority": 0, "tenant": "default",
              "deferrable": False, "deadline_s": 0.0, "config_id": 0},),
        load=0.9, n_tasks=300,
    )  # fmt: skip
    # the NPU 1000x slow: the kernel's roofline makes the CPU by far the better choice
    slow = parse_fleet(
        {"boxes": [{"id": "h", "profile": "hailo8_host", "slowdown": {"npu": 1000}}]}, "f.json"
    )
    doc = run(slow, wl, [Policy.template("latency-first")], seed=1)
    assert doc["ground_truth"]["left_out_pairs"] == 1
    assert doc["ground_truth"]["pairs"] == 1
    for name, metrics in doc["policies"].items():  # hetmesh and every baseline
        assert set(metrics["device_share"]) == {NPU.device.kind.name.lower()}, name
        assert metrics["rejected"] == 0, name


def test_identical_devices_share_a_scaled_pairs_error_and_only_their_slowdowns_differ() -> None:
    # two boxes of one profile: the GOPs rule's error is the network's on that hardware
    fleet = parse_fleet(
        {
            "boxes": [
                {"id": "a", "profile": "hailo8_host"},
                {"id": "b", "profile": "hailo8_host", "slowdown": {"npu": 1.5}},
            ]
        },
        "f.json",
    )
    npus = [sd for sd in fleet.devices if sd.local_id == "npu"]
    assert len(npus) == 2 and npus[1].slowdown == pytest.approx(1.5)
    tt = ("mobilenet_v2", "int8")
    for seed in range(1, 6):
        truth = GroundTruth(fleet, [tt], 1, 0.0, seed)
        assert [truth.source[tt][sd.index] for sd in npus] == ["scaled", "scaled"]
        first, second = (truth.base[tt][sd.index] for sd in npus)
        assert second == pytest.approx(first * 1.5)
    # the factor is still drawn per run: another seed, another error
    bases = {GroundTruth(fleet, [tt], 1, 0.0, s).base[tt][npus[0].index] for s in (1, 2)}
    assert len(bases) == 2
