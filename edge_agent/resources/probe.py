"""Probe this machine: host facts, every backend, the matching firmware profile, the devices.

When a board-specific profile matches (a rule naming more than ``arch``), the devices are
the profile's, with sourced figures. Otherwise they are built from detection: the CPU
from psutil, GPUs from NVML; NPUs and FPGAs found without a profile have no figures and
are reported as detected but not scheduled.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from edge_agent.errors import InvalidInput, ProbeError
from edge_agent.resources.backends import (
    FIGURES,
    BackendScan,
    DetectedDevice,
    cpu,
    fpga,
    npu,
    nvidia,
)
from edge_agent.resources.device import Device
from edge_agent.resources.matching import HostFacts, best_match, collect_host_facts
from edge_agent.resources.profiles import list_profiles, load_profile
from edge_agent.resources.vocab import DeviceKind, Precision, names_of

_LOGGER = logging.getLogger(__name__)

#: The backends every probe runs, in report order.
BACKENDS: dict[str, Callable[[Path], BackendScan]] = {
    "cpu": cpu.scan,
    "nvidia": nvidia.scan,
    "npu": npu.scan,
    "fpga": fpga.scan,
}

#: How a probe arrived at its device list.
MODE_DETECTED = "detected"
MODE_PROFILE = "board profile"
MODE_EMULATED = "emulated board"

_ID_PREFIX = {
    DeviceKind.CPU_X86: "cpu",
    DeviceKind.CPU_ARM: "cpu",
    DeviceKind.GPU_NVIDIA: "gpu",
    DeviceKind.GPU_OTHER: "gpu",
    DeviceKind.NPU: "npu",
    DeviceKind.FPGA: "fpga",
    DeviceKind.DSP: "dsp",
}


class Profile(Protocol):
    """The part of a firmware profile that probing uses."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def match_priority(self) -> int: ...

    @property
    def match_rules(self) -> Sequence[Mapping[str, Any]]: ...

    def devices(self, emulated: bool, id_prefix: str | None = None) -> list[Device]: ...

    def device_spec(self, device_local_id: str) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class ProbeReport:
    """What a probe found: host facts, the profile chosen and why, the devices to schedule."""

    host: HostFacts
    mode: str
    devices: tuple[Device, ...]
    profile_id: str | None = None
    profile_reason: str | None = None
    sources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    detected: tuple[DetectedDevice, ...] = ()
    absent: Mapping[str, str] = field(default_factory=dict)

    @property
    def emulated(self) -> bool:
        """Whether the devices are an emulated board rather than this machine's."""
        return self.mode == MODE_EMULATED

    def to_json(self) -> dict[str, object]:
        """Return the report as a JSON-ready dict."""
        return {
            "mode": self.mode,
            "emulated": self.emulated,
            "host": self.host.to_json(),
            "profile": None
            if self.profile_id is None
            else {"id": self.profile_id, "reason": self.profile_reason},
            "devices": [
                {**d.summary(), "sources": dict(self.sources.get(d.id, {}))} for d in self.devices
            ],
            "detected": [
                {
                    "kind": d.kind.name.lower(),
                    "name": d.name,
                    "facts": dict(d.facts),
                    "has_figures": d.schedulable,
                }
                for d in self.detected
            ],
            "absent": dict(self.absent),
        }

    def table(self) -> str:
        """Return a fixed-width, human-readable table of the devices with a short header."""
        model = self.host.cpu_model or "unknown CPU"
        lines = [f"host: {self.host.arch}, {model}"]
        if self.profile_id is None:
            lines.append(f"devices: {self.mode} (no firmware profile matched)")
        else:
            lines.append(f"devices: {self.mode}, profile {self.profile_id}: {self.profile_reason}")
        lines.extend(_columns([_HEADER, *(_cells(d) for d in self.devices)]))
        if self.mode == MODE_DETECTED:
            lines.extend(
                f"detected, not scheduled (no figures without a profile): {d.name}"
                for d in self.detected
                if not d.schedulable
            )
        lines.extend(f"absent: {name}: {why}" for name, why in self.absent.items())
        return "\n".join(lines)


_HEADER = ("ID", "KIND", "NAME", "PRECISIONS", "INT8", "FP16", "FP32", "MEMORY", "POWER W", "EMU")
_RIGHT = frozenset({"INT8", "FP16", "FP32", "MEMORY", "POWER W"})


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Return ``rows`` as lines of columns padded to their widest cell, numbers right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    return [
        "  ".join(
            cell.rjust(w) if title in _RIGHT else cell.ljust(w)
            for cell, w, title in zip(row, widths, _HEADER, strict=True)
        ).rstrip()
        for row in rows
    ]


def _ops(gops: float) -> str:
    """Return a peak as "6.0T" / "269G" / "-" for unsupported."""
    if gops <= 0:
        return "-"
    return f"{gops / 1000:.1f}T" if gops >= 1000 else f"{gops:.0f}G"


