"""The devices an agent schedules on: this machine's (probed) or an emulated board's."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from edge_agent.errors import InvalidInput
from edge_agent.resources.device import Device
from edge_agent.resources.probe import emulate_profile, probe_machine
from edge_agent.resources.profiles import FirmwareProfile, load_profile

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fleet:
    """The agent's devices, how they were found, and the board profile when emulated."""

    devices: tuple[Device, ...]
    mode: str
    profile: FirmwareProfile | None = None

    def device(self, device_id: str) -> Device:
        """Return the device called ``device_id``."""
        for device in self.devices:
            if device.id == device_id:
                return device
        raise InvalidInput(f"unknown device {device_id!r}")

    def published_ms(self, device_id: str, model: str, precision: str) -> float | None:
        """Return the profile's published latency (ms) of ``model`` on a device, or None."""
        if self.profile is None:
            return None
        local = device_id.rsplit("/", 1)[-1]
        try:
            return self.profile.published_latency_ms(local, model, precision)
        except (InvalidInput, ValueError):
            return None


def build_fleet(profile: str | None) -> Fleet:
    """Probe this machine (``profile`` None) or emulate the board ``profile`` (blocking)."""
    if profile is not None:
        report = emulate_profile(profile)
        fleet = Fleet(report.devices, report.mode, load_profile(profile))
    else:
        report = probe_machine()
        fleet = Fleet(report.devices, report.mode)
    if not fleet.devices:
        raise InvalidInput("this machine has no schedulable devices; emulate a board (profile)")
    _log.info("fleet: %s devices (%s)", len(fleet.devices), fleet.mode)
    return fleet
