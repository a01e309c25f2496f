"""CPU backend: one device for the host CPU, with peak figures derived from cores, clock, ISA.

Peak fp32 = physical cores x max clock (GHz) x fp32 FLOP/cycle/core, the last from the
widest SIMD the CPU reports (``FP32_FLOP_PER_CYCLE``). These are upper bounds: a core with
one FMA pipe instead of two reaches half. int8 = fp32 x 4 with a dot-product instruction
(x86 VNNI, ARM asimddp), x 2 otherwise; fp16 = fp32 x 2 and only with native fp16
arithmetic (x86 avx512_fp16, ARM asimdhp). Each figure's source reads "status: how", the
status one of the profiles' statuses (measured, derived; unverified for a default).
"""

from __future__ import annotations

import logging
import platform
from pathlib import Path

import psutil

from edge_agent.resources.backends import (
    BackendScan,
    DetectedDevice,
    cpuinfo_value,
    host_path,
    read_cpuinfo,
    read_text,
)
from edge_agent.resources.device import Capability, LiveState
from edge_agent.resources.vocab import DeviceKind, ModelFormat, Precision

_LOGGER = logging.getLogger(__name__)

#: fp32 FLOP per cycle per core by ISA: SIMD lanes x 2 (FMA) x FMA pipes.
FP32_FLOP_PER_CYCLE: dict[str, int] = {
    "avx512": 64,  # 2 x 512-bit FMA pipes: 2 x 16 lanes x 2
    "avx2_fma": 32,  # 2 x 256-bit FMA pipes: 2 x 8 lanes x 2
    "avx": 16,  # one 256-bit add + one 256-bit mul, no FMA
    "sse": 8,  # one 128-bit add + one 128-bit mul
    "neon": 16,  # 2 x 128-bit FMA pipes: 2 x 4 lanes x 2 (Cortex-A76 class)
    "generic": 4,  # ISA not recognised: a conservative guess
}

#: Clock used when neither psutil nor /proc/cpuinfo gives one (containers, some VMs).
DEFAULT_CPU_GHZ = 2.0
#: Main-memory bandwidth when none is known: one DDR4-3200 channel.
DEFAULT_MEMORY_BW_GBS = 25.6
#: Package power per physical core when RAPL gives no limit; idle is a fixed fraction.
DEFAULT_WATTS_PER_CORE = 5.0
DEFAULT_IDLE_FRACTION = 0.2

_X86 = {"x86_64", "amd64", "i386", "i686"}
_ARM = {"aarch64", "arm64", "armv7l", "armv8l", "armv6l"}


def cpu_kind(arch: str) -> DeviceKind | None:
    """Return the device kind for a platform.machine() value, or None if unsupported."""
    arch = arch.lower()
    if arch in _X86:
        return DeviceKind.CPU_X86
    if arch in _ARM or arch.startswith("arm"):
        return DeviceKind.CPU_ARM
    return None


#: /proc/cpuinfo keys naming the CPU (x86) or the board (ARM), most specific first.
MODEL_KEYS = ("model name", "Model", "Hardware")


def cpu_model(root: Path = Path("/")) -> str | None:
    """Return the CPU or board model from /proc/cpuinfo (the first of ``MODEL_KEYS``)."""
    return cpuinfo_value(read_cpuinfo(root), *MODEL_KEYS)


def isa_of(kind: DeviceKind, flags: set[str]) -> str:
    """Return the ``FP32_FLOP_PER_CYCLE`` key for a CPU with these cpuinfo flags/features."""
    if kind == DeviceKind.CPU_ARM:
        return "neon" if flags & {"asimd", "neon"} or not flags else "generic"
    if "avx512f" in flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2_fma"
    if "avx" in flags:
        return "avx"
    return "sse" if "sse2" in flags else "generic"


def _max_ghz(cpuinfo: list[dict[str, str]]) -> tuple[float, str]:
    """Return the max clock in GHz and where it came from, falling back as documented."""
    freq = psutil.cpu_freq()
    if freq is not None and float(freq.max) > 0:
        return float(freq.max) / 1000.0, "psutil.cpu_freq().max"
    mhz = []
    for block in cpuinfo:
        try:
            mhz.append(float(block.get("cpu MHz", "")))
        except ValueError:
            continue
    if mhz and max(mhz) > 0:
        return max(mhz) / 1000.0, "/proc/cpuinfo 'cpu MHz' (current clock, not max)"
    return DEFAULT_CPU_GHZ, f"default {DEFAULT_CPU_GHZ} GHz (no clock from psutil or cpuinfo)"


