"""FPGA backend: Linux fpga_manager entries and Xilinx/AMD XRT management nodes.

A fabric's throughput depends on the bitstream loaded, so detected FPGAs carry no
figures; a firmware profile supplies them. Without one they are reported, not scheduled.
"""

from __future__ import annotations

import logging
from pathlib import Path

from edge_agent.resources.backends import (
    BackendScan,
    DetectedDevice,
    glob_host,
    host_path,
    read_text,
)
from edge_agent.resources.vocab import DeviceKind

_LOGGER = logging.getLogger(__name__)


def scan(root: Path = Path("/")) -> BackendScan:
    """Return the FPGAs under /sys/class/fpga_manager and /dev/xclmgmt*, or why none."""
    found: list[DetectedDevice] = []
    for entry in glob_host(root, "/sys/class/fpga_manager/*"):
        path = host_path(root, entry)
        name = read_text(path / "name") or Path(entry).name
        facts: dict[str, object] = {"sysfs": entry, "state": read_text(path / "state")}
        found.append(DetectedDevice(DeviceKind.FPGA, name, facts))
    for node in glob_host(root, "/dev/xclmgmt*"):
        found.append(DetectedDevice(DeviceKind.FPGA, "Xilinx/AMD XRT card", {"node": node}))
    if not found:
        _LOGGER.debug("fpga backend: no fpga_manager entry or xclmgmt node")
        return BackendScan("fpga", absent_reason="no fpga_manager entry or /dev/xclmgmt* node")
    return BackendScan("fpga", tuple(found))


def detect(root: Path = Path("/")) -> list[DetectedDevice]:
    """Return the FPGAs found as detected devices (no figures: a profile supplies them)."""
    return list(scan(root).devices)
