"""NVIDIA Jetson Orin boards (Nano, NX, AGX): shared CPU, GPU and DLA builders.

Estimates (est) are this project's guesses; every one says so in its note.
"""

from __future__ import annotations

from typing import Any

from .data import Data
from .devices import (
    CNN_FAMILIES,
    GPU_FAMILIES,
    board,
    cpu_device,
    cpu_peaks,
    device,
    profile,
)
from .figures import Fig, derive, est, zero


def jetson_cpu(
    d: Data,
    board_id: str,
    cores: int,
    ghz: float,
    clock_status: str,
    mem: Fig,
    bw: Fig,
    idle: Fig,
    maxp: Fig,
) -> dict[str, Any]:
    name = d.raw(board_id, "cpu", "name")["value"]
    return cpu_device(
        "cpu_arm",
        str(name),
        formats=["onnx", "tflite", "ncnn"],
        peaks=cpu_peaks(
            [(cores, ghz, "a76")],
            clock_status,
            f"core count and clock of {board_id}.cpu (devices.json); A78AE issues like A76",
        ),
        memory=mem,
        bw=bw,
        idle=idle,
        maxp=maxp,
    )


def jetson_gpu(
    name: str, int8_dense: Fig, fp32: Fig, mem: Fig, bw: Fig, maxp: Fig
) -> dict[str, Any]:
    fp16 = derive(
        int8_dense["value"] / 2,
        "GOPS",
        "dense FP16 tensor-core rate = dense INT8 / 2",
        [int8_dense],
    )
    return device(
        "gpu",
        "gpu_nvidia",
        name,
        tier="hot",
        ep="TensorrtExecutionProvider",
        precisions=["int8", "fp16", "bf16", "fp32"],
        families=GPU_FAMILIES,
        formats=["onnx", "tensorrt"],
        peaks={"int8": int8_dense, "fp16": fp16, "fp32": fp32},
        memory=mem,
        bw=bw,
        idle=est(0.5, "W", "GPU rail idle"),
        maxp=maxp,
        dispatch=est(0.0001, "s", "CUDA launch + TensorRT enqueue"),
        note="CUDAExecutionProvider is the fallback EP; memory is shared with the CPU.",
    )


def jetson_dlas(per_dla_int8: Fig, mem: Fig, bw: Fig) -> list[dict[str, Any]]:
    out = []
    for i in (0, 1):
        out.append(
            device(
                f"dla{i}",
                "npu",
                f"NVDLA v2 core {i}",
                tier="hot",
                ep="TensorrtExecutionProvider",
                precisions=["int8", "fp16"],
                families=CNN_FAMILIES,
                formats=["onnx", "tensorrt"],
                peaks={
                    "int8": per_dla_int8,
                    "fp16": est(
                        per_dla_int8["value"] / 4,
                        "GOPS",
                        "Orin DLA is INT8-optimised "
                        "and FP16 is slower (NV_DLA); 1/4 of INT8 assumed",
                    ),
                    "fp32": zero("GOPS", "DLA has no FP32"),
                },
                memory=mem,
                bw=bw,
                idle=est(0.1, "W", "DLA clock-gated when idle"),
                maxp=est(3.0, "W", "one DLA under load"),
                dispatch=est(0.0002, "s", "TensorRT DLA enqueue"),
                note="TensorRT with trt_dla_enable=1 and trt_dla_core="
                + str(i)
                + "; layers the DLA cannot run fall back to the GPU.",
            )
        )
    return out


def build_jetson_orin_nano(d: Data) -> dict[str, Any]:
    b = "jetson_orin_nano_8gb"
    mem = d.memory(b, 8, "8 GB 128-bit LPDDR5 shared CPU/GPU")
    bw = d.fig(b, None, "memory_bw", "GB/s")
    maxp = d.fig(b, None, "max_power", "W")
    idle = est(4.0, "W", "module + carrier idle")
    cpu = jetson_cpu(d, b, 6, 1.5, "official", mem, bw, idle, est(7.0, "W", "CPU under load"))
    sparse = d.fig(b, "gpu", "peak_int8", "GOPS", 1000)
    int8 = derive(
        sparse["value"] / 2,
        "GOPS",
        f"dense = sparse / 2 ({sparse['value']} sparse "
        "GOPS; devices.json: 8GB = 40 sparse / ~20 dense)",
        [sparse],
        sparse["source"],
    )
    gpu = jetson_gpu(
        "Ampere GPU, 1024 CUDA cores, 32 Tensor cores @ 625 MHz",
        int8,
        d.fig(b, "gpu", "peak_fp32", "GOPS", 1000),
        mem,
        bw,
        est(10.0, "W", "GPU share of the 15 W mode"),
    )
    return profile(
        "jetson_orin_nano",
        "NVIDIA Jetson Orin Nano 8GB",
        "arm_gpu",
        50,
        [{"dt_compatible": "nvidia,p3767-0003"}, {"dt_compatible": "nvidia,p3767-0005"}],
        board(mem, bw, idle, maxp),
        [cpu, gpu],
        match_note="p3767-0003/-0005 are the Orin Nano 8GB module / dev kit SKUs in L4T "
        "device trees (general knowledge, unverified); Orin Nano has no DLA.",
        note="Peaks are the original 15 W mode; 'Super' (MAXN_SUPER, 25 W) raises GPU clock "
        "to 1.02 GHz and int8 to 67 sparse TOPS. YOLO11 and trtexec rows were measured "
        "in Super mode.",
    )


