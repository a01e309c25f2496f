"""x86 machines: Intel N100, generic x86 server, Core Ultra 200V, Ryzen AI 300.

Estimates (est) are this project's guesses; every one says so in its note.
"""

from __future__ import annotations

from typing import Any

from .data import Data
from .devices import (
    NPU_TRANSFORMER_FAMILIES,
    board,
    cpu_device,
    cpu_peaks,
    device,
    profile,
    total,
    x86_host_cpu,
)
from .figures import GIB, est, zero


def build_intel_n100(d: Data) -> dict[str, Any]:
    b = "intel_n100"
    mem = est(16 * GIB, "bytes", "mini-PCs ship 8-32 GB, single channel; read MemTotal")
    bw = d.fig(b, None, "memory_bw", "GB/s")
    idle = est(6.0, "W", "whole-box idle; devices.json: several W, measure")
    tdp = d.fig(b, None, "tdp", "W", note="PL1; PL2 bursts are higher")
    cpu = cpu_device(
        "cpu_x86",
        "Intel Processor N100 (4x Gracemont, up to 3.4 GHz)",
        formats=["onnx", "tflite", "ncnn", "openvino"],
        peaks=cpu_peaks(
            [(4, 3.4, "gracemont")],
            "unverified",
            "N100 core count and clock (notebookcheck, third-party); int8 AVX-VNNI rate unverified",
            {"fp32": d.fig(b, "cpu", "peak_fp32", "GOPS", 1000)},
        ),
        memory=mem,
        bw=bw,
        idle=idle,
        maxp=total([idle, tdp], "W", "box idle + CPU PL1"),
        note="OpenVINOExecutionProvider also works. Latency rows are a Celeron N5105 proxy "
        "(older Tremont cores): a lower bound on N100 speed.",
    )
    return profile(
        "intel_n100",
        "Intel Processor N100 mini-PC",
        "x86",
        30,
        [{"arch": "x86_64", "cpu_model_regex": r"Intel\(R\) N100\b"}],
        board(mem, bw, idle, cpu["max_power_w"]),
        [cpu],
        note="The UHD iGPU (24 EU) is left out: no sourced peak figures.",
    )


def build_generic_x86(d: Data) -> dict[str, Any]:
    cpu = x86_host_cpu(
        "generic x86-64 server CPU (16 cores @ 2.5 GHz, AVX2 assumed)",
        cores=16,
        ghz=2.5,
        memory_gib=64,
        bw=102.4,
        idle=80,
        maxp=250,
    )
    cpu["note"] = (
        "Fallback profile: every figure is a generic estimate; the probe should "
        "replace core count, memory and clock with what it reads."
    )
    cpu["tier"] = "cold"
    return profile(
        "generic_x86_server",
        "Generic x86-64 server (fallback)",
        "x86",
        0,
        [{"arch": "x86_64"}, {"arch": "amd64"}],
        board(cpu["memory_bytes"], cpu["memory_bw_gbs"], cpu["idle_power_w"], cpu["max_power_w"]),
        [cpu],
        note="Lowest-priority fallback for any x86-64 machine no other profile matches.",
    )