def _cells(device: Device) -> tuple[str, ...]:
    """Return one table row's cells for ``device``."""
    cap = device.capability
    return (
        device.id,
        device.kind.name.lower(),
        device.name[:32],
        ",".join(names_of(Precision, cap.precision_mask)) or "-",
        _ops(cap.peak_gops(Precision.INT8)),
        _ops(cap.peak_gops(Precision.FP16)),
        _ops(cap.peak_gops(Precision.FP32)),
        f"{cap.memory_bytes / 2**30:.1f}GiB" if cap.memory_bytes else "-",
        f"{cap.idle_power_w:g}-{cap.max_power_w:g}" if cap.max_power_w else "-",
        "yes" if device.emulated else "no",
    )


def _run_backends(root: Path) -> list[BackendScan]:
    """Run every backend; one that fails is reported as absent with the error, not raised."""
    scans = []
    for name, scan in BACKENDS.items():
        try:
            scans.append(scan(root))
        except ProbeError as err:
            _LOGGER.warning("%s backend failed: %s", name, err)
            scans.append(BackendScan(name, absent_reason=f"probe failed: {err}"))
    return scans


def _detected_devices(
    detected: Sequence[DetectedDevice],
) -> tuple[tuple[Device, ...], dict[str, dict[str, str]]]:
    """Return the schedulable detected devices with ids (cpu0, gpu0, ...) and their sources."""
    counts: dict[str, int] = {}
    devices: list[Device] = []
    sources: dict[str, dict[str, str]] = {}
    for found in detected:
        if not found.schedulable:
            continue
        prefix = _ID_PREFIX[found.kind]
        device = found.to_device(f"{prefix}{counts.get(prefix, 0)}")
        counts[prefix] = counts.get(prefix, 0) + 1
        devices.append(device)
        sources[device.id] = dict(found.sources)
    return tuple(devices), sources


def _profile_sources(profile: Profile, devices: Sequence[Device]) -> dict[str, dict[str, str]]:
    """Return "status: source" of every figure of the profile's devices, by device id."""
    sources: dict[str, dict[str, str]] = {}
    for device in devices:
        spec = profile.device_spec(device.id.rsplit("/", 1)[-1])
        figures = {f"peak_{slot}_gops": fig for slot, fig in spec["peak_gops"].items()}
        figures.update((key, spec[key]) for key in FIGURES if key in spec)
        sources[device.id] = {k: f"{f['status']}: {f['source']}" for k, f in figures.items()}
    return sources


def load_profiles(directory: Path | None = None) -> list[Profile]:
    """Return every firmware profile (from ``directory``, or the packaged ones)."""
    return [load_profile(name, directory) for name in list_profiles(directory)]


def probe_machine(root: Path = Path("/"), profiles: Sequence[Profile] | None = None) -> ProbeReport:
    """Probe the machine under ``root`` and return its devices (``profiles``: all packaged)."""
    host = collect_host_facts(root)
    scans = _run_backends(root)
    detected = tuple(d for s in scans for d in s.devices)
    absent = {s.backend: s.absent_reason for s in scans if s.absent_reason is not None}
    candidates = list(load_profiles() if profiles is None else profiles)
    rules = ((p.id, p.match_priority, p.match_rules) for p in candidates)
    match = best_match(rules, host, root)
    if match is not None and match.board_specific:
        profile = next(p for p in candidates if p.id == match.profile_id)
        devices = tuple(profile.devices(emulated=False))
        sources = _profile_sources(profile, devices)
        reason = f"priority {match.priority}, {match.reason}"
        _LOGGER.debug("probe: profile %s matched (%s)", profile.id, reason)
        return ProbeReport(
            host, MODE_PROFILE, devices, profile.id, reason, sources, detected, absent
        )
    devices, sources = _detected_devices(detected)
    if match is None:
        return ProbeReport(host, MODE_DETECTED, devices, None, None, sources, detected, absent)
    generic = f"generic profile, devices from detection; {match.reason}"
    return ProbeReport(
        host, MODE_DETECTED, devices, match.profile_id, generic, sources, detected, absent
    )


def emulate_profile(name: str, profiles: Sequence[Profile] | None = None) -> ProbeReport:
    """Return the named profile's devices as an emulated board (every device emulated).

    Raises InvalidInput listing the available profiles when ``name`` is unknown.
    """
    candidates = list(load_profiles() if profiles is None else profiles)
    by_id = {p.id: p for p in candidates}
    if name not in by_id:
        available = ", ".join(sorted(by_id)) or "none"
        raise InvalidInput(f"unknown profile {name!r}; available: {available}")
    profile = by_id[name]
    devices = tuple(profile.devices(emulated=True))
    for device in devices:
        device.emulated = True  # the contract of an emulated board, whatever the profile says
    sources = _profile_sources(profile, devices)
    reason = f"emulated on request ({profile.name})"
    return ProbeReport(collect_host_facts(), MODE_EMULATED, devices, profile.id, reason, sources)
