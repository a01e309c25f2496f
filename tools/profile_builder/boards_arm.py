"""Arm boards and SoCs: Raspberry Pi 5, RK3588, i.MX 8M Plus, QCS6490, Snapdragon X Elite.

Estimates (est) are this project's guesses; every one says so in its note.
"""

from __future__ import annotations

from typing import Any

from .data import Data
from .devices import (
    CNN_FAMILIES,
    NPU_TRANSFORMER_FAMILIES,
    board,
    cpu_accel_board,
    cpu_device,
    cpu_peaks,
    device,
    profile,
)
from .figures import GIB, est, zero


def build_rpi5(d: Data) -> dict[str, Any]:
    mem = d.fig(
        "rpi5",
        None,
        "memory_gb",
        "bytes",
        GIB,
        value=8,
        note="8 GB SKU assumed (x 2^30); the probe should read MemTotal",
    )
    bw = d.fig("rpi5", None, "memory_bw", "GB/s")
    idle = est(2.7, "W", "devices.json: commonly reported ~2.5-3 W idle; MEASURE")
    maxp = est(8.0, "W", "devices.json: ~7-9 W all-core stress; MEASURE")
    peaks = {p: d.fig("rpi5", "cpu", f"peak_{p}", "GOPS", 1000) for p in ("int8", "fp16", "fp32")}
    cpu = cpu_device(
        "cpu_arm",
        "4x Cortex-A76 @ 2.4 GHz (BCM2712)",
        formats=["onnx", "tflite", "ncnn"],
        peaks=peaks,
        memory=mem,
        bw=bw,
        idle=idle,
        maxp=maxp,
    )
    return profile(
        "rpi5",
        "Raspberry Pi 5 (BCM2712)",
        "arm_sbc",
        40,
        [{"dt_compatible": "raspberrypi,5-model-b"}, {"dt_compatible": "brcm,bcm2712"}],
        board(mem, bw, idle, maxp),
        [cpu],
        note="The VideoCore VII GPU is left out: ncnn Vulkan on it is ~10-20x slower than the "
        "CPU (resnet50 842 ms vs 46 ms, devices.json); do not schedule NN work there.",
    )


def build_rk3588(d: Data) -> dict[str, Any]:
    mem = est(
        8 * GIB,
        "bytes",
        "boards ship 4-32 GB (RK3588 brief datasheet: up to 32 GB); "
        "8 GB assumed; the probe should read MemTotal",
    )
    bw = d.fig("rk3588", None, "memory_bw", "GB/s")
    cpu_idle = est(3.0, "W", "board idle is board dependent (devices.json: measure)")
    cpu_max = est(7.0, "W", "A76 cluster under load")
    fp32 = d.fig("rk3588", "cpu_big", "peak_fp32", "GOPS", 1000)
    cpu = cpu_device(
        "cpu_arm",
        "4x Cortex-A76 @ 2.4 GHz (big cluster; 4x A55 not modelled)",
        formats=["onnx", "tflite", "ncnn"],
        peaks=cpu_peaks(
            [(4, 2.4, "a76")],
            "official",
            "RK3588 brief datasheet core count and clock (same formula as Raspberry Pi 5)",
            {"fp32": fp32},
        ),
        memory=mem,
        bw=bw,
        idle=cpu_idle,
        maxp=cpu_max,
        efficiency=est(
            0.25,
            "fraction",
            "same A76 cores as the Raspberry Pi 5, whose "
            "efficiency is derived from an ONNX Runtime latency",
        ),
    )
    int8 = d.fig("rk3588", "npu", "peak_int8", "GOPS", 1000)
    npu = device(
        "npu",
        "npu",
        "RKNPU2 (NPU 3.0), 3 cores",
        tier="hot",
        ep="RKNPUExecutionProvider",
        precisions=["int4", "int8", "fp16"],
        families=NPU_TRANSFORMER_FAMILIES,
        formats=["rknn", "onnx"],
        peaks={
            "int8": int8,
            "fp16": est(
                1500,
                "GOPS",
                "FP16 rate not published; 1/4 of INT8 assumed "
                "(CLIP fp16 at 6.5 FPS suggests it is far below INT8)",
            ),
            "fp32": zero("GOPS", "RKNPU2 has no FP32"),
        },
        memory=mem,
        bw=bw,
        idle=est(0.3, "W", "NPU power-gated when idle"),
        maxp=est(3.0, "W", "NPU share of SoC power under load"),
        dispatch=est(0.0005, "s", "librknnrt rknn_run call + DMA setup"),
        note="Upstream ONNX Runtime has no EP for RKNPU2 (its 'Rockchip NPU' EP targets "
        "RK1808/RK3399Pro): run RKNN models through librknnrt / rknn-toolkit-lite2; "
        "ONNX models must be converted with RKNN-Toolkit2 first. The 3 cores can be "
        "used separately (core_mask) - published latencies use one core.",
    )
    return profile(
        "rk3588",
        "Rockchip RK3588 SBC (e.g. Rock 5B / Orange Pi 5 Plus)",
        "arm_sbc_npu",
        50,
        [
            {"dt_compatible": "rockchip,rk3588"},
            {"dt_compatible": "rockchip,rk3588s"},
            {"arch": "aarch64", "device_node": "/dev/rknpu*"},
            {"arch": "aarch64", "sysfs_path": "/sys/kernel/debug/rknpu"},
        ],
        cpu_accel_board(mem, bw, cpu, npu),
        [cpu, npu],
        note="The Mali-G610 GPU is left out: no ONNX Runtime EP drives it (ncnn Vulkan rows "
        "in devices.json show it slower than the NPU).",
    )