def build_jetson_orin_nx(d: Data) -> dict[str, Any]:
    b = "jetson_orin_nx_16gb"
    mem = d.memory(b, 16, "16 GB 128-bit LPDDR5 shared")
    bw = d.fig(b, None, "memory_bw", "GB/s")
    maxp = d.fig(b, None, "max_power", "W")
    idle = est(5.0, "W", "module + carrier idle")
    cpu = jetson_cpu(d, b, 8, 2.0, "unverified", mem, bw, idle, est(9.0, "W", "CPU under load"))
    module = d.fig(b, "gpu", "peak_int8_total_module", "GOPS", 1000)
    dla_pair = d.fig(b, "dla", "peak_int8", "GOPS", 1000)
    gpu_int8 = derive(
        (module["value"] - dla_pair["value"]) / 2,
        "GOPS",
        f"dense GPU = (module {module['value']} - 2 DLAs {dla_pair['value']}) sparse / 2",
        [module, dla_pair],
    )
    fp32 = est(1880, "GOPS", "1024 CUDA cores x 2 x 0.918 GHz (clock not in the sources)")
    gpu = jetson_gpu(
        "Ampere GPU, 1024 CUDA cores, 32 Tensor cores",
        gpu_int8,
        fp32,
        mem,
        bw,
        est(15.0, "W", "GPU share of the 25 W mode"),
    )
    per_dla = derive(
        dla_pair["value"] / 4,
        "GOPS",
        f"{dla_pair['value']} sparse GOPS for 2 DLAs / 2 DLAs / 2 (dense)",
        [dla_pair],
        dla_pair["source"],
    )
    dlas = jetson_dlas(per_dla, mem, bw)
    for dla in dlas:
        dla["efficiency"] = est(
            0.16,
            "fraction",
            "taken from the AGX Orin DLA, whose value "
            "is derived from MLPerf; no NX DLA latency in the sources",
        )
    return profile(
        "jetson_orin_nx",
        "NVIDIA Jetson Orin NX 16GB",
        "arm_gpu_dla",
        50,
        [{"dt_compatible": "nvidia,p3767-0000"}, {"dt_compatible": "nvidia,p3767-0001"}],
        board(mem, bw, idle, maxp),
        [cpu, gpu, *dlas],
        match_note="p3767-0000 (16GB) / -0001 (8GB) are Orin NX SKUs in L4T device trees "
        "(general knowledge, unverified); an 8GB NX has half the memory.",
    )


def build_jetson_agx_orin(d: Data) -> dict[str, Any]:
    b = "jetson_agx_orin_64gb"
    mem = d.memory(b, 64, "64 GB 256-bit LPDDR5 shared")
    bw = d.fig(b, None, "memory_bw", "GB/s")
    maxp = d.fig(b, None, "max_power", "W")
    idle = est(10.0, "W", "dev kit idle")
    cpu = jetson_cpu(
        d, b, 12, 2.2, "official", mem, bw, idle, est(20.0, "W", "12-core CPU under load")
    )
    sparse = d.fig(b, "gpu", "peak_int8", "GOPS", 1000)
    int8 = derive(
        sparse["value"] / 2,
        "GOPS",
        f"dense = {sparse['value']} sparse / 2 (MAXN)",
        [sparse],
        sparse["source"],
    )
    gpu = jetson_gpu(
        "Ampere GPU, 2048 CUDA cores @ 1.3 GHz, 64 Tensor cores",
        int8,
        d.fig(b, "gpu", "peak_fp32", "GOPS", 1000),
        mem,
        bw,
        est(40.0, "W", "GPU share of MAXN"),
    )
    pair = d.fig(b, "dla", "peak_int8", "GOPS", 1000)
    per_dla = derive(
        pair["value"] / 4,
        "GOPS",
        f"{pair['value']} sparse GOPS for 2 DLAs (MAXN) / 2 DLAs / 2 (dense)",
        [pair],
        pair["source"],
    )
    return profile(
        "jetson_agx_orin",
        "NVIDIA Jetson AGX Orin 64GB (dev kit)",
        "arm_gpu_dla",
        50,
        [
            {"dt_compatible": "nvidia,p3701-0005"},
            {"dt_compatible": "nvidia,p3701-0004"},
            {"dt_compatible": "nvidia,p3701-0000"},
        ],
        board(mem, bw, idle, maxp),
        [cpu, gpu, *jetson_dlas(per_dla, mem, bw)],
        match_note="p3701-0000/-0004/-0005 are AGX Orin module SKUs in L4T device trees "
        "(general knowledge, unverified); 32GB SKUs have less memory and TOPS.",
        note="Peaks are MAXN; other power modes (15/30/50 W) lower them (devices.json notes).",
    )
