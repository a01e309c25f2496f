"""Figure objects (value, unit, status, source) and the source citations they name."""

from __future__ import annotations

from typing import Any

GIB = 2**30

Fig = dict[str, Any]

# --------------------------------------------------------------------------------------
# Sources. devices.json figures keep their own source text; these name everything else.
# --------------------------------------------------------------------------------------
EST = "hetmesh estimate - no figure in the stored sources; verify on hardware"
BY_DEFINITION = "by definition (hetmesh schema)"
VIA = "compiled in hetmesh shared devices.json"
SRC_RKNN = (
    "github airockchip/rknn_model_zoo @bad6c73 README.md 'Model performance benchmark(FPS)' "
    "(Apache-2.0)"
)
SRC_HAILO = (
    "github hailo-ai/hailo_model_zoo @c83fc03 docs/public_models/<DEVICE>/*.rst (MIT; "
    "DFC v3.33.0 / Model Zoo v2.17)"
)
SRC_VITIS = (
    "github Xilinx/Vitis-AI @e0d6e0c8f model_zoo/README.md 'Model Performance', "
    "Kria KV260 SOM 1x B4096F @300MHz (Apache-2.0)"
)
SRC_YOLO11 = (
    "github ultralytics/ultralytics @0100750 docs/en/guides/nvidia-jetson.md, "
    "raspberry-pi.md 'Detailed Comparison Tables' (AGPL-3.0 docs; facts cited)"
)
SRC_RPI_TPU = (
    "github NobuoTsukamoto/benchmarks @422e0a0 tensorflow/lite/tf1_detection_model_zoo/"
    "raspi.md 'Latency mean (ms)' (MIT)"
)

# devices.json status tags -> profile status (origin kept in origin_status when different)
STATUS_MAP = {
    "official": "official",
    "official_measured": "measured",
    "third_party": "measured",
    "derived": "derived",
    "unverified": "unverified",
}


def map_status(tag: str) -> str:
    """Map a devices.json status tag onto official/measured/derived/unverified."""
    if tag.startswith("official (MLPerf"):
        return "measured"
    if tag.startswith("derived"):
        return "derived"
    return STATUS_MAP[tag]


def fig(
    value: float,
    unit: str,
    status: str,
    source: str,
    note: str | None = None,
    origin_status: str | None = None,
) -> Fig:
    """Build one figure object."""
    out: Fig = {"value": round(float(value), 6), "unit": unit, "status": status, "source": source}
    if note:
        out["note"] = note
    if origin_status and origin_status != status:
        out["origin_status"] = origin_status
    return out


def est(value: float, unit: str, note: str) -> Fig:
    """An estimate the sources do not give: status unverified, with a note to verify."""
    return fig(value, unit, "unverified", EST, f"estimate to verify: {note}")


def zero(unit: str, why: str) -> Fig:
    """A figure that is 0 by definition (unsupported precision, no reconfiguration)."""
    return fig(0, unit, "derived", BY_DEFINITION, why)


def derive(
    value: float,
    unit: str,
    formula: str,
    inputs: list[Fig] | None = None,
    source: str = "derived; formula in note",
) -> Fig:
    """A computed figure; unverified when any input is unverified."""
    status = "derived"
    if inputs and any(i["status"] == "unverified" for i in inputs):
        status = "unverified"
    return fig(value, unit, status, source, formula)