def build_imx8mp(d: Data) -> dict[str, Any]:
    b = "imx8mp"
    mem = est(6 * GIB, "bytes", "EVK ships 6 GB LPDDR4; boards vary; read MemTotal")
    bw = est(16.0, "GB/s", "32-bit LPDDR4-4000")
    cpu_idle = est(1.5, "W", "devices.json idle_power is null; measure")
    cpu = cpu_device(
        "cpu_arm",
        "4x Cortex-A53 up to 1.8 GHz",
        formats=["onnx", "tflite"],
        peaks=cpu_peaks([(4, 1.8, "a53")], "unverified", "imx8mp.cpu name (unverified clock)"),
        memory=mem,
        bw=bw,
        idle=cpu_idle,
        maxp=est(3.0, "W", "A53 cluster under load"),
    )
    npu = device(
        "npu",
        "npu",
        "VeriSilicon VIPNano-SI+ NPU",
        tier="hot",
        ep="VSINPUExecutionProvider",
        precisions=["int8"],
        families=CNN_FAMILIES,
        formats=["tflite"],
        peaks={
            "int8": d.fig(b, "npu", "peak_int8", "GOPS", 1000),
            "fp16": zero("GOPS", "not offered (int16 only limited)"),
            "fp32": zero("GOPS", "NPU runs quantized models only"),
        },
        memory=mem,
        bw=bw,
        idle=est(0.1, "W", "NPU idle"),
        maxp=est(1.5, "W", "NPU under load"),
        dispatch=est(
            0.0005,
            "s",
            "VX delegate invoke; first inference also compiles the graph (warm-up, seconds)",
        ),
        note="NXP documents TFLite + VX delegate (libvx_delegate.so); the ORT VSINPU EP is "
        "unverified here. The NPU is SLOWER than the CPU on some models "
        "(deeplabv3: NPU 586 ms vs CPU 447 ms).",
    )
    return profile(
        "imx8mp",
        "NXP i.MX 8M Plus",
        "arm_soc_npu",
        50,
        [{"dt_compatible": "fsl,imx8mp"}],
        cpu_accel_board(mem, bw, cpu, npu),
        [cpu, npu],
    )


