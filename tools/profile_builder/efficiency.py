"""Device efficiency derived from a published latency row, model work and the device peak."""

from __future__ import annotations

from typing import Any

from .devices import find_device
from .figures import Fig, fig
from .latency_rows import normalize

# Model work in GOPs (2 x MACs), used only to derive efficiency from a published latency.
MODEL_GOPS = {
    "resnet50": (8.19, "Vitis AI 2.5 zoo tf_mlperf_resnet50_imagenet_224_224_8.19G"),
    "resnet50_v1": (6.98, "Hailo model zoo resnet_v1_50 GOPs column (6.98)"),
    "mobilenet_v2": (0.602, "Vitis AI 2.5 zoo tf_mobilenetv2_1.0_imagenet_224_224_602M"),
    "yolov8n": (8.74, "Hailo model zoo yolov8n GOPs column (8.74)"),
    "yolo11n": (6.55, "Hailo model zoo yolov11n GOPs column (6.55)"),
}


def efficiency_from(
    dev: dict[str, Any],
    model: str,
    precision: str,
    where: dict[str, str] | None = None,
    note: str = "",
) -> Fig:
    """Derive efficiency = (model GOPs / latency) / peak from the device's own latency row."""
    rows = [
        r
        for r in dev["latencies"]
        if r["model"] == model
        and r["precision"] == precision
        and not r.get("throughput_equivalent")
        and all(v in str(r.get(k, "")) for k, v in (where or {}).items())
    ]
    if not rows:
        raise SystemExit(f"no latency row for {dev['id']} {model} {precision}")
    row = min(rows, key=lambda r: r["latency_ms"])
    gops, gops_src = MODEL_GOPS[model]
    peak = dev["peak_gops"][precision]
    achieved = gops / (row["latency_ms"] / 1000)
    value = achieved / peak["value"]
    formula = (
        f"({model} {gops} GOPs [{gops_src}] / {row['latency_ms']} ms [{row['source']}])"
        f" / peak {precision} {peak['value']} GOPS = {achieved:.0f} / {peak['value']}"
    )
    if note:
        formula += f"; {note}"
    status = "derived" if peak["status"] != "unverified" else "unverified"
    return fig(min(value, 1.0), "fraction", status, "derived; formula in note", formula)


# Efficiency derivations: (profile, device) -> (model, precision, row filter, note); the
# filter maps a row field to a substring it must contain, to pick the row the GOPs fit.
EFFICIENCY_REFS: dict[tuple[str, str], tuple[str, str, dict[str, str] | None, str]] = {
    ("rpi5", "cpu"): (
        "yolo11n",
        "fp32",
        {"runtime": "ONNX"},
        "ONNX Runtime CPU (ultralytics ONNX)",
    ),
    ("rk3588", "npu"): (
        "resnet50",
        "int8",
        None,
        "the zoo figure uses 1 of the 3 NPU cores (about 0.45 of one core)",
    ),
    ("jetson_orin_nano", "gpu"): (
        "yolov8n",
        "int8",
        None,
        "measured in Super mode vs the 15 W-mode dense peak",
    ),
    ("jetson_orin_nx", "gpu"): ("resnet50", "int8", None, "MLPerf v3.1 SingleStream p90"),
    ("jetson_agx_orin", "gpu"): ("resnet50", "int8", None, "MLPerf v3.1 SingleStream p90"),
    ("jetson_agx_orin", "dla0"): ("resnet50", "int8", None, "per-DLA time from MLPerf"),
    ("jetson_agx_orin", "dla1"): ("resnet50", "int8", None, "per-DLA time from MLPerf"),
    ("coral_edgetpu_host", "tpu"): ("mobilenet_v2", "int8", None, "USB 3.0 desktop host"),
    ("hailo8_host", "npu"): (
        "resnet50_v1",
        "int8",
        None,
        "hailortcli HW latency; pipelined throughput gives ~0.37",
    ),
    ("kria_kv260", "fpga"): (
        "resnet50",
        "int8",
        {"variant": "mlperf"},
        "end-to-end incl. pre/post on the A53s: DPU-only is higher",
    ),
    ("imx8mp", "cpu"): ("resnet50", "int8", None, "TFLite, 4 threads"),
    ("imx8mp", "npu"): ("resnet50", "int8", None, "TFLite + VX delegate"),
    ("qcs6490", "cpu"): ("resnet50", "int8", None, "ONNX Runtime CPU, w8a8 model"),
    ("qcs6490", "npu"): ("resnet50", "int8", None, "w8a8"),
    ("ryzen_ai", "npu"): ("resnet50", "int8", None, "XINT8"),
    ("snapdragon_x_elite", "npu"): ("resnet50", "int8", None, "w8a8"),
}


def attach_efficiencies(profiles: dict[str, dict[str, Any]]) -> None:
    """Replace each EFFICIENCY_REFS device's efficiency with the one its latency row gives."""
    for (pid, local), (model, prec, where, note) in EFFICIENCY_REFS.items():
        dev = find_device(profiles[pid], local)
        dev["efficiency"] = efficiency_from(dev, normalize(model), prec, where, note)
