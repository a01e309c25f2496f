"""The deadline scenario's fleet, timed only from published per-model latencies.

Accelerators and CPUs from the firmware profiles: three RK3588 NPU cores and the A76
cluster, a Hailo-8, two KV260 DPUs, an Orin Nano's GPU and CPU, two Raspberry Pi 5 CPUs.
Devices with no published latency for any model of the mix are left out (the Hailo hosts'
x86 CPUs, the KV260's A53s, the Hailo-8L: its profile holds only pipelined 1000/FPS rows,
which are throughput, not latency). Two devices are silently slower than published
(``HIDDEN_SLOWDOWN``); the placer is never told.

``PublishedTruth`` replaces every base time with the profile's own published figure (any
precision, latency rows only) times the hidden slowdown, and marks a pair without one as
impossible (``inf``), so no time here comes from a roofline, whatever ``truth`` falls back to.
"""

from __future__ import annotations

import dataclasses
import math

from cloud_hub.simulator.fleet import Fleet, SimDevice
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.truth import GroundTruth, TaskType
from edge_agent.resources.profiles import FirmwareProfile, load_profile

#: (box id, firmware profile, [(profile device id, copies)]); each copy is its own device.
BOARDS: tuple[tuple[str, str, tuple[tuple[str, int], ...]], ...] = (
    ("rk3588", "rk3588", (("npu", 3), ("cpu", 1))),  # published NPU rows: 1 of 3 cores
    ("hailo8", "hailo8_host", (("npu", 1),)),
    ("kv260-1", "kria_kv260", (("fpga", 1),)),
    ("kv260-2", "kria_kv260", (("fpga", 1),)),
    ("orin", "jetson_orin_nano", (("gpu", 1), ("cpu", 1))),
    ("rpi5-1", "rpi5", (("cpu", 1),)),
    ("rpi5-2", "rpi5", (("cpu", 1),)),
)
#: True time / published figure of the two devices slower than their datasheets (hidden).
HIDDEN_SLOWDOWN = {"rk3588.c2/npu": 2.0, "orin/gpu": 1.7}
#: The mix: (model, weight). Every model has published latencies on several devices.
MIX: tuple[tuple[str, float], ...] = (
    ("resnet50", 3.0),
    ("mobilenet_v2", 3.0),
    ("yolo11n", 2.0),
    ("yolov8n", 1.0),
    ("squeezenet", 1.0),
)
PRECISION = "int8"
LINK_MS = 0.2  # one-way between boards on one switch
LINK_GBIT_S = 1.0


def published_ms(profile: FirmwareProfile, local_id: str, model: str) -> float | None:
    """Return the profile's lowest published latency (ms) of ``model`` on a device, or None.

    Any precision counts (a CPU's fp32 row times the int8-labelled task it would run);
    1000/FPS throughput rows never do.
    """
    found = [
        ms
        for key in model_info(model).latency_keys()
        if (ms := profile.published_latency_ms(local_id, key, None)) is not None
    ]
    return min(found) if found else None


def build_fleet() -> tuple[Fleet, dict[TaskType, list[float]]]:
    """Return the fleet and, per task type, each device's published seconds (inf = none)."""
    devices: list[SimDevice] = []
    table: dict[TaskType, list[float]] = {(m, PRECISION): [] for m, _ in MIX}
    for box, (name, profile_id, keep) in enumerate(BOARDS):
        profile = load_profile(profile_id)
        by_local = {d.id.split("/", 1)[1]: d for d in profile.devices(emulated=True)}
        for local_id, copies in keep:
            for k in range(copies):
                prefix = name if copies == 1 else f"{name}.c{k}"
                device = dataclasses.replace(by_local[local_id], id=f"{prefix}/{local_id}")
                slow = HIDDEN_SLOWDOWN.get(device.id, 1.0)
                devices.append(SimDevice(len(devices), box, local_id, slow, device, profile))
                for tt, row in table.items():
                    ms = published_ms(profile, local_id, tt[0])
                    row.append(math.inf if ms is None else ms / 1e3)
    unknown = set(HIDDEN_SLOWDOWN) - {sd.device.id for sd in devices}
    if unknown:
        raise ValueError(f"HIDDEN_SLOWDOWN names no device: {sorted(unknown)}")
    n = len(BOARDS)
    link = tuple(tuple(0.0 if a == b else LINK_MS / 1e3 for b in range(n)) for a in range(n))
    fleet = Fleet(
        "slo-published",
        tuple(b[0] for b in BOARDS),
        tuple(b[0] for b in BOARDS),
        tuple(devices),
        link,
        LINK_GBIT_S / 8.0,
    )
    return fleet, table


class PublishedTruth(GroundTruth):
    """Ground truth whose base times are only the given published figures x slowdowns."""

    def __init__(
        self,
        fleet: Fleet,
        published: dict[TaskType, list[float]],
        n_tasks: int,
        sigma: float,
        seed: int,
    ) -> None:
        super().__init__(fleet, list(published), n_tasks, sigma, seed)
        for tt, row in published.items():
            self.base[tt] = [s * sd.slowdown for s, sd in zip(row, fleet.devices, strict=True)]
            self.source[tt] = ["published" if math.isfinite(s) else "none" for s in row]
