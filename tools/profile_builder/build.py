"""Build every profile document: the board builders, then latency rows and efficiencies."""

from __future__ import annotations

import json
from typing import Any

from .boards_accel import build_ascend310, build_coral, build_hailo8, build_hailo8l
from .boards_arm import (
    build_imx8mp,
    build_qcs6490,
    build_rk3588,
    build_rpi5,
    build_snapdragon_x_elite,
)
from .boards_fpga import build_kv260
from .boards_jetson import build_jetson_agx_orin, build_jetson_orin_nano, build_jetson_orin_nx
from .boards_x86 import build_generic_x86, build_intel_core_ultra, build_intel_n100, build_ryzen_ai
from .data import Data
from .efficiency import attach_efficiencies
from .latency_devices_json import dj_rows
from .latency_tables import coral_rpi_rows, hailo_rows, rknn_rows, vitis_rows, yolo11_rows

BUILDERS = [
    build_rpi5,
    build_rk3588,
    build_jetson_orin_nano,
    build_jetson_orin_nx,
    build_jetson_agx_orin,
    build_coral,
    build_hailo8,
    build_hailo8l,
    build_kv260,
    build_imx8mp,
    build_intel_n100,
    build_qcs6490,
    build_ascend310,
    build_generic_x86,
    build_intel_core_ultra,
    build_ryzen_ai,
    build_snapdragon_x_elite,
]


def build_all(d: Data) -> dict[str, dict[str, Any]]:
    """Build every profile document, keyed by id."""
    profiles = {doc["id"]: doc for doc in (b(d) for b in BUILDERS)}
    for attach in (dj_rows, rknn_rows, hailo_rows, vitis_rows, yolo11_rows, coral_rpi_rows):
        attach(d, profiles)
    attach_efficiencies(profiles)
    for doc in profiles.values():
        for dev in doc["devices"]:
            dev["latencies"].sort(key=lambda r: (r["model"], r["precision"], r["latency_ms"]))
            if not dev["latencies"]:
                del dev["latencies"]
    return profiles


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
