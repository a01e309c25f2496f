"""Latency rows from the per-source CSV tables (RKNN, Hailo, Vitis AI, YOLO11, Coral on RPi),
for models devices.json lacks."""

from __future__ import annotations

import re
from typing import Any

from .data import Data
from .devices import find_device
from .figures import SRC_HAILO, SRC_RKNN, SRC_RPI_TPU, SRC_VITIS, SRC_YOLO11
from .latency_rows import normalize, row


def rknn_rows(d: Data, profiles: dict[str, dict[str, Any]]) -> None:
    """RK3588 single-core NPU FPS from the RKNN zoo for models devices.json lacks."""
    npu = find_device(profiles["rk3588"], "npu")
    covered = {
        r["note"].split(":")[0]
        for r in d.latencies
        if r["device_id"] == "rk3588.npu" and r.get("note")
    }
    for r in d.csv("rknn/rknn_model_zoo_npu_fps.csv"):
        if r["platform"] != "RK3588/@single_core" or r["metric"] != "FPS":
            continue
        if r["model"] in covered:
            continue
        covered.add(r["model"])
        fps = float(r["value"])
        npu["latencies"].append(
            row(
                r["model"],
                1000 / fps,
                r["dtype"].lower(),
                1,
                f"1000/FPS sync single-stream (1 of 3 NPU cores, inference only): {fps} FPS",
                "measured",
                SRC_RKNN,
                input=r["input_shape"],
                runtime="RKNN runtime",
                origin_status="official_measured",
            )
        )


HAILO_ALIASES = {"resnet_v1_50": "resnet50_v1", "mobilenet_v2_1.0": "mobilenet_v2"}


def well_formed_hailo(r: dict[str, str]) -> bool:
    """Skip rows the CSV extractor mis-parsed (zero FPS, links in numeric columns)."""
    num = re.compile(r"^\d+(\.\d+)?$")
    return (
        bool(r["network"])
        and all(num.match(r[k] or "") for k in ("fps_bs1", "fps_bs8", "gops", "params_M"))
        and float(r["fps_bs1"]) > 0
        and re.match(r"^\d+x\d+x\d+$", r["input"] or "") is not None
    )


def hailo_rows(d: Data, profiles: dict[str, dict[str, Any]]) -> None:
    """Hailo model-zoo batch-1 FPS (pipelined throughput) for models devices.json lacks."""
    for chip, pid in (("HAILO8", "hailo8_host"), ("HAILO8L", "hailo8l_host")):
        npu = find_device(profiles[pid], "npu")
        covered = {r["model"] for r in npu["latencies"]}
        for r in d.csv("hailo/hailo_model_zoo_fps.csv"):
            if r["device"] != chip or not well_formed_hailo(r):
                continue
            name = HAILO_ALIASES.get(r["network"], r["network"])
            name = re.sub(r"^yolov11", "yolo11", name)
            if normalize(name) in covered:
                continue
            covered.add(normalize(name))
            fps = float(r["fps_bs1"])
            npu["latencies"].append(
                row(
                    name,
                    1000 / fps,
                    "int8",
                    1,
                    f"1000/FPS(batch1) - pipelined throughput, not latency; FPS bs1={r['fps_bs1']}"
                    f", bs8={r['fps_bs8']}",
                    "measured",
                    SRC_HAILO,
                    input=r["input"],
                    runtime="HailoRT",
                    note=f"{r['task']}; {r['gops']} GOPs, {r['params_M']} M params",
                    origin_status="official_measured",
                    throughput_equivalent=True,
                )
            )


