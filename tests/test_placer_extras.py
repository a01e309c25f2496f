"""Placer extras: re-homing links, sharing corrections, previews and feasibility."""

from __future__ import annotations

import json

import pytest

from edge_agent.errors import InvalidInput
from edge_agent.placement import (
    Capability,
    Device,
    Placer,
    Policy,
    Requirements,
    Semantics,
    TaskContract,
    native_available,
)
from edge_agent.resources.vocab import DeviceKind, Health, Precision
from tests.support.placer_fleet import BACKENDS

INT8 = 1 << Precision.INT8
FP32 = 1 << Precision.FP32


def _device(dev_id: str, kind: DeviceKind, gops: float, prec: int, **cap: float) -> Device:
    capability = Capability(
        peak_int8_gops=gops,
        peak_fp16_gops=gops / 2,
        peak_fp32_gops=gops / 4,
        memory_bytes=8e9,
        memory_bw_gbs=100.0,
        idle_power_w=1.0,
        max_power_w=10.0,
        precision_mask=prec,
        **cap,
    )
    return Device(dev_id, kind, dev_id, capability)


def _fleet() -> list[Device]:
    return [
        _device("cpu", DeviceKind.CPU_ARM, 200.0, INT8 | FP32),
        _device("npu", DeviceKind.NPU, 6000.0, INT8),
    ]


def _task(cls: str = "resnet", precision: str = "int8") -> TaskContract:
    return TaskContract(
        Semantics(gflops=8.0, param_bytes=25e6, input_bytes=6e5, precision=precision),
        Requirements(model_format=None),
        task_class=cls,
    )


@BACKENDS
def test_a_device_rehomed_far_away_loses_to_a_local_one(backend: str) -> None:
    """update_live(link_latency_s=...) makes a fast device remote, and the choice follows."""
    placer = Placer(_fleet(), Policy.template("latency-first"), backend=backend)
    assert placer.preview(_task()).device_id == "npu"
    placer.update_live("npu", link_latency_s=0.5, link_bw_gbs=0.1)
    decision = placer.preview(_task())
    assert decision.device_id == "cpu"
    assert decision.why_not("npu").startswith("npu was feasible")


@BACKENDS
def test_link_transfer_overlaps_the_queue_wait(backend: str) -> None:
    """Estimated latency is max(queue, link) + service, not their sum."""
    placer = Placer([_fleet()[1]], Policy.template("latency-first"), backend=backend)
    service = placer.preview(_task()).latency_s
    placer.update_live("npu", link_latency_s=0.010)
    assert placer.preview(_task()).latency_s == pytest.approx(0.010 + service)
    placer.update_live("npu", queued_s=0.004)  # shorter than the transfer: hidden by it
    assert placer.preview(_task()).latency_s == pytest.approx(0.010 + service)
    placer.update_live("npu", queued_s=0.030)  # longer: the wait dominates
    assert placer.preview(_task()).latency_s == pytest.approx(0.030 + service)


def test_bad_link_values_raise_and_change_nothing() -> None:
    """A NaN or negative link is refused; placements keep working."""
    placer = Placer(_fleet(), backend="python")
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(InvalidInput, match="link_latency_s"):
            placer.update_live("npu", link_latency_s=bad)
    assert placer.preview(_task()).placed


@BACKENDS
def test_preview_commits_nothing(backend: str) -> None:
    """preview decides like place_one but leaves queues and memory as they were."""
    placer = Placer(_fleet(), backend=backend)
    before = {d: placer.live(d) for d in placer.device_ids}
    preview = placer.preview(_task())
    assert {d: placer.live(d) for d in placer.device_ids} == before
    placed = placer.place_one(_task())
    assert placed.device_ids == preview.device_ids
    assert placed.latency_s == pytest.approx(preview.latency_s)
    assert placer.live(placed.device_ids[0])["queued_s"] > 0


@BACKENDS
def test_feasibility_names_each_devices_constraint(backend: str) -> None:
    """An fp32 task: the int8-only NPU is rejected for precision, the CPU is ok."""
    placer = Placer(_fleet(), backend=backend)
    assert placer.feasibility(_task(precision="fp32")) == {
        "cpu": "ok",
        "npu": "precision unsupported",
    }
    assert all(placer.live(d)["queued_s"] == 0 for d in placer.device_ids)


def test_feasibility_needs_the_reasons_kept() -> None:
    """A Placer built without per-device reasons says so instead of guessing."""
    placer = Placer(_fleet(), backend="python", keep_reasons=False)
    with pytest.raises(InvalidInput, match="keep_reasons"):
        placer.feasibility(_task())


@BACKENDS
def test_corrections_move_between_placers(backend: str) -> None:
    """What one Placer learned, another adopts through a JSON round trip."""
    teacher = Placer(_fleet(), Policy.template("latency-first"), backend=backend)
    for _ in range(12):
        d = teacher.place_one(_task())
        slow = 40.0 if d.device_id == "npu" else 1.0  # the NPU is far slower than rated
        teacher.feedback(d, latency_s=d.service_s * slow)
    table = json.loads(json.dumps(teacher.export_corrections()))
    assert table["resnet"]["npu"] > 5
    student = Placer(_fleet(), Policy.template("latency-first"), backend=backend)
    assert student.preview(_task()).device_id == "npu"
    assert student.import_corrections(table) == 2 * len(table)
    assert student.correction("resnet", "npu") == pytest.approx(teacher.correction("resnet", "npu"))
    assert student.preview(_task()).device_id == "cpu"
    assert student.preview(_task("other")).device_id == "npu"  # per class


