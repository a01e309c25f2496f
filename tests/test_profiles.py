"""Firmware profiles: every shipped file loads, is sourced, converts, and bad files fail well."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_agent.errors import InvalidInput, ProfileError
from edge_agent.resources.profiles import (
    FIGURE_STATUSES,
    MATCH_RULE_KEYS,
    FirmwareProfile,
    list_profiles,
    load_profile,
    profiles_dir,
)
from edge_agent.resources.vocab import DeviceKind, Precision

REQUIRED = {
    "rpi5",
    "rk3588",
    "jetson_orin_nano",
    "jetson_orin_nx",
    "jetson_agx_orin",
    "coral_edgetpu_host",
    "hailo8_host",
    "kria_kv260",
    "imx8mp",
    "intel_n100",
    "qcs6490",
    "ascend310_host",
    "generic_x86_server",
}

# (profile, device) pairs for which the public devices.json has per-model latency rows.
WITH_PUBLISHED_LATENCIES = [
    ("rpi5", "cpu"),
    ("rk3588", "cpu"),
    ("rk3588", "npu"),
    ("jetson_orin_nano", "cpu"),
    ("jetson_orin_nano", "gpu"),
    ("jetson_orin_nx", "gpu"),
    ("jetson_agx_orin", "cpu"),
    ("jetson_agx_orin", "gpu"),
    ("jetson_agx_orin", "dla0"),
    ("jetson_agx_orin", "dla1"),
    ("coral_edgetpu_host", "tpu"),
    ("hailo8_host", "npu"),
    ("hailo8l_host", "npu"),
    ("kria_kv260", "fpga"),
    ("imx8mp", "cpu"),
    ("imx8mp", "npu"),
    ("intel_n100", "cpu"),
    ("qcs6490", "cpu"),
    ("qcs6490", "npu"),
    ("intel_core_ultra", "npu"),
    ("ryzen_ai", "npu"),
    ("snapdragon_x_elite", "npu"),
]


@pytest.fixture(scope="module")
def profiles() -> dict[str, FirmwareProfile]:
    return {name: load_profile(name) for name in list_profiles()}


def test_shipped_profiles_cover_the_required_boards(profiles: dict[str, FirmwareProfile]) -> None:
    assert len(profiles) >= 12
    assert not REQUIRED - profiles.keys(), sorted(REQUIRED - profiles.keys())
    for name, prof in profiles.items():
        assert prof.id == name
        assert prof.path.parent == profiles_dir()
        assert prof.device_specs and prof.match_rules


def test_every_figure_has_an_allowed_status_and_a_source(
    profiles: dict[str, FirmwareProfile],
) -> None:
    count = 0
    for prof in profiles.values():
        for field, fig in prof.figures():
            where = f"{prof.id}: {field}"
            assert fig["status"] in FIGURE_STATUSES, where
            assert isinstance(fig["source"], str) and fig["source"].strip(), where
            assert math.isfinite(fig["value"]) and fig["value"] >= 0, where
            if fig["status"] == "unverified" and "estimate" in fig["source"]:
                assert fig.get("note"), f"{where}: an estimate must say what it assumes"
            count += 1
        for rows in prof.latencies.values():
            for row in rows:
                assert row["status"] in FIGURE_STATUSES and row["source"].strip()
    assert count > 12 * 15


def test_rk3588_converts_to_a_cpu_and_a_6_tops_npu(profiles: dict[str, FirmwareProfile]) -> None:
    devices = {d.id: d for d in profiles["rk3588"].devices(emulated=True)}
    npu = devices["rk3588/npu"]
    assert npu.kind is DeviceKind.NPU and npu.emulated and npu.profile == "rk3588"
    assert npu.capability.peak_int8_gops == pytest.approx(6000)
    assert npu.capability.peak_fp32_gops == 0
    assert npu.capability.peak_gops(Precision.FP32) == 0
    assert npu.capability.peak_gops(Precision.INT4) == pytest.approx(6000)
    assert 0 < npu.capability.efficiency <= 1
    assert devices["rk3588/cpu"].kind is DeviceKind.CPU_ARM
    assert npu.summary()["precisions"] == ["int8", "fp16", "int4"]


def test_id_prefix_and_units(profiles: dict[str, FirmwareProfile]) -> None:
    devices = profiles["jetson_orin_nano"].devices(emulated=False, id_prefix="box7")
    assert [d.id for d in devices] == ["box7/cpu", "box7/gpu"]
    gpu = devices[1].capability
    assert devices[1].kind is DeviceKind.GPU_NVIDIA and not devices[1].emulated
    assert gpu.memory_bytes == 8 * 2**30  # bytes, not GB
    assert gpu.memory_bw_gbs == pytest.approx(68)
    assert gpu.peak_int8_gops == pytest.approx(20000)  # dense = 40 sparse TOPS / 2
    assert 0 < gpu.dispatch_s < 0.01  # seconds


def test_jetson_agx_orin_has_a_gpu_and_two_dlas(profiles: dict[str, FirmwareProfile]) -> None:
    kinds = [(d.id, d.kind) for d in profiles["jetson_agx_orin"].devices(emulated=False)]
    assert ("jetson_agx_orin/gpu", DeviceKind.GPU_NVIDIA) in kinds
    assert ("jetson_agx_orin/dla0", DeviceKind.NPU) in kinds
    assert ("jetson_agx_orin/dla1", DeviceKind.NPU) in kinds


def test_kv260_fpga_has_reconfiguration_cost_and_configurations(
    profiles: dict[str, FirmwareProfile],
) -> None:
    prof = profiles["kria_kv260"]
    fpga = next(d for d in prof.devices(emulated=False) if d.kind is DeviceKind.FPGA)
    assert fpga.capability.reconfig_s > 0
    assert fpga.capability.peak_int8_gops == pytest.approx(1230)
    configs = prof.device_spec("fpga")["configurations"]
    assert [c["id"] for c in configs] == [1, 2] and "B4096" in configs[0]["name"]


def test_host_profiles_carry_a_fallback_cpu(profiles: dict[str, FirmwareProfile]) -> None:
    for name in ("coral_edgetpu_host", "hailo8_host", "ascend310_host"):
        kinds = {d.kind for d in profiles[name].devices(emulated=True)}
        assert DeviceKind.CPU_X86 in kinds and DeviceKind.NPU in kinds, name
    tpu = profiles["coral_edgetpu_host"].device_spec("tpu")
    assert tpu["precisions"] == ["int8"]
    assert tpu["peak_gops"]["fp16"]["value"] == 0 and tpu["peak_gops"]["fp32"]["value"] == 0


def test_generic_x86_server_is_the_honest_lowest_priority_fallback(
    profiles: dict[str, FirmwareProfile],
) -> None:
    generic = profiles["generic_x86_server"]
    assert {"arch": "x86_64"} in generic.match_rules
    assert generic.match_priority < min(
        p.match_priority for p in profiles.values() if p.id != generic.id
    )
    assert {fig["status"] for _, fig in generic.figures()} <= {"unverified", "derived"}


def test_match_rules_use_only_known_keys(profiles: dict[str, FirmwareProfile]) -> None:
    assert {"arch", "cpu_model_regex", "dt_compatible", "device_node", "pci_id"} <= set(
        MATCH_RULE_KEYS
    )
    for prof in profiles.values():
        for rule in prof.match_rules:
            assert rule and set(rule) <= MATCH_RULE_KEYS, prof.id
    coral = profiles["coral_edgetpu_host"].match_rules
    assert {"pci_id": "1ac1:089a"} in coral and {"usb_id": "18d1:9302"} in coral
    assert {"pci_id": "1e60:2864"} in profiles["hailo8_host"].match_rules


@pytest.mark.parametrize(("profile", "device"), WITH_PUBLISHED_LATENCIES)
def test_published_latencies_are_carried(
    profiles: dict[str, FirmwareProfile], profile: str, device: str
) -> None:
    rows = profiles[profile].latencies[device]
    assert rows, f"{profile}/{device} lost its latency rows"
    assert all(r["latency_ms"] > 0 and r["model"] == r["model"].lower() for r in rows)


def test_published_latency_lookup(profiles: dict[str, FirmwareProfile]) -> None:
    rk = profiles["rk3588"]
    assert rk.published_latency_ms("npu", "resnet50", "int8") == pytest.approx(9.083)
    assert rk.published_latency_ms("npu", "ResNet50", Precision.INT8) == pytest.approx(9.083)
    assert rk.published_latency_ms("npu", "resnet50", "fp32") is None
    assert rk.published_latency_ms("npu", "no_such_model") is None
    with pytest.raises(InvalidInput):
        rk.published_latency_ms("tpu", "resnet50")
    hailo = profiles["hailo8_host"]
    # 1000/FPS of a pipelined chip is not a latency: the hailortcli HW latency wins.
    assert hailo.published_latency_ms("npu", "resnet50_v1") == pytest.approx(2.936)
    assert hailo.published_latency_ms("npu", "yolov8n") is None
    assert hailo.published_latency_ms("npu", "yolov8n", include_throughput=True) == pytest.approx(
        0.965
    )
    kv = profiles["kria_kv260"]
    assert kv.published_latency_ms("fpga", "mobilenet_v2") == pytest.approx(3.441)
    assert profiles["imx8mp"].published_latency_ms("npu", "deeplabv3_mobilenetv2") == 586


def test_explicit_directory_wins(tmp_path: Path) -> None:
    src = profiles_dir() / "rk3588.json"
    (tmp_path / "rk3588.json").write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a profile", encoding="utf-8")
    assert list_profiles(tmp_path) == ["rk3588"]
    prof = load_profile("rk3588", directory=tmp_path)
    assert prof.path == tmp_path / "rk3588.json"
    assert load_profile(tmp_path / "rk3588.json").id == "rk3588"
    with pytest.raises(ProfileError, match="not found; profiles here: rk3588"):
        load_profile("rpi5", directory=tmp_path)


# ---- bad files --------------------------------------------------------------------------


def _raw() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((profiles_dir() / "rk3588.json").read_text("utf-8"))
    return doc


def _drop_source(doc: dict[str, Any]) -> None:
    del doc["devices"][1]["peak_gops"]["int8"]["source"]


def _bad_status(doc: dict[str, Any]) -> None:
    doc["board"]["memory_bw_gbs"]["status"] = "third_party"


def _unknown_field(doc: dict[str, Any]) -> None:
    doc["devices"][0]["turbo"] = True


def _unknown_kind(doc: dict[str, Any]) -> None:
    doc["devices"][1]["kind"] = "tpu"


def _non_numeric(doc: dict[str, Any]) -> None:
    doc["devices"][1]["memory_bytes"]["value"] = "8 GB"


def _wrong_unit(doc: dict[str, Any]) -> None:
    doc["devices"][1]["peak_gops"]["int8"]["unit"] = "TOPS"


def _bad_rule(doc: dict[str, Any]) -> None:
    doc["match"]["any"][0] = {"pci": "1e60:2864"}


def _bad_pci(doc: dict[str, Any]) -> None:
    doc["match"]["any"][0] = {"pci_id": "1E60-2864"}


def _peak_without_precision(doc: dict[str, Any]) -> None:
    doc["devices"][1]["peak_gops"]["fp32"]["value"] = 100


def _precision_without_peak(doc: dict[str, Any]) -> None:
    doc["devices"][1]["precisions"].append("fp32")


def _bad_latency_precision(doc: dict[str, Any]) -> None:
    doc["devices"][1]["latencies"][0]["precision"] = "w8a8"


def _bad_efficiency(doc: dict[str, Any]) -> None:
    doc["devices"][1]["efficiency"]["value"] = 1.5


def _id_mismatch(doc: dict[str, Any]) -> None:
    doc["id"] = "rk3399"


BAD_FILES: list[tuple[Callable[[dict[str, Any]], None], str, str]] = [
    (_drop_source, "devices[1].peak_gops.int8.source", "missing"),
    (_bad_status, "board.memory_bw_gbs.status", "official, measured, derived, unverified"),
    (_unknown_field, "devices[0].turbo", "not a known field"),
    (_unknown_kind, "devices[1].kind", "unknown name 'tpu'"),
    (_non_numeric, "devices[1].memory_bytes.value", "must be a number"),
    (_wrong_unit, "devices[1].peak_gops.int8.unit", "convert the value to 'GOPS'"),
    (_bad_rule, "match.any[0].pci", "unknown match key"),
    (_bad_pci, "match.any[0].pci_id", "lower-case hex"),
    (_peak_without_precision, "devices[1].peak_gops.fp32.value", "not in precisions"),
    (_precision_without_peak, "devices[1].peak_gops.fp32.value", "give the peak"),
    (_bad_latency_precision, "devices[1].latencies[0].precision", "unknown name 'w8a8'"),
    (_bad_efficiency, "devices[1].efficiency.value", "(0, 1]"),
    (_id_mismatch, "id", "file is named 'rk3588'"),
]


@pytest.mark.parametrize(
    ("mutate", "field", "hint"), BAD_FILES, ids=lambda v: getattr(v, "__name__", "")
)
def test_bad_file_names_the_file_and_field(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], field: str, hint: str
) -> None:
    doc = copy.deepcopy(_raw())
    mutate(doc)
    path = tmp_path / "rk3588.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    err = info.value
    assert err.path == str(path) and err.field == field
    assert hint in err.problem
    assert str(path) in str(err) and field in str(err)
    assert isinstance(err, ValueError)


def test_invalid_json_is_a_profile_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"schema": ', encoding="utf-8")
    with pytest.raises(ProfileError, match=r"broken\.json.*not valid JSON \(line 1"):
        load_profile(path)


def test_runtime_code_never_reads_the_shared_data_or_the_build_script() -> None:
    package = Path(__file__).resolve().parents[1] / "edge_agent"
    for source in package.rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        for dev_only in ("build_profiles", "profile_builder", "profile_data", "shared/data"):
            assert dev_only not in text, (source, dev_only)
