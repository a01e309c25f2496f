"""NVIDIA probing through NVML: absent driver, error translation, derived GPU figures."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from edge_agent.errors import ProbeError
from edge_agent.resources.backends import nvidia
from edge_agent.resources.probe import probe_machine
from edge_agent.resources.vocab import DeviceKind

NO_NVIDIA_DRIVER = not Path("/proc/driver/nvidia").exists()


@pytest.mark.platform
@pytest.mark.skipif(not NO_NVIDIA_DRIVER, reason="this machine has an NVIDIA driver")
def test_nvml_absent_on_this_machine(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=nvidia.__name__)
    scan = nvidia.scan()
    assert scan.devices == ()
    assert scan.absent_reason is not None and scan.absent_reason.startswith("no NVIDIA driver")
    records = [r for r in caplog.records if r.name == nvidia.__name__]
    assert [r.levelno for r in records] == [logging.DEBUG]
    assert records[0].exc_info is None
    assert nvidia.detect() == []


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_nvml(init_error: int | None = None, **overrides: Any) -> SimpleNamespace:
    """A pynvml stand-in with one H100-like GPU (or an nvmlInit that fails)."""
    calls: list[str] = []

    def init() -> None:
        if init_error is not None:
            raise FakeNVMLError(init_error)

    def clock(_h: object, which: int) -> int:
        return 1980 if which == 0 else 2619

    api: dict[str, Any] = {
        "NVMLError": FakeNVMLError,
        "NVML_ERROR_DRIVER_NOT_LOADED": 9,
        "NVML_ERROR_NOT_SUPPORTED": 3,
        "NVML_ERROR_UNKNOWN": 999,
        "NVML_CLOCK_SM": 0,
        "NVML_CLOCK_MEM": 2,
        "NVML_TEMPERATURE_GPU": 0,
        "calls": calls,
        "nvmlInit": init,
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlSystemGetDriverVersion": lambda: "560.35",
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: f"h{i}",
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100",
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=80 * 2**30, free=70 * 2**30),
        "nvmlDeviceGetNumGpuCores": lambda h: 16896,
        "nvmlDeviceGetMaxClockInfo": clock,
        "nvmlDeviceGetMemoryBusWidth": lambda h: 5120,
        "nvmlDeviceGetPowerManagementLimit": lambda h: 700_000,
        "nvmlDeviceGetCudaComputeCapability": lambda h: (9, 0),
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=25),
        "nvmlDeviceGetTemperature": lambda h, s: 41,
        "nvmlDeviceGetPowerUsage": lambda h: 120_000,
    }
    api.update(overrides)
    return SimpleNamespace(**api)


def test_nvml_error_is_translated_to_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvidia, "_load_nvml", lambda: fake_nvml(init_error=9))
    scan = nvidia.scan()
    assert scan.devices == () and nvidia.detect() == []
    assert scan.absent_reason == "no NVIDIA driver (kernel driver not loaded)"
    assert scan.facts == {"nvml_error": "NVML_ERROR_DRIVER_NOT_LOADED"}
    monkeypatch.setattr(nvidia, "_load_nvml", lambda: None)
    assert nvidia.scan().absent_reason == "nvidia-ml-py (pynvml) is not installed"


def test_unexpected_nvml_error_is_a_probe_error_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(nvidia, "_load_nvml", lambda: fake_nvml(init_error=999))
    with pytest.raises(ProbeError, match="NVML_ERROR_UNKNOWN"):
        nvidia.scan()
    report = probe_machine(tmp_path, profiles=[])
    assert report.absent["nvidia"] == "probe failed: NVML initialisation failed: NVML_ERROR_UNKNOWN"
    assert [d.id for d in report.devices] == ["cpu0"]


def test_nvml_gpu_figures_are_derived(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = fake_nvml()
    monkeypatch.setattr(nvidia, "_load_nvml", lambda: fake)
    (gpu,) = nvidia.detect()
    cap = gpu.capability
    assert gpu.kind == DeviceKind.GPU_NVIDIA and gpu.name == "NVIDIA H100"
    assert cap.peak_fp32_gops == pytest.approx(16896 * 2 * 1.98)
    assert cap.peak_int8_gops == pytest.approx(4 * cap.peak_fp32_gops)
    assert cap.memory_bw_gbs == pytest.approx(5120 * 2619 * 2 / 8 / 1000)
    assert cap.max_power_w == 700.0 and cap.memory_bytes == 80 * 2**30
    assert gpu.sources["peak_fp32_gops"].startswith("derived: 16896 CUDA cores")
    assert gpu.live.utilization == 0.25 and gpu.live.memory_free_bytes == 70 * 2**30
    assert fake.calls == ["shutdown"]
    report = probe_machine(tmp_path, profiles=[])
    assert [d.id for d in report.devices] == ["cpu0", "gpu0"]
    assert report.devices[1].capability.execution_provider == "CUDAExecutionProvider"


def test_nvml_optional_queries_may_be_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(*_args: object) -> None:
        raise FakeNVMLError(3)

    fake = fake_nvml(nvmlDeviceGetNumGpuCores=unsupported)
    monkeypatch.setattr(nvidia, "_load_nvml", lambda: fake)
    (gpu,) = nvidia.detect()
    assert gpu.capability.peak_fp32_gops == 0.0 and not gpu.schedulable
    assert gpu.sources["peak_fp32_gops"].startswith("unverified: unknown")
