"""Device backends: each module (cpu, nvidia, npu, fpga) finds one family of compute units.

Every backend has the same two functions: ``scan(root) -> BackendScan`` (devices found,
or why none) and ``detect(root) -> list[DetectedDevice]`` (just the devices). ``root``
is the filesystem root that /proc, /sys and /dev are read under, so tests can point a
backend at a fake tree; live kernel APIs (psutil, NVML) always describe the real machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from edge_agent.resources.device import Capability, Device, LiveState
from edge_agent.resources.profile_schema import default_tier
from edge_agent.resources.vocab import DeviceKind

#: Capability fields that are figures and therefore carry a source label.
FIGURES: tuple[str, ...] = (
    "peak_int8_gops",
    "peak_fp16_gops",
    "peak_fp32_gops",
    "memory_bytes",
    "memory_bw_gbs",
    "idle_power_w",
    "max_power_w",
)

#: Capability of a unit that was found but whose figures no backend can know.
UNKNOWN_CAPABILITY = Capability(
    peak_int8_gops=0.0,
    peak_fp16_gops=0.0,
    peak_fp32_gops=0.0,
    memory_bytes=0.0,
    memory_bw_gbs=0.0,
    idle_power_w=0.0,
    max_power_w=0.0,
    precision_mask=0,
    operator_mask=0,
    format_mask=0,
    execution_provider="",
)


@dataclass(frozen=True)
class DetectedDevice:
    """One compute unit a backend found: raw facts, derived figures and their sources."""

    kind: DeviceKind
    name: str
    facts: Mapping[str, object]
    capability: Capability = UNKNOWN_CAPABILITY
    sources: Mapping[str, str] = field(default_factory=dict)
    live: LiveState = field(default_factory=LiveState)

    @property
    def schedulable(self) -> bool:
        """Whether the figures are known well enough for the kernel to place work on it."""
        return self.capability.precision_mask != 0

    def to_device(self, device_id: str) -> Device:
        """Return a ``Device`` (not emulated, no profile) built from this detection."""
        return Device(
            id=device_id,
            kind=self.kind,
            name=self.name,
            capability=self.capability,
            live=dataclasses.replace(self.live),
            emulated=False,
            profile=None,
            tier=default_tier(self.kind),
        )


@dataclass(frozen=True)
class BackendScan:
    """What one backend found: devices, or the reason it found none."""

    backend: str
    devices: tuple[DetectedDevice, ...] = ()
    absent_reason: str | None = None
    facts: Mapping[str, object] = field(default_factory=dict)


def host_path(root: Path, absolute: str) -> Path:
    """Return ``absolute`` (e.g. "/proc/cpuinfo") as a path under ``root``."""
    return root / absolute.lstrip("/")


def read_text(path: Path) -> str | None:
    """Return the stripped text of ``path``, or None when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def glob_host(root: Path, pattern: str) -> list[str]:
    """Return the host paths (as "/dev/x", sorted) under ``root`` that match ``pattern``."""
    relative = pattern.lstrip("/")
    if not relative:
        return []
    return sorted("/" + str(p.relative_to(root)) for p in root.glob(relative))


def read_cpuinfo(root: Path) -> list[dict[str, str]]:
    """Return /proc/cpuinfo as one dict per blank-line-separated block (processors, board)."""
    text = read_text(host_path(root, "/proc/cpuinfo"))
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current.setdefault(key.strip(), value.strip())
    if current:
        blocks.append(current)
    return blocks


def cpuinfo_value(blocks: list[dict[str, str]], *keys: str) -> str | None:
    """Return the first non-empty value of the first of ``keys`` present in any block."""
    for key in keys:
        for block in blocks:
            value = block.get(key)
            if value:
                return value
    return None


def bus_ids(root: Path, bus: str) -> list[str]:
    """Return the sorted "vvvv:dddd" ids of the devices on ``bus`` ("pci" or "usb")."""
    vendor_file, device_file = ("vendor", "device") if bus == "pci" else ("idVendor", "idProduct")
    ids: set[str] = set()
    for entry in host_path(root, f"/sys/bus/{bus}/devices").glob("*"):
        vendor = read_text(entry / vendor_file)
        device = read_text(entry / device_file)
        if vendor and device:
            ids.add(f"{_hex4(vendor)}:{_hex4(device)}")
    return sorted(ids)


def _hex4(text: str) -> str:
    """Return a sysfs id ("0x10DE" or "10de") as four lower-case hex digits."""
    return text.lower().removeprefix("0x").zfill(4)
