"""NVIDIA GPU backend: one device per GPU that NVML (nvidia-ml-py) reports.

No library or no driver is not an error: ``scan`` returns no devices and says why. Peaks
are CUDA-core rates, fp32 = cores x 2 (FMA) x max SM clock; fp16 = fp32 x 2 (half2),
int8 = fp32 x 4 (dp4a). Tensor cores are not counted, so these are lower bounds.
pynvml errors are translated here and nowhere else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge_agent.errors import ProbeError
from edge_agent.resources.backends import BackendScan, DetectedDevice
from edge_agent.resources.device import Capability, LiveState
from edge_agent.resources.vocab import DeviceKind, ModelFormat, Precision

_LOGGER = logging.getLogger(__name__)

#: Idle power as a fraction of the power limit; NVML has no idle figure.
DEFAULT_IDLE_FRACTION = 0.15

#: nvmlInit error names that mean "no usable NVIDIA GPU here", with what to tell the user.
_ABSENT = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "no NVIDIA driver (NVML library not found)",
    "NVML_ERROR_DRIVER_NOT_LOADED": "no NVIDIA driver (kernel driver not loaded)",
    "NVML_ERROR_NO_PERMISSION": "no permission to use the NVIDIA driver",
}


def _load_nvml() -> Any:
    """Return the pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _error_name(nvml: Any, err: Exception) -> str:
    """Return the NVML_ERROR_* name of an NVMLError (or its message if unknown)."""
    value = getattr(err, "value", None)
    for name in dir(nvml):
        if name.startswith("NVML_ERROR_") and getattr(nvml, name) == value:
            return name
    return str(err)


def _call(nvml: Any, fn: Callable[..., Any], *args: Any, optional: bool = False) -> Any:
    """Call an NVML function; NVMLError -> ProbeError, or None when ``optional``."""
    try:
        return fn(*args)
    except nvml.NVMLError as err:
        if optional:
            _LOGGER.debug("NVML %s unavailable: %s", fn.__name__, err)
            return None
        raise ProbeError(f"NVML {fn.__name__} failed: {_error_name(nvml, err)}") from err


def _text(value: Any) -> str:
    """Return an NVML string (bytes in old pynvml) as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu(nvml: Any, index: int) -> DetectedDevice:
    """Return the detected device for GPU ``index``."""
    handle = _call(nvml, nvml.nvmlDeviceGetHandleByIndex, index)
    name = _text(_call(nvml, nvml.nvmlDeviceGetName, handle))
    memory = _call(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)

    def opt(fn: Callable[..., Any], *args: Any) -> Any:
        return _call(nvml, fn, handle, *args, optional=True)

    cores = opt(nvml.nvmlDeviceGetNumGpuCores)
    sm_mhz = opt(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_SM)
    mem_mhz = opt(nvml.nvmlDeviceGetMaxClockInfo, nvml.NVML_CLOCK_MEM)
    bus_bits = opt(nvml.nvmlDeviceGetMemoryBusWidth)
    limit_mw = opt(nvml.nvmlDeviceGetPowerManagementLimit)
    cc = opt(nvml.nvmlDeviceGetCudaComputeCapability)
    util = opt(nvml.nvmlDeviceGetUtilizationRates)
    temp = opt(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)
    power_mw = opt(nvml.nvmlDeviceGetPowerUsage)

    sources: dict[str, str] = {"memory_bytes": "measured: NVML memory total"}
    fp32 = 0.0
    if cores and sm_mhz:
        fp32 = float(cores) * 2 * float(sm_mhz) / 1000.0
        formula = f"{cores} CUDA cores x 2 x {sm_mhz} MHz"
        sources["peak_fp32_gops"] = f"derived: {formula}"
        sources["peak_fp16_gops"] = "derived: fp32 x 2 (half2; tensor cores not counted)"
        sources["peak_int8_gops"] = "derived: fp32 x 4 (dp4a; tensor cores not counted)"
    else:
        sources["peak_fp32_gops"] = "unverified: unknown, NVML gave no core count or SM clock"
    bw = float(bus_bits) * float(mem_mhz) * 2 / 8 / 1000.0 if bus_bits and mem_mhz else 0.0
    sources["memory_bw_gbs"] = (
        f"derived: {bus_bits}-bit bus x {mem_mhz} MHz x 2 (DDR) / 8"
        if bw
        else "unverified: unknown"
    )
    max_w = float(limit_mw) / 1000.0 if limit_mw else 0.0
    sources["max_power_w"] = (
        "derived: NVML power management limit" if max_w else "unverified: unknown"
    )
    sources["idle_power_w"] = f"unverified: default {DEFAULT_IDLE_FRACTION} x max power"
    precisions = 0
    if fp32:
        precisions = 1 << Precision.INT8 | 1 << Precision.FP16 | 1 << Precision.FP32
        if cc and int(cc[0]) >= 8:
            precisions |= 1 << Precision.BF16
    capability = Capability(
        peak_int8_gops=fp32 * 4,
        peak_fp16_gops=fp32 * 2,
        peak_fp32_gops=fp32,
        memory_bytes=float(memory.total),
        memory_bw_gbs=bw,
        idle_power_w=max_w * DEFAULT_IDLE_FRACTION,
        max_power_w=max_w,
        precision_mask=precisions,
        format_mask=1 << ModelFormat.ONNX | 1 << ModelFormat.TENSORRT,
        execution_provider="CUDAExecutionProvider",
    )
    live = LiveState(
        utilization=float(util.gpu) / 100.0 if util is not None else 0.0,
        memory_free_bytes=float(memory.free),
        temperature_c=float(temp or 0.0),
        power_w=float(power_mw or 0.0) / 1000.0,
    )
    facts: dict[str, object] = {
        "index": index,
        "cuda_cores": cores,
        "max_sm_mhz": sm_mhz,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "memory_bytes": int(memory.total),
        "power_limit_w": max_w or None,
    }
    return DetectedDevice(DeviceKind.GPU_NVIDIA, name, facts, capability, sources, live)


def scan(root: Path = Path("/")) -> BackendScan:
    """Return every NVIDIA GPU NVML sees, or no devices and why (no library, no driver)."""
    del root  # NVML talks to the kernel driver; there is nothing to read under root
    nvml = _load_nvml()
    if nvml is None:
        _LOGGER.debug("nvidia backend absent: nvidia-ml-py is not installed")
        return BackendScan("nvidia", absent_reason="nvidia-ml-py (pynvml) is not installed")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        code = _error_name(nvml, err)
        if code not in _ABSENT:
            raise ProbeError(f"NVML initialisation failed: {code}") from err
        _LOGGER.debug("nvidia backend absent: %s (%s)", _ABSENT[code], code)
        return BackendScan("nvidia", absent_reason=_ABSENT[code], facts={"nvml_error": code})
    try:
        driver = _text(_call(nvml, nvml.nvmlSystemGetDriverVersion, optional=True) or "")
        count = int(_call(nvml, nvml.nvmlDeviceGetCount))
        devices = tuple(_gpu(nvml, i) for i in range(count))
    finally:
        _call(nvml, nvml.nvmlShutdown, optional=True)
    facts = {"driver_version": driver or None, "gpu_count": count}
    if not devices:
        return BackendScan("nvidia", absent_reason="NVIDIA driver loaded, no GPU", facts=facts)
    return BackendScan("nvidia", devices, facts=facts)


def detect(root: Path = Path("/")) -> list[DetectedDevice]:
    """Return the NVIDIA GPUs as detected devices; [] when there is no library or driver."""
    return list(scan(root).devices)
