"""Probing: match rules on fake /proc, /sys, /dev trees; backends; the probe report; the CLI."""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from edge_agent.cli import main
from edge_agent.errors import InvalidInput, ProfileError
from edge_agent.resources.backends import cpu, fpga, npu
from edge_agent.resources.device import Capability, Device
from edge_agent.resources.matching import best_match, check_rule, collect_host_facts
from edge_agent.resources.probe import (
    MODE_DETECTED,
    MODE_EMULATED,
    MODE_PROFILE,
    emulate_profile,
    probe_machine,
)
from edge_agent.resources.profiles import FIGURE_STATUSES, list_profiles
from edge_agent.resources.vocab import DeviceKind

NO_NVIDIA_DRIVER = not Path("/proc/driver/nvidia").exists()


def put(root: Path, path: str, content: str | bytes = "") -> Path:
    """Create ``path`` (absolute, e.g. "/dev/rknpu") under ``root`` with ``content``."""
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    return target


@pytest.fixture
def rockchip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake RK3588 board: device tree, /dev/rknpu, an ARM cpuinfo; arch aarch64."""
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    put(tmp_path, "/proc/device-tree/compatible", b"radxa,rock-5b\0rockchip,rk3588\0")
    put(tmp_path, "/dev/rknpu")
    put(
        tmp_path,
        "/proc/cpuinfo",
        "processor\t: 0\nFeatures\t: fp asimd asimddp asimdhp\n\n"
        "Hardware\t: Rockchip RK3588\nModel\t: Radxa ROCK 5B\n",
    )
    return tmp_path


CAP = Capability(6000.0, 1500.0, 0.0, 0.0, 10.0, 1.0, 6.0, precision_mask=0b011)


@dataclass(frozen=True)
class FakeProfile:
    """A firmware profile built in the test, independent of the shipped files."""

    id: str
    match_priority: int
    match_rules: tuple[dict[str, str], ...]
    name: str = "fake board"

    def devices(self, emulated: bool, id_prefix: str | None = None) -> list[Device]:
        prefix = id_prefix or self.id
        return [Device(f"{prefix}/npu0", DeviceKind.NPU, "fake NPU", CAP, profile=self.id)]

    def device_spec(self, device_local_id: str) -> dict[str, Any]:
        assert device_local_id == "npu0"
        fig = {"value": 6000, "unit": "GOPS", "status": "official", "source": "datasheet"}
        return {"peak_gops": {"int8": fig}, "max_power_w": {**fig, "status": "unverified"}}


# --- match rules -------------------------------------------------------------------------


def test_rockchip_rule_keys_are_anded(rockchip: Path) -> None:
    facts = collect_host_facts(rockchip)
    assert facts.dt_compatible == ("radxa,rock-5b", "rockchip,rk3588")
    assert facts.cpu_model == "Radxa ROCK 5B"
    assert "/dev/rknpu" in facts.device_nodes
    rule = {"dt_compatible": "rockchip,rk3588", "device_node": "/dev/rknpu*", "arch": "aarch64"}
    evidence = check_rule(rule, facts, rockchip)
    assert evidence is not None and "device node /dev/rknpu" in evidence
    assert check_rule({**rule, "device_node": "/dev/hailo*"}, facts, rockchip) is None
    assert check_rule({"dt_compatible": "rockchip"}, facts, rockchip) is None  # whole entries
    assert check_rule({"cpu_model_regex": r"ROCK\s5"}, facts, rockchip) is not None


def test_highest_priority_matching_profile_wins(rockchip: Path) -> None:
    facts = collect_host_facts(rockchip)
    profiles = [
        ("generic_arm", 0, [{"arch": "aarch64"}]),
        ("rk3588", 50, [{"dt_compatible": "nvidia,tegra234"}, {"device_node": "/dev/rknpu*"}]),
        ("rk3588_any_npu", 10, [{"device_node": "/dev/rknpu"}]),
        ("jetson", 99, [{"dt_compatible": "nvidia,tegra234"}]),
    ]
    match = best_match(profiles, facts, rockchip)
    assert match is not None
    assert (match.profile_id, match.priority, match.rule_index) == ("rk3588", 50, 1)
    assert match.board_specific and "rule 1: device node /dev/rknpu" in match.reason
    tie = best_match(
        [("b", 5, [{"arch": "aarch64"}]), ("a", 5, [{"arch": "aarch64"}])], facts, rockchip
    )
    assert tie is not None and tie.profile_id == "a" and not tie.board_specific
    assert (
        best_match([("jetson", 99, [{"dt_compatible": "nvidia,tegra234"}])], facts, rockchip)
        is None
    )


def test_pci_usb_and_sysfs_rules(tmp_path: Path) -> None:
    put(tmp_path, "/sys/bus/pci/devices/0000:01:00.0/vendor", "0x1E60\n")
    put(tmp_path, "/sys/bus/pci/devices/0000:01:00.0/device", "0x2864\n")
    put(tmp_path, "/sys/bus/usb/devices/2-1/idVendor", "18d1\n")
    put(tmp_path, "/sys/bus/usb/devices/2-1/idProduct", "9302\n")
    put(tmp_path, "/sys/class/fpga_manager/fpga0/name", "Xilinx ZynqMP FPGA Manager")
    facts = collect_host_facts(tmp_path)
    assert facts.pci_ids == ("1e60:2864",) and facts.usb_ids == ("18d1:9302",)
    assert check_rule({"pci_id": "1e60:2864"}, facts, tmp_path) == ["pci id 1e60:2864"]
    assert check_rule({"usb_id": "18d1:9302"}, facts, tmp_path) is not None
    assert check_rule({"usb_id": "1a6e:089a"}, facts, tmp_path) is None
    sysfs = {"sysfs_path": "/sys/class/fpga_manager/fpga*"}
    assert check_rule(sysfs, facts, tmp_path) == ["path /sys/class/fpga_manager/fpga0"]
    assert check_rule({"sysfs_path": "/sys/class/drm/card*"}, facts, tmp_path) is None


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({}, "at least one key"),
        ({"board": "x"}, "unknown rule key"),
        ({"cpu_model_regex": "("}, "bad regular expression"),
        ({"arch": 3}, "non-empty string"),
    ],
)
def test_malformed_rules_are_rejected(tmp_path: Path, rule: dict[str, Any], problem: str) -> None:
    facts = collect_host_facts(tmp_path)
    with pytest.raises(ValueError, match=problem):
        check_rule(rule, facts, tmp_path)
    with pytest.raises(ProfileError, match=r"bad_board: field 'match.any\[0\]'"):
        best_match([("bad_board", 1, [rule])], facts, tmp_path)


# --- backends ----------------------------------------------------------------------------


def test_npu_nodes_and_coral_usb(tmp_path: Path) -> None:
    put(tmp_path, "/dev/apex_0")
    put(tmp_path, "/dev/hailo0")
    put(tmp_path, "/dev/accel/accel0")
    driver = tmp_path / "sys/class/accel/accel0/device/driver"
    driver.parent.mkdir(parents=True)
    os.symlink("../../../../bus/pci/drivers/intel_vpu", driver)
    put(tmp_path, "/sys/bus/usb/devices/1-1/idVendor", "1a6e")
    put(tmp_path, "/sys/bus/usb/devices/1-1/idProduct", "089a")
    found = {d.name: d for d in npu.detect(tmp_path)}
    assert set(found) == {
        "Google Coral Edge TPU (PCIe/M.2)",
        "Hailo NPU",
        "Intel NPU",
        "Google Coral USB Accelerator (firmware not yet loaded)",
    }
    assert all(d.kind == DeviceKind.NPU and not d.schedulable for d in found.values())
    assert found["Intel NPU"].facts == {"node": "/dev/accel/accel0", "driver": "intel_vpu"}
    assert found["Hailo NPU"].to_device("npu1").kind == DeviceKind.NPU
    empty = npu.scan(tmp_path / "nothing")
    assert empty.devices == () and empty.absent_reason and "no NPU" in empty.absent_reason


def test_fpga_manager_entry(tmp_path: Path) -> None:
    put(tmp_path, "/sys/class/fpga_manager/fpga0/name", "Xilinx ZynqMP FPGA Manager\n")
    put(tmp_path, "/sys/class/fpga_manager/fpga0/state", "operating\n")
    (device,) = fpga.detect(tmp_path)
    assert device.kind == DeviceKind.FPGA and device.name == "Xilinx ZynqMP FPGA Manager"
    assert device.facts == {"sysfs": "/sys/class/fpga_manager/fpga0", "state": "operating"}
    assert fpga.scan(tmp_path / "none").absent_reason is not None


@pytest.mark.platform
@pytest.mark.skipif(platform.machine() != "x86_64", reason="asserts this x86_64 machine")
def test_cpu_probe_on_this_machine() -> None:
    (device,) = cpu.detect()
    assert device.kind == DeviceKind.CPU_X86
    assert int(str(device.facts["physical_cores"])) >= 1
    assert device.capability.peak_fp32_gops > 0 and device.schedulable
    assert device.sources["peak_fp32_gops"].startswith("derived: ")
    assert device.capability.memory_bytes == psutil.virtual_memory().total


def test_cpu_clock_falls_back_to_cpuinfo_then_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 4)
    monkeypatch.setattr(psutil, "cpu_freq", lambda: None)
    put(
        tmp_path,
        "/proc/cpuinfo",
        "model name\t: Test CPU\ncpu MHz\t\t: 3000.000\nflags\t\t: sse2 avx avx2 fma\n",
    )
    (device,) = cpu.detect(tmp_path)
    assert device.facts["max_ghz"] == 3.0 and device.facts["isa"] == "avx2_fma"
    assert "cpu MHz" in str(device.facts["ghz_source"])
    assert device.capability.peak_fp32_gops == pytest.approx(4 * 3.0 * 32)
    assert device.capability.peak_fp16_gops == 0.0  # no native fp16
    monkeypatch.setattr(psutil, "cpu_freq", lambda: SimpleNamespace(current=0.0, max=0.0))
    (device,) = cpu.detect(tmp_path / "no-proc")
    assert device.facts["max_ghz"] == cpu.DEFAULT_CPU_GHZ
    assert str(device.facts["ghz_source"]).startswith("default")
    assert device.facts["isa"] == "generic"


def test_isa_table() -> None:
    assert cpu.isa_of(DeviceKind.CPU_X86, {"avx2", "fma", "avx512f"}) == "avx512"
    assert cpu.isa_of(DeviceKind.CPU_X86, {"avx", "avx2"}) == "avx"  # AVX2 without FMA
    assert cpu.isa_of(DeviceKind.CPU_ARM, {"fp", "asimd"}) == "neon"
    assert cpu.FP32_FLOP_PER_CYCLE["avx2_fma"] == 32
    assert cpu.FP32_FLOP_PER_CYCLE["avx512"] == 64
    assert cpu.FP32_FLOP_PER_CYCLE["neon"] == 16


# --- probe reports -----------------------------------------------------------------------


def test_board_profile_supplies_devices(rockchip: Path) -> None:
    board = FakeProfile("rk3588_test", 50, ({"dt_compatible": "rockchip,rk3588"},))
    generic = FakeProfile("generic_x86", 90, ({"arch": "x86_64"},))
    report = probe_machine(rockchip, profiles=[generic, board])
    assert report.mode == MODE_PROFILE and report.profile_id == "rk3588_test"
    assert report.profile_reason == "priority 50, rule 0: dt compatible 'rockchip,rk3588'"
    assert [(d.id, d.kind, d.emulated) for d in report.devices] == [
        ("rk3588_test/npu0", DeviceKind.NPU, False)
    ]
    assert [d.name for d in report.detected if d.kind == DeviceKind.NPU] == ["Rockchip NPU"]
    assert report.sources["rk3588_test/npu0"] == {
        "peak_int8_gops": "official: datasheet",
        "max_power_w": "unverified: datasheet",
    }


def test_generic_profile_keeps_detected_devices(rockchip: Path) -> None:
    report = probe_machine(rockchip, profiles=[FakeProfile("arm", 1, ({"arch": "aarch64"},))])
    assert report.mode == MODE_DETECTED and report.profile_id == "arm"
    assert [(d.id, d.kind) for d in report.devices] == [("cpu0", DeviceKind.CPU_ARM)]
    assert report.devices[0].name == "Radxa ROCK 5B"
    detected = json.loads(json.dumps(report.to_json()))["detected"]
    npu_entry = {"kind": "npu", "name": "Rockchip NPU", "facts": {"node": "/dev/rknpu"}}
    assert {**npu_entry, "has_figures": False} in detected
    assert "detected, not scheduled (no figures without a profile): Rockchip NPU" in report.table()


def test_emulated_board_labels_every_device(tmp_path: Path) -> None:
    board = FakeProfile("rk3588_test", 50, ({"dt_compatible": "rockchip,rk3588"},))
    report = emulate_profile("rk3588_test", profiles=[board])
    assert report.mode == MODE_EMULATED and report.emulated
    assert report.devices and all(d.emulated for d in report.devices)
    assert "emulated board" in report.table() and report.to_json()["emulated"] is True
    with pytest.raises(InvalidInput, match=r"unknown profile 'x'; available: rk3588_test"):
        emulate_profile("x", profiles=[board])


def test_table_lists_devices_and_absent_backends(tmp_path: Path) -> None:
    table = probe_machine(tmp_path, profiles=[]).table().splitlines()
    assert table[2].split() == [
        "ID",
        "KIND",
        "NAME",
        "PRECISIONS",
        "INT8",
        "FP16",
        "FP32",
        "MEMORY",
        "POWER",
        "W",
        "EMU",
    ]
    assert table[3].startswith("cpu0 ") and table[3].endswith(" no")
    assert any(line.startswith("absent: npu: ") for line in table)


# --- command line ------------------------------------------------------------------------


@pytest.mark.platform
@pytest.mark.skipif(not NO_NVIDIA_DRIVER, reason="this machine has an NVIDIA driver")
def test_cli_probe_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kinds = [d["kind"] for d in doc["devices"]]
    assert any(k.startswith("cpu") for k in kinds) and not any(k.startswith("gpu") for k in kinds)
    assert doc["emulated"] is False and doc["absent"]["nvidia"].startswith("no NVIDIA driver")


def test_cli_probe_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe"]) == 0
    out = capsys.readouterr().out
    assert "devices: " in out and "\ncpu0 " in out


def test_cli_emulates_rk3588(capsys: pytest.CaptureFixture[str]) -> None:
    """Needs the shipped firmware_profiles/rk3588.json."""
    assert main(["probe", "--profile", "rk3588", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    npus = [d for d in doc["devices"] if d["kind"] == "npu"]
    assert npus and all(d["emulated"] is True for d in doc["devices"])
    assert doc["mode"] == "emulated board"


def test_cli_unknown_profile_lists_available(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--profile", "no_such_board"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown profile 'no_such_board'; available: " in err
    assert all(name in err for name in list_profiles())


def test_cli_profiles_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert all(line.split()[0] in list_profiles() for line in out.splitlines())
    assert len(out.splitlines()) == len(list_profiles())


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["probe", "--bogus"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["probe", "--profiles-dir", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main([]) == 2


def test_packaged_rk3588_profile_matches_fake_board(rockchip: Path) -> None:
    """Needs the shipped firmware_profiles/rk3588.json."""
    report = probe_machine(rockchip)
    assert report.mode == MODE_PROFILE and report.profile_id == "rk3588"
    assert any(d.kind == DeviceKind.NPU and not d.emulated for d in report.devices)
    assert all(
        src.split(":")[0] in FIGURE_STATUSES
        for src in report.sources[report.devices[0].id].values()
    )
