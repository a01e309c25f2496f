"""NPU backend: neural accelerators found by device node (/dev/...) or USB id.

Probing cannot measure an NPU's throughput, so detected NPUs carry no figures; a firmware
profile supplies them. Without a matching profile they are reported but not scheduled.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from edge_agent.resources.backends import (
    BackendScan,
    DetectedDevice,
    bus_ids,
    glob_host,
    host_path,
)
from edge_agent.resources.vocab import DeviceKind

_LOGGER = logging.getLogger(__name__)

#: Device-node globs of NPU drivers, with the accelerator each one means.
NODE_PATTERNS: dict[str, str] = {
    "/dev/rknpu*": "Rockchip NPU",
    "/dev/apex_*": "Google Coral Edge TPU (PCIe/M.2)",
    "/dev/hailo*": "Hailo NPU",
    "/dev/davinci[0-9]*": "Huawei Ascend NPU",
    "/dev/accel/accel*": "compute accelerator",  # named by its driver, see ACCEL_DRIVERS
}

#: Kernel drivers behind /dev/accel/accelN (the DRM accel subsystem).
ACCEL_DRIVERS: dict[str, str] = {
    "intel_vpu": "Intel NPU",
    "rocket": "Rockchip NPU",
    "amdxdna": "AMD XDNA NPU",
    "qaic": "Qualcomm Cloud AI 100",
    "habanalabs": "Intel Gaudi",
}

#: USB ids ("vvvv:pppp") of USB-attached NPUs.
USB_IDS: dict[str, str] = {
    "1a6e:089a": "Google Coral USB Accelerator (firmware not yet loaded)",
    "18d1:9302": "Google Coral USB Accelerator",
}


def _accel_driver(root: Path, node: str) -> str | None:
    """Return the kernel driver name behind an /dev/accel/accelN node, if sysfs says."""
    link = host_path(root, f"/sys/class/accel/{Path(node).name}/device/driver")
    try:
        return Path(os.readlink(link)).name
    except OSError:
        return None


def scan(root: Path = Path("/")) -> BackendScan:
    """Return the NPUs whose device nodes or USB ids are present, or why there are none."""
    found: list[DetectedDevice] = []
    for pattern, name in NODE_PATTERNS.items():
        for node in glob_host(root, pattern):
            facts: dict[str, object] = {"node": node}
            label = name
            if pattern.startswith("/dev/accel/"):
                driver = _accel_driver(root, node)
                facts["driver"] = driver
                label = ACCEL_DRIVERS.get(driver or "", f"accelerator (driver {driver})")
            found.append(DetectedDevice(DeviceKind.NPU, label, facts))
    for usb_id in bus_ids(root, "usb"):
        if usb_id in USB_IDS:
            found.append(DetectedDevice(DeviceKind.NPU, USB_IDS[usb_id], {"usb_id": usb_id}))
    if not found:
        _LOGGER.debug("npu backend: no NPU device nodes or USB ids")
        return BackendScan("npu", absent_reason="no NPU device node or known NPU USB id")
    return BackendScan("npu", tuple(found))


def detect(root: Path = Path("/")) -> list[DetectedDevice]:
    """Return the NPUs found as detected devices (no figures: a profile supplies them)."""
    return list(scan(root).devices)
