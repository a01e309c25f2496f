"""Initial estimates from the firmware profiles' published per-model latencies.

When a contract names a model (``TaskContract.model``: a name or a model file, whose stem
is the name) that a device's profile publishes a latency for, that figure is the first
estimate for the task's class on that device: the class's correction starts at
published / uncorrected model, so the kernel's estimate equals the published figure, and
learning moves on from there. Only models with no published figure start from the
roofline, and so does a task whose roofline is more than ``PRIOR_BAND`` times off the
published figure (its work is not one run of the published network). The order of
preference, per device: a latency at the task's precision; a
latency at another precision of the same network on the same unit. A pipelined rate
(1000/FPS, ``throughput_equivalent``) is not used: it is not a latency.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from edge_agent.placement import layout as L
from edge_agent.resources.device import Device
from edge_agent.resources.profile_schema import normalize_model_name
from edge_agent.resources.profiles import load_profile
from edge_agent.tasks.contract import TaskContract

ROOFLINE = "roofline"
#: A published figure further than this factor from the task's roofline is not this task's:
#: the contract names the network but its work is another (a batch, a longer job of that
#: class, another input size), so the roofline, which scales with the work, is the start.
PRIOR_BAND = 20.0


Row = Mapping[str, Any]


@functools.lru_cache(maxsize=64)
def _table(profile_id: str) -> dict[tuple[str, str], tuple[Row, ...]]:
    """Return a profile's latency rows by (device local id, model key); empty if unloadable."""
    try:
        profile = load_profile(profile_id)
    except Exception:
        return {}
    table: dict[tuple[str, str], list[Row]] = {}
    for local, rows in profile.latencies.items():
        for row in rows:
            table.setdefault((local, str(row["model"])), []).append(row)
    return {key: tuple(rows) for key, rows in table.items()}


#: Model file suffixes: a contract's ``model`` ending in one is a file named after the model.
MODEL_SUFFIXES = frozenset(
    {".onnx", ".tflite", ".rknn", ".hef", ".xmodel", ".engine", ".plan", ".om", ".xml"}
)


def model_key(model: str) -> str:
    """Return the name a model is published under: a model file's stem, else the name."""
    path = PurePath(model)
    name = path.stem if path.suffix.lower() in MODEL_SUFFIXES else path.name
    return normalize_model_name(name)


def published_s(device: Device, model: str, precision: str) -> tuple[float, str] | None:
    """Return (seconds, label) of the best published figure for ``model`` on ``device``."""
    if device.profile is None:
        return None
    rows = _table(device.profile).get((device.id.rsplit("/", 1)[-1], model_key(model)), ())
    # 1000/FPS of a pipelined accelerator (throughput_equivalent) is not a latency: the
    # Hailo-8's yolov8n row is 6x under its latency, a worse start than the roofline
    latency = [r for r in rows if float(r["latency_ms"]) > 0 and not r.get("throughput_equivalent")]
    tries: tuple[tuple[list[Row], str], ...] = (
        ([r for r in latency if r["precision"] == precision], f"published {precision}"),
        (latency, "published, other precision"),
    )
    for found, label in tries:
        if found:
            best = min(found, key=lambda r: float(r["latency_ms"]))
            return float(best["latency_ms"]) / 1e3, f"{label} ({best.get('status', 'unknown')})"
    return None


def uncorrected_s(row: Sequence[float], task: Sequence[float]) -> float:
    """Return the kernel's service estimate of ``task`` on device ``row`` at correction 1.

    The roofline of hetmesh_place.c ``estimate`` without utilization: max(compute, memory)
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
        factor = found[0] / roof
        out.append((factor, found[1]) if 1 / PRIOR_BAND <= factor <= PRIOR_BAND else None)
    return out