def build_qcs6490(d: Data) -> dict[str, Any]:
    b = "qcs6490"
    mem = est(6 * GIB, "bytes", "RB3 Gen 2 vision kit RAM assumed 6 GB; read MemTotal")
    bw = est(25.6, "GB/s", "LPDDR5 bus width/speed not in the sources")
    cpu_idle = est(2.0, "W", "devices.json idle_power is null; measure")
    cpu = cpu_device(
        "cpu_arm",
        "Kryo 670: 1x A78 2.7 GHz + 3x A78 2.4 GHz + 4x A55 1.9 GHz",
        formats=["onnx", "tflite"],
        peaks=cpu_peaks(
            [(1, 2.7, "a76"), (3, 2.4, "a76"), (4, 1.9, "a55")],
            "unverified",
            "qcs6490.cpu name (unverified)",
        ),
        memory=mem,
        bw=bw,
        idle=cpu_idle,
        maxp=est(6.0, "W", "CPU under load"),
    )
    npu = device(
        "npu",
        "npu",
        "Hexagon 770 HTP (Qualcomm AI Engine)",
        tier="hot",
        ep="QNNExecutionProvider",
        precisions=["int8"],
        families=NPU_TRANSFORMER_FAMILIES,
        formats=["qnn", "tflite", "onnx"],
        peaks={
            "int8": d.fig(b, "npu", "peak_int8", "GOPS", 1000),
            "fp16": zero("GOPS", "FP16 is limited on this HTP generation; not offered"),
            "fp32": zero("GOPS", "HTP runs quantized/fp16 models only"),
        },
        memory=mem,
        bw=bw,
        idle=est(0.2, "W", "HTP idle"),
        maxp=est(3.0, "W", "HTP load"),
        dispatch=est(0.0003, "s", "QNN graph execute call"),
        note="QNN EP with the HTP backend. w8a16 rows are listed as int8 with "
        "precision_detail; AI Hub publishes only quantized variants for this device.",
    )
    return profile(
        "qcs6490",
        "Qualcomm QCS6490 (Dragonwing RB3 Gen 2 Vision Kit)",
        "arm_soc_npu",
        50,
        [{"dt_compatible": "qcom,qcs6490"}, {"dt_compatible": "qcom,qcm6490"}],
        cpu_accel_board(mem, bw, cpu, npu),
        [cpu, npu],
        note="The Adreno 643 GPU is left out: no sourced figures.",
    )


def build_snapdragon_x_elite(d: Data) -> dict[str, Any]:
    b = "snapdragon_x_elite"
    mem = est(32 * GIB, "bytes", "CRD RAM")
    bw = est(135.0, "GB/s", "128-bit LPDDR5X-8448")
    idle = est(4.0, "W", "laptop idle")
    cpu = cpu_device(
        "cpu_arm",
        "Snapdragon X Elite: 12 Oryon cores",
        formats=["onnx", "tflite"],
        peaks=cpu_peaks(
            [(12, 3.4, "a76")],
            "unverified",
            "recalled core count/clock; Oryon treated as 2x128-bit FMA (likely an underestimate)",
        ),
        memory=mem,
        bw=bw,
        idle=idle,
        maxp=est(45.0, "W", "CPU under load"),
    )
    npu = device(
        "npu",
        "npu",
        "Hexagon NPU (HTP)",
        tier="hot",
        ep="QNNExecutionProvider",
        precisions=["int8", "fp16"],
        families=NPU_TRANSFORMER_FAMILIES,
        formats=["qnn", "onnx"],
        peaks={
            "int8": d.fig(b, "npu", "peak_int8", "GOPS", 1000),
            "fp16": est(22500, "GOPS", "FP16 = INT8 / 2 assumed"),
            "fp32": zero("GOPS", "HTP runs float models at fp16"),
        },
        memory=mem,
        bw=bw,
        idle=est(0.2, "W", "NPU idle"),
        maxp=est(7.0, "W", "NPU load"),
        dispatch=est(0.0003, "s", "QNN graph execute call"),
        note="AI Hub 'float' rows run at fp16 on the HTP and are listed as fp16.",
    )
    return profile(
        "snapdragon_x_elite",
        "Qualcomm Snapdragon X Elite (CRD)",
        "arm_soc_npu",
        40,
        [
            {"arch": "aarch64", "cpu_model_regex": r"Snapdragon\(R\) X Elite"},
            {"dt_compatible": "qcom,x1e80100"},
        ],
        board(mem, bw, idle, cpu["max_power_w"]),
        [cpu, npu],
        note="Only the NPU has sourced figures; the CPU is an estimate.",
    )