def build_intel_core_ultra(d: Data) -> dict[str, Any]:
    b = "intel_core_ultra"
    mem = est(32 * GIB, "bytes", "258V ships 16 or 32 GB on-package LPDDR5X")
    bw = est(136.5, "GB/s", "128-bit LPDDR5X-8533")
    idle = est(4.0, "W", "laptop idle")
    cpu = cpu_device(
        "cpu_x86",
        "Core Ultra 7 258V: 4 P-cores + 4 LP E-cores",
        ep="OpenVINOExecutionProvider",
        formats=["onnx", "openvino"],
        peaks=cpu_peaks(
            [(4, 4.8, "avx2"), (4, 3.7, "gracemont")],
            "unverified",
            "recalled 258V core counts and clocks",
        ),
        memory=mem,
        bw=bw,
        idle=idle,
        maxp=est(30.0, "W", "258V turbo power"),
    )
    npu = device(
        "npu",
        "npu",
        "Intel NPU 4 (Lunar Lake)",
        tier="hot",
        ep="OpenVINOExecutionProvider",
        precisions=["int8", "fp16"],
        families=NPU_TRANSFORMER_FAMILIES,
        formats=["openvino", "onnx"],
        peaks={
            "int8": d.fig(b, "npu", "peak_int8_lunar_lake", "GOPS", 1000),
            "fp16": est(24000, "GOPS", "FP16 = INT8 / 2 assumed"),
            "fp32": zero("GOPS", "FP32 IR runs at FP16 on the NPU"),
        },
        memory=mem,
        bw=bw,
        idle=est(0.2, "W", "NPU idle"),
        maxp=est(6.0, "W", "NPU load"),
        dispatch=est(0.0003, "s", "OpenVINO infer request"),
        note="OpenVINO EP with device_type='NPU'. Meteor Lake (155H) NPU is ~11 TOPS "
        "(unverified) and is not this profile.",
    )
    return profile(
        "intel_core_ultra",
        "Intel Core Ultra 200V (Lunar Lake, e.g. 258V)",
        "x86_soc_npu",
        40,
        [{"arch": "x86_64", "cpu_model_regex": r"Core\(TM\) Ultra \d+ 2\d\dV"}],
        board(mem, bw, idle, cpu["max_power_w"]),
        [cpu, npu],
        note="The Arc iGPU is left out (no sourced peaks); its OpenVINO rows and the 155H "
        "rows in devices.json are not used.",
    )


def build_ryzen_ai(d: Data) -> dict[str, Any]:
    b = "ryzen_ai_strix"
    mem = est(32 * GIB, "bytes", "typical Strix laptop RAM")
    bw = est(120.0, "GB/s", "128-bit LPDDR5X-7500")
    idle = est(5.0, "W", "laptop idle")
    cpu = cpu_device(
        "cpu_x86",
        "AMD Ryzen AI 300 'Strix' CPU (12 Zen 5 / Zen 5c cores)",
        formats=["onnx", "openvino"],
        peaks=cpu_peaks([(12, 4.0, "avx2")], "unverified", "recalled Strix core count/clock"),
        memory=mem,
        bw=bw,
        idle=idle,
        maxp=est(28.0, "W", "default TDP"),
    )
    npu = device(
        "npu",
        "npu",
        "AMD XDNA 2 NPU (32 AIE cores)",
        tier="hot",
        ep="VitisAIExecutionProvider",
        precisions=["int8", "bf16"],
        families=NPU_TRANSFORMER_FAMILIES,
        formats=["onnx"],
        peaks={
            "int8": d.fig(b, "npu", "peak_int8_measured", "GOPS", 1000),
            "fp16": est(25650, "GOPS", "BF16 (uses the fp16 slot) = INT8 / 2 assumed"),
            "fp32": zero("GOPS", "FP32 models fall back to the CPU"),
        },
        memory=mem,
        bw=bw,
        idle=est(0.2, "W", "NPU idle"),
        maxp=est(6.0, "W", "NPU load"),
        dispatch=d.fig(b, "npu", "dispatch_latency", "s", 0.001),
        note="XINT8 models quantized with AMD Quark; results vary strongly between Ryzen AI "
        "releases (mobilenet_v2 2.37 ms in 1.4.1 vs 17.79 ms in 1.7.0).",
    )
    return profile(
        "ryzen_ai",
        "AMD Ryzen AI 300 'Strix' (XDNA 2 NPU)",
        "x86_soc_npu",
        40,
        [
            {"arch": "x86_64", "cpu_model_regex": r"AMD Ryzen AI"},
            {"arch": "x86_64", "device_node": "/dev/accel/accel*", "cpu_model_regex": r"AMD Ryzen"},
        ],
        board(mem, bw, idle, cpu["max_power_w"]),
        [cpu, npu],
        note="Also covers Phoenix/Hawk Point/Krackan NPUs poorly: their peaks differ.",
    )