def test_import_skips_unknown_devices_and_rejects_bad_factors() -> None:
    """Unknown devices are skipped; a bad factor raises before anything is changed."""
    placer = Placer(_fleet(), backend="python")
    assert placer.import_corrections({"resnet": {"gpu-elsewhere": 2.0, "npu": 3.0}}) == 1
    assert placer.correction("resnet", "npu") == 3.0
    for bad in (0.0, -1.0, float("nan"), "fast", True):
        with pytest.raises(InvalidInput):
            placer.import_corrections({"resnet": {"cpu": 9.0, "npu": bad}})  # type: ignore[dict-item]
    assert placer.correction("resnet", "cpu") == 1.0
    assert placer.correction("resnet", "npu") == 3.0


@BACKENDS
def test_a_configuration_task_goes_only_to_an_fpga(backend: str) -> None:
    """A task that needs an FPGA configuration is refused by every other kind, by name."""
    fpga = _device("fpga", DeviceKind.FPGA, 1200.0, INT8, reconfig_s=0.5)
    placer = Placer([*_fleet(), fpga], Policy.template("latency-first"), backend=backend)
    task = TaskContract(
        Semantics(gflops=8.0, precision="int8"),
        Requirements(model_format=None, config_id=3),
    )
    reasons = placer.feasibility(task)
    assert reasons["fpga"] == "ok"
    assert reasons["cpu"] == reasons["npu"] == "cannot load a configuration (not an FPGA)"
    first = placer.place_one(task)
    assert first.device_id == "fpga" and first.latency_s > 0.5  # pays the swap
    assert placer.live("fpga")["loaded_config"] == 3
    placer.release(first)
    assert placer.preview(task).latency_s == pytest.approx(first.latency_s - 0.5)  # held now


@BACKENDS
def test_site_carbon_and_loaded_config_can_be_updated(backend: str) -> None:
    """update_live writes carbon intensity and the loaded configuration; estimates follow."""
    fpga = _device("fpga", DeviceKind.FPGA, 1200.0, INT8, reconfig_s=0.5)
    placer = Placer([fpga], backend=backend)
    task = TaskContract(Semantics(gflops=8.0, precision="int8"), Requirements(config_id=3))
    assert placer.preview(task).carbon_g == 0.0
    placer.update_live("fpga", carbon_g_per_kwh=400.0)
    assert placer.preview(task).carbon_g > 0.0
    slow = placer.preview(task).latency_s
    placer.update_live("fpga", loaded_config=3)
    assert placer.preview(task).latency_s == pytest.approx(slow - 0.5)
    with pytest.raises(InvalidInput, match="carbon_g_per_kwh"):
        placer.update_live("fpga", carbon_g_per_kwh=float("nan"))


@pytest.mark.skipif(not native_available(), reason="kernel not built")
def test_interleaved_updates_keep_native_and_twin_in_step() -> None:
    """The native kernel reuses its device checks between calls; every write path still
    reaches its decisions: the same random mix of operations gives the twin's decisions."""
    import random

    placers = {
        b: Placer(_fleet(), Policy.template("balanced"), backend=b) for b in ("native", "python")
    }
    prepared = {
        b: [p.prepare(_task(f"c{i}", prec)) for i, prec in enumerate(["int8", "fp32", "int8"])]
        for b, p in placers.items()
    }
    rng = random.Random(7)
    open_decisions: dict[str, list] = {b: [] for b in placers}
    for step in range(300):
        op = rng.choice(["place", "place", "release", "feedback", "live", "advance"])
        seen = {}
        for backend, placer in placers.items():
            r = random.Random(step)  # the same choices for both backends
            held = open_decisions[backend]
            if op == "place":
                d = placer.place_one(prepared[backend][r.randrange(3)])
                seen[backend] = (d.device_ids, d.latency_s, d.score)
                if d.placed:
                    held.append(d)
            elif op in ("release", "feedback") and held:
                d = held.pop(r.randrange(len(held)))
                if op == "release":
                    placer.release(d)
                else:
                    placer.feedback(
                        d, latency_s=d.service_s * r.uniform(0.5, 3.0), energy_j=r.uniform(0.0, 1.0)
                    )
            elif op == "live":
                device = r.choice(placer.device_ids)
                placer.update_live(
                    device, utilization=r.random(), health=r.choice([Health.ONLINE, Health.SUSPECT])
                )
            elif op == "advance":
                placer.advance(r.uniform(0.0, 0.01))
        if seen:
            assert seen["native"] == seen["python"], f"step {step}"
    for device in placers["native"].device_ids:
        assert placers["native"].live(device) == placers["python"].live(device)
