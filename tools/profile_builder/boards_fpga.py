"""The FPGA board: AMD/Xilinx Kria KV260 (DPU configurations and DFX slots).

Estimates (est) are this project's guesses; every one says so in its note.
"""

from __future__ import annotations

from typing import Any

from .data import Data
from .devices import (
    CNN_FAMILIES,
    board,
    cpu_device,
    cpu_peaks,
    device,
    profile,
    total,
)
from .figures import est, zero


def build_kv260(d: Data) -> dict[str, Any]:
    b = "kria_kv260"
    mem = d.memory(b, 4, "4 GB 64-bit DDR4 shared by the A53s and the DPU")
    bw = d.fig(b, None, "memory_bw", "GB/s")
    cpu_idle = est(3.0, "W", "K26 SOM + carrier idle with the PL loaded")
    cpu = cpu_device(
        "cpu_arm",
        "4x Cortex-A53 @ 1.5 GHz (Zynq UltraScale+ XCK26)",
        formats=["onnx", "tflite", "ncnn"],
        peaks=cpu_peaks(
            [(4, 1.5, "a53")],
            "unverified",
            "core count (DS987, official) and an assumed 1.5 GHz clock",
        ),
        memory=mem,
        bw=bw,
        idle=cpu_idle,
        maxp=est(5.0, "W", "board baseline + A53 cluster under load"),
    )
    dpu_src = d.raw(b, "fpga", "dpu_config")["source"]
    fpga = device(
        "fpga",
        "fpga",
        "DPUCZDX8G B4096 @ 300 MHz on the K26 programmable logic",
        tier="hot",
        ep="VitisAIExecutionProvider",
        precisions=["int8"],
        families=CNN_FAMILIES,
        formats=["xmodel"],
        peaks={
            "int8": d.fig(b, "fpga", "peak_int8", "GOPS", 1000),
            "fp16": zero("GOPS", "the DPU runs int8 only"),
            "fp32": zero("GOPS", "the DPU runs int8 only"),
        },
        memory=mem,
        bw=bw,
        idle=est(0.5, "W", "loaded DPU, idle"),
        maxp=d.fig(
            b,
            None,
            "overall_power_estimate",
            "W",
            note="chip-level estimate used as the DPU's max (conservative)",
        ),
        dispatch=est(0.0005, "s", "VART runner submit + DMA"),
        reconfig=est(
            1.0,
            "s",
            "devices.json reconfig_time is null: xmutil/dfx-mgr bitstream "
            "swap, expect tens of ms PCAP + device-tree overlay and driver probe, "
            "~0.5-3 s end-to-end; MEASURE",
        ),
        configurations=[
            {
                "id": 1,
                "name": "DPUCZDX8G B4096 @ 300 MHz (Vitis AI model-zoo config)",
                "status": "official",
                "source": dpu_src,
                "note": "the configuration the published KV260 latencies were measured on",
            },
            {
                "id": 2,
                "name": "DPUCZDX8G B3136 @ 300 MHz (smartcam app, 0.92 TOPS peak)",
                "status": "official",
                "source": d.raw(b, "fpga", "peak_int8")["source"],
            },
        ],
        note="Vitis AI model-zoo FPS are end-to-end including pre/post-processing on the "
        "A53s (single thread); the ORT VitisAI EP on Kria is unverified, VART runs "
        "xmodel files directly.",
        pr_slots=est(
            2,
            "slots",
            "a DFX (dynamic function exchange) platform with two reconfigurable "
            "partitions, each holding its own accelerator at about half the fabric; a slot "
            "swap is taken to cost reconfig_s (no published figure); MEASURE",
        ),
    )
    return profile(
        "kria_kv260",
        "AMD/Xilinx Kria KV260 (K26 SOM, Zynq UltraScale+ XCK26)",
        "arm_fpga",
        50,
        [
            {"dt_compatible": "xlnx,zynqmp-sk-kv260"},
            {"dt_compatible": "xlnx,zynqmp", "sysfs_path": "/sys/class/fpga_manager/fpga*"},
        ],
        board(
            mem,
            bw,
            total([cpu_idle, fpga["idle_power_w"]], "W", "idle"),
            d.fig(b, None, "overall_power_estimate", "W"),
        ),
        [cpu, fpga],
    )
