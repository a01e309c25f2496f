"""Initial estimates from the firmware profiles' published per-model latencies.

When a contract names a model (``TaskContract.model``: a name or a model file, whose stem
is the name) that a device's profile publishes a latency for, that figure is the first
estimate for the task's class on that device: the class's correction starts at
published / uncorrected model, so the kernel's estimate equals the published figure, and
learning moves on from there. Only models with no published figure start from the
roofline. The order of preference, per device: a latency at the task's precision; a
latency at another precision of the same network on the same unit; a pipelined rate
(1000/FPS, ``throughput_equivalent``), which is a lower bound on latency.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import PurePath

from edge_agent.placement import layout as L
from edge_agent.resources.device import Device
from edge_agent.resources.profile_schema import normalize_model_name
from edge_agent.resources.profiles import FirmwareProfile, load_profile
from edge_agent.tasks.contract import TaskContract

ROOFLINE = "roofline"


@functools.lru_cache(maxsize=64)
def _profile(profile_id: str) -> FirmwareProfile | None:
    try:
        return load_profile(profile_id)
    except Exception:
        return None


#: Model file suffixes: a contract's ``model`` ending in one is a file named after the model.
MODEL_SUFFIXES = frozenset(
    {".onnx", ".tflite", ".rknn", ".hef", ".xmodel", ".engine", ".plan", ".om", ".xml"}
)


def model_key(model: str) -> str:
    """Return the name a model is published under: a model file's stem, else the name."""
    path = PurePath(model)
    return path.stem if path.suffix.lower() in MODEL_SUFFIXES else path.name


def published_s(device: Device, model: str, precision: str) -> tuple[float, str] | None:
    """Return (seconds, label) of the best published figure for ``model`` on ``device``."""
    if device.profile is None:
        return None
    profile = _profile(device.profile)
    local = device.id.rsplit("/", 1)[-1]
    if profile is None or local not in {str(s["id"]) for s in profile.device_specs}:
        return None
    tries = (
        (precision, False, f"published {precision}"),
        (None, False, "published, other precision"),
        (None, True, "published 1000/FPS"),
    )
    for want, throughput, label in tries:
        ms = profile.published_latency_ms(local, model, want, include_throughput=throughput)
        if ms is not None and ms > 0:
            return ms / 1e3, f"{label} ({_status(profile, local, model)})"
    return None


def _status(profile: FirmwareProfile, local: str, model: str) -> str:
    key = normalize_model_name(model)
    rows = [r for r in profile.latencies.get(local, ()) if r["model"] == key]
    return str(rows[0].get("status", "unknown")) if rows else "unknown"


def uncorrected_s(row: Sequence[float], task: Sequence[float]) -> float:
    """Return the kernel's service estimate of ``task`` on device ``row`` at correction 1.

    The roofline of hetmesh_kernel.c ``estimate`` without utilization: max(compute, memory)
    plus dispatch, times the slot count; inf when the device cannot run the precision.
    """
    prec = int(task[L.TASK_PREC])
    col = {0: L.DEV_PEAK_INT8, 3: L.DEV_PEAK_INT8, 1: L.DEV_PEAK_FP16, 4: L.DEV_PEAK_FP16}
    pe = row[col.get(prec, L.DEV_PEAK_FP32)] * row[L.DEV_EFFICIENCY]
    if pe <= 0.0:
        return float("inf")
    n = task[L.TASK_COUNT]
    compute = task[L.TASK_GFLOP] / n / pe
    bw = row[L.DEV_MEM_BW]
    mem = task[L.TASK_BYTES] / n / (bw * 1e9) if bw > 0.0 else 0.0
    slots = row[L.DEV_SLOTS] if row[L.DEV_SLOTS] > 1.0 else 1.0
    return (max(compute, mem) + row[L.DEV_DISPATCH_S]) * slots


def priors(
    devices: Sequence[Device],
    rows: Sequence[Sequence[float]],
    contract: TaskContract,
    task: Sequence[float],
) -> list[tuple[float, str] | None]:
    """Return, per device, (initial correction, source label), or None for the roofline."""
    if not contract.model:
        return [None] * len(devices)
    model = model_key(contract.model)
    precision = contract.precision().name.lower()
    out: list[tuple[float, str] | None] = []
    for device, row in zip(devices, rows, strict=True):
        found = published_s(device, model, precision)
        roof = uncorrected_s(row, task)
        if found is None or not 0.0 < roof < float("inf"):
            out.append(None)
            continue
        out.append((found[0] / roof, found[1]))
    return out
