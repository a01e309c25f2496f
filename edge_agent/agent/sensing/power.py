"""Energy meters the platform exposes: RAPL powercap (CPU package), NVML (NVIDIA GPUs), hwmon.

Each meter reads a cumulative energy counter in joules, or None where the platform reports
no power (a VM, a container without /sys/class/powercap, an emulated board). All reads are
blocking file or NVML calls: call them from a thread. Counters that wrap (RAPL's
``max_energy_range_uj``) are unwrapped by ``energy_between``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_agent.resources.device import Device
from edge_agent.resources.vocab import DeviceKind

_log = logging.getLogger(__name__)


@dataclass
class Reading:
    """One counter reading: joules since an arbitrary origin, when taken, where it wraps."""

    joules: float
    at: float
    wrap_j: float = 0.0  # 0: does not wrap


def energy_between(start: Reading | None, end: Reading | None) -> float | None:
    """Return joules spent between two readings of one counter, None if either is missing."""
    if start is None or end is None:
        return None
    spent = end.joules - start.joules
    if spent < 0 and end.wrap_j > 0:
        spent += end.wrap_j
    return spent if spent >= 0 else None


@dataclass
class Meters:
    """The power sources found on this machine, and which device each one measures."""

    sys_root: Path = Path("/sys")
    rapl: list[Path] = field(default_factory=list)  # package domains' directories
    hwmon: list[Path] = field(default_factory=list)  # power*_input files (microwatts)
    nvml: Any = None  # the pynvml module once initialised
    gpus: dict[str, Any] = field(default_factory=dict)  # device id -> NVML handle

    @classmethod
    def discover(cls, devices: tuple[Device, ...], sys_root: Path = Path("/sys")) -> Meters:
        """Find RAPL package domains, hwmon power inputs and NVML GPUs (blocking)."""
        m = cls(sys_root)
        powercap = sys_root / "class" / "powercap"
        for domain in sorted(powercap.glob("intel-rapl:*")):
            if domain.name.count(":") == 1 and _readable(domain / "energy_uj"):
                m.rapl.append(domain)
        m.hwmon = [p for p in sorted((sys_root / "class" / "hwmon").glob("hwmon*/power*_input"))]
        m.hwmon = [p for p in m.hwmon if _readable(p)]
        gpus = [d for d in devices if d.kind == DeviceKind.GPU_NVIDIA and not d.emulated]
        if gpus:
            m._open_nvml(gpus)
        _log.info(
            "power meters: %s RAPL domains, %s hwmon inputs, %s NVML GPUs",
            len(m.rapl),
            len(m.hwmon),
            len(m.gpus),
        )
        return m

    def _open_nvml(self, gpus: list[Device]) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as err:  # no driver or no library: the GPUs report no power here
            _log.info("NVML unavailable, GPU energy not measured: %s", err)
            return
        self.nvml = pynvml
        for index, device in enumerate(gpus):
            try:
                self.gpus[device.id] = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as err:
                _log.info("NVML: no handle for %s: %s", device.id, err)

    def measures(self, device: Device) -> bool:
        """Whether some counter covers ``device``."""
        if device.emulated:
            return False
        if device.id in self.gpus:
            return True
        return device.kind in (DeviceKind.CPU_X86, DeviceKind.CPU_ARM) and bool(self.rapl)

    def read(self, device: Device) -> Reading | None:
        """Return the counter covering ``device`` now (blocking), or None."""
        if not self.measures(device):
            return None
        now = time.monotonic()
        handle = self.gpus.get(device.id)
        if handle is not None:
            try:  # millijoules since the driver loaded (Volta and newer)
                return Reading(self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3, now)
            except self.nvml.NVMLError:
                return None
        return self.package()

    def package(self) -> Reading | None:
        """Return the CPU packages' RAPL energy summed, or None without RAPL."""
        total = wrap = 0.0
        for domain in self.rapl:
            try:
                total += int((domain / "energy_uj").read_text()) / 1e6
                wrap += _number(domain / "max_energy_range_uj") / 1e6
            except (OSError, ValueError):
                return None
        return Reading(total, time.monotonic(), wrap) if self.rapl else None

    def board_watts(self) -> float | None:
        """Return the hwmon power inputs summed (watts), or None without any."""
        watts = 0.0
        for path in self.hwmon:
            try:
                watts += int(path.read_text()) / 1e6
            except (OSError, ValueError):
                return None
        return watts if self.hwmon else None

    def gpu_sample(self, device_id: str) -> tuple[float, float] | None:
        """Return (utilization 0..1, watts) of an NVML GPU, or None."""
        handle = self.gpus.get(device_id)
        if handle is None:
            return None
        try:
            util = self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100
            return util, self.nvml.nvmlDeviceGetPowerUsage(handle) / 1e3
        except self.nvml.NVMLError:
            return None


def _readable(path: Path) -> bool:
    try:
        int(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def _number(path: Path) -> float:
    try:
        return float(int(path.read_text()))
    except (OSError, ValueError):
        return 0.0