def vitis_rows(d: Data, profiles: dict[str, dict[str, Any]]) -> None:
    """KV260 DPU end-to-end single-thread FPS for models devices.json lacks."""
    fpga = find_device(profiles["kria_kv260"], "fpga")
    covered = " ".join(r["metric"] for r in fpga["latencies"])
    for r in d.csv("vitis_ai/vitis_ai_2.5_dpu_fps_by_board.csv"):
        if r["board"] != "Kria KV260 SOM" or not r["fps_single_thread"]:
            continue
        fps = float(r["fps_single_thread"])
        if f"({r['fps_single_thread']} fps)" in covered:
            continue
        m = re.match(r"^(.*?)[_-](tf2|tf|pt)$", r["model"], re.IGNORECASE)
        name, variant = (m.group(1), m.group(2).lower()) if m else (r["model"], None)
        fpga["latencies"].append(
            row(
                name,
                1000 / fps,
                "int8",
                1,
                f"1000/E2E fps single thread ({fps} fps), incl. pre/post on A53",
                "measured",
                SRC_VITIS,
                runtime="Vitis AI 2.5 / VART (DPU B4096 @300MHz)",
                variant=variant,
                note=f"zoo name {r['std_name']}",
                origin_status="official_measured",
            )
        )


YOLO_DEVICES = {
    "Jetson Orin Nano Super": "jetson_orin_nano",
    "Jetson Orin NX 16GB (reComputer J4012)": "jetson_orin_nx",
}
YOLO_FORMATS = {
    "TensorRT (FP32)": ("gpu", "fp32"),
    "TensorRT (FP16)": ("gpu", "fp16"),
    "TensorRT (INT8)": ("gpu", "int8"),
    "NCNN": ("cpu", "fp32"),
    "OpenVINO": ("cpu", "fp32"),
}


def yolo11_rows(d: Data, profiles: dict[str, dict[str, Any]]) -> None:
    """Ultralytics YOLO11 latencies: Jetson GPU (TensorRT) / ARM CPU formats, RPi 5 CPU."""
    for r in d.csv("edge_yolo11/ultralytics_yolo11_edge_latency.csv"):
        if r["device"].startswith("Raspberry Pi 5"):
            pid, formats = "rpi5", {**YOLO_FORMATS, "ONNX": ("cpu", "fp32")}
        elif r["device"] in YOLO_DEVICES:
            pid, formats = YOLO_DEVICES[r["device"]], YOLO_FORMATS
        else:
            continue
        if r["format"] not in formats or not r["inference_ms_per_image"]:
            continue
        local, prec = formats[r["format"]]
        if pid == "rpi5" and local != "cpu":
            continue
        notes = [r["device"]]
        if "Super" in r["device"]:
            notes.append("measured in Super mode (MAXN_SUPER)")
        if prec == "int8":
            notes.append(f"INT8 calibration in this run gave mAP50-95 {r['mAP50_95_coco8']}")
        find_device(profiles[pid], local)["latencies"].append(
            row(
                r["model"],
                float(r["inference_ms_per_image"]),
                prec,
                1,
                "Ultralytics benchmark 'Inference time (ms/im)', imgsz 640",
                "measured",
                SRC_YOLO11,
                input="640x640",
                runtime=r["format"],
                note="; ".join(notes),
                origin_status="official_measured",
            )
        )


def coral_rpi_rows(d: Data, profiles: dict[str, dict[str, Any]]) -> None:
    """Coral USB on a Raspberry Pi 4 (64-bit): SSD detector latencies."""
    tpu = find_device(profiles["coral_edgetpu_host"], "tpu")
    for r in d.csv("rpi_edgetpu/tflite_detection_latency_rpi_coral.csv"):
        if r["kind"] != "EdgeTPU" or r["device"] != "RasPi4 64bit":
            continue
        tpu["latencies"].append(
            row(
                r["model"].replace("-", "_"),
                float(r["latency_ms"]),
                "int8",
                1,
                "Latency mean (ms), TFLite 2.5 benchmark, 350 runs",
                "measured",
                SRC_RPI_TPU,
                input=r["input"],
                runtime="TFLite + libedgetpu (USB, Raspberry Pi 4 64-bit host)",
                note="host is a Raspberry Pi 4 (64-bit OS), Edge TPU @500MHz",
                origin_status="third_party",
            )
        )