def _rapl_limit_w(root: Path) -> float | None:
    """Return the package power limit from Intel RAPL in watts, if exposed."""
    path = "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw"
    text = read_text(host_path(root, path))
    try:
        return float(text) / 1e6 if text else None
    except ValueError:
        return None


def scan(root: Path = Path("/")) -> BackendScan:
    """Return the host CPU as one detected device (or why it cannot be described)."""
    arch = platform.machine()
    kind = cpu_kind(arch)
    if kind is None:
        return BackendScan("cpu", absent_reason=f"CPU architecture {arch!r} has no device kind")
    blocks = read_cpuinfo(root)
    model = cpuinfo_value(blocks, *MODEL_KEYS) or platform.processor()
    flags = set((cpuinfo_value(blocks, "flags", "Features") or "").split())
    logical = int(psutil.cpu_count(logical=True) or 1)
    physical = int(psutil.cpu_count(logical=False) or logical)
    ghz, ghz_source = _max_ghz(blocks)
    isa = isa_of(kind, flags)
    per_cycle = FP32_FLOP_PER_CYCLE[isa]
    fp32 = physical * ghz * per_cycle
    dot = bool(flags & {"avx512_vnni", "avx_vnni", "asimddp"})
    half = bool(flags & {"avx512_fp16", "asimdhp"})
    memory = psutil.virtual_memory()
    rapl_w = _rapl_limit_w(root)
    max_w = rapl_w or physical * DEFAULT_WATTS_PER_CORE
    precisions = 1 << Precision.FP32 | 1 << Precision.INT8 | (1 << Precision.FP16 if half else 0)
    formula = f"{physical} cores x {ghz:.2f} GHz x {per_cycle} FLOP/cycle ({isa})"
    capability = Capability(
        peak_int8_gops=fp32 * (4 if dot else 2),
        peak_fp16_gops=fp32 * 2 if half else 0.0,
        peak_fp32_gops=fp32,
        memory_bytes=float(memory.total),
        memory_bw_gbs=DEFAULT_MEMORY_BW_GBS,
        idle_power_w=max_w * DEFAULT_IDLE_FRACTION,
        max_power_w=max_w,
        precision_mask=precisions,
        format_mask=1 << ModelFormat.ONNX | 1 << ModelFormat.COMMAND,
    )
    power_source = (
        "derived: RAPL package power limit (PL1)"
        if rapl_w
        else f"unverified: default {DEFAULT_WATTS_PER_CORE} W x {physical} physical cores"
    )
    sources = {
        "peak_fp32_gops": f"derived: {formula}",
        "peak_int8_gops": f"derived: fp32 x {4 if dot else 2} ({'dot-product' if dot else 'no'} "
        "int8 instructions)",
        "peak_fp16_gops": "derived: fp32 x 2 (native fp16)"
        if half
        else "derived: 0, no native fp16 arithmetic",
        "memory_bytes": "measured: psutil.virtual_memory().total",
        "memory_bw_gbs": f"unverified: default {DEFAULT_MEMORY_BW_GBS} GB/s (not probed)",
        "max_power_w": power_source,
        "idle_power_w": f"unverified: default {DEFAULT_IDLE_FRACTION} x max power",
    }
    load1 = float(psutil.getloadavg()[0])
    live = LiveState(
        utilization=min(1.0, load1 / logical),
        memory_free_bytes=float(memory.available),
    )
    facts: dict[str, object] = {
        "arch": arch,
        "model": model,
        "physical_cores": physical,
        "logical_cores": logical,
        "max_ghz": round(ghz, 3),
        "ghz_source": ghz_source,
        "isa": isa,
        "fp32_flop_per_cycle": per_cycle,
        "memory_bytes": int(memory.total),
    }
    _LOGGER.debug("cpu: %s, %s", model, formula)
    device = DetectedDevice(kind, model or arch, facts, capability, sources, live)
    return BackendScan("cpu", (device,))


def detect(root: Path = Path("/")) -> list[DetectedDevice]:
    """Return the host CPU as a one-element list (empty for an unsupported architecture)."""
    return list(scan(root).devices)
