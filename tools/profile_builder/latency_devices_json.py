"""Latency rows from devices.json, mapped onto profile devices."""

from __future__ import annotations

from typing import Any

from .data import Data
from .devices import find_device
from .figures import VIA, map_status
from .latency_rows import norm_precision, row, split_variant

# --------------------------------------------------------------------------------------
# Per-model latencies. devices.json device_id -> (profile, local devices, status, note).
# Rows of devices not listed here are left out (see SOURCES.md for why).
# --------------------------------------------------------------------------------------
DJ_LATENCY_MAP: dict[str, tuple[str, tuple[str, ...], str | None, str | None]] = {
    "rpi5.cpu": ("rpi5", ("cpu",), None, None),
    "rk3588.cpu_big": ("rk3588", ("cpu",), None, None),
    "rk3588.npu": ("rk3588", ("npu",), None, None),
    "jetson_orin_nano_8gb.cpu": ("jetson_orin_nano", ("cpu",), None, None),
    "jetson_orin_nano_8gb.gpu": ("jetson_orin_nano", ("gpu",), None, None),
    "jetson_orin_nx_16gb.gpu": ("jetson_orin_nx", ("gpu",), None, None),
    "jetson_agx_orin_64gb.cpu": ("jetson_agx_orin", ("cpu",), None, None),
    "jetson_agx_orin_64gb.gpu": ("jetson_agx_orin", ("gpu",), None, None),
    "jetson_agx_orin_64gb.dla": ("jetson_agx_orin", ("dla0", "dla1"), None, None),
    "coral_edgetpu.tpu": ("coral_edgetpu_host", ("tpu",), None, None),
    "reference.desktop_cpu_xeon": (
        "coral_edgetpu_host",
        ("cpu",),
        None,
        "reference host from the Coral table (Xeon Gold 6154 'Desktop CPU'), not this host",
    ),
    "hailo8.npu": ("hailo8_host", ("npu",), None, None),
    "hailo8l.npu": ("hailo8l_host", ("npu",), None, None),
    "kria_kv260.fpga": ("kria_kv260", ("fpga",), None, None),
    "imx8mp.cpu": ("imx8mp", ("cpu",), None, None),
    "imx8mp.npu": ("imx8mp", ("npu",), None, None),
    "intel_n100.cpu": (
        "intel_n100",
        ("cpu",),
        "unverified",
        "PROXY measured on a Celeron N5105 (older Tremont cores), not an N100: lower bound",
    ),
    "qcs6490.cpu": ("qcs6490", ("cpu",), None, None),
    "qcs6490.npu": ("qcs6490", ("npu",), None, None),
    "intel_core_ultra.cpu@258V": ("intel_core_ultra", ("cpu",), None, "Core Ultra 7 258V"),
    "intel_core_ultra.npu@258V": ("intel_core_ultra", ("npu",), None, "Core Ultra 7 258V"),
    "ryzen_ai_strix.npu": ("ryzen_ai", ("npu",), None, None),
    "snapdragon_x_elite.npu": ("snapdragon_x_elite", ("npu",), None, None),
}


def dj_rows(d: Data, profiles: dict[str, dict[str, Any]]) -> None:
    """Attach devices.json latency rows to the mapped devices."""
    for r in d.latencies:
        target = DJ_LATENCY_MAP.get(r["device_id"])
        if target is None:
            continue
        pid, locals_, status, note = target
        for local in locals_:
            dev = find_device(profiles[pid], local)
            model, variant = split_variant(r["model"])
            prec, detail = norm_precision(r["precision"], dev["kind"])
            notes = "; ".join(x for x in (r.get("note"), note) if x)
            dev["latencies"].append(
                row(
                    model,
                    r["latency_ms"],
                    prec,
                    int(r["batch"]),
                    r["metric"],
                    status or map_status(r["status"]),
                    f"{r['source']} [{VIA}]",
                    input=r.get("input"),
                    runtime=r.get("runtime"),
                    variant=variant,
                    precision_detail=detail,
                    note=notes,
                    origin_status=r["status"]
                    if r["status"] != (status or map_status(r["status"]))
                    else None,
                    throughput_equivalent="THROUGHPUT-equivalent" in r["metric"],
                )
            )
