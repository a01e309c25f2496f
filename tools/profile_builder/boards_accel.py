"""Accelerators on a generic x86 host: Coral Edge TPU, Hailo-8/8L, Ascend 310.

Estimates (est) are this project's guesses; every one says so in its note.
"""

from __future__ import annotations

from typing import Any

from .data import Data
from .devices import (
    CNN_FAMILIES,
    NPU_TRANSFORMER_FAMILIES,
    cpu_accel_board,
    device,
    profile,
    x86_host_cpu,
)
from .figures import GIB, Fig, est, zero


def host_profile(
    pid: str,
    name: str,
    priority: int,
    rules: list[dict[str, str]],
    accel: dict[str, Any],
    note: str,
    match_note: str | None = None,
) -> dict[str, Any]:
    """An accelerator card/stick on a generic x86 host: host CPU + the accelerator."""
    host = x86_host_cpu()
    brd = cpu_accel_board(
        host["memory_bytes"],
        host["memory_bw_gbs"],
        host,
        accel,
        note="Host figures are generic; the probe should replace memory with MemTotal.",
    )
    return profile(
        pid,
        name,
        "accelerator_host",
        priority,
        rules,
        brd,
        [host, accel],
        note=note,
        match_note=match_note,
    )


def host_memory_note(what: str) -> Fig:
    return est(16 * GIB, "bytes", f"{what}; host RAM used as the limit (16 GiB assumed)")


def build_coral(d: Data) -> dict[str, Any]:
    b = "coral_edgetpu"
    tpu = device(
        "tpu",
        "npu",
        "Google Coral Edge TPU (USB Accelerator / M.2 / mPCIe)",
        tier="hot",
        ep="EdgeTPUDelegate",
        precisions=["int8"],
        families=CNN_FAMILIES,
        formats=["edgetpu"],
        peaks={
            "int8": d.fig(b, "tpu", "peak_int8", "GOPS", 1000),
            "fp16": zero("GOPS", "Edge TPU runs only fully-int8 models"),
            "fp32": zero("GOPS", "Edge TPU runs only fully-int8 models"),
        },
        memory=host_memory_note(
            "on-chip SRAM is 8 MB (third-party); larger models stream "
            "weights from the host (much slower) but still run"
        ),
        bw=est(
            8.0,
            "GB/s",
            "on-chip bandwidth unpublished; chosen so models that fit SRAM are compute-bound",
        ),
        idle=est(0.5, "W", "Edge TPU idle"),
        maxp=d.fig(b, None, "max_power", "W"),
        dispatch=est(0.001, "s", "USB transfer + libedgetpu invoke per inference"),
        note="No ONNX Runtime EP: run edgetpu_compiler-compiled TFLite through libedgetpu "
        "(pycoral / tflite_runtime delegate). USB performance depends on host and bus.",
    )
    return host_profile(
        "coral_edgetpu_host",
        "Google Coral Edge TPU on a host (USB or M.2/PCIe)",
        60,
        [
            {"pci_id": "1ac1:089a"},
            {"usb_id": "1a6e:089a"},
            {"usb_id": "18d1:9302"},
            {"device_node": "/dev/apex_*"},
        ],
        tpu,
        note="Coral USB/M.2 Edge TPU plus its host CPU. The Coral Dev Board (i.MX 8M "
        "host) rows of the benchmark table are not used.",
        match_note="USB 1a6e:089a before firmware load, 18d1:9302 after; PCIe 1ac1:089a "
        "(apex driver, /dev/apex_N).",
    )


def hailo_npu(d: Data, b: str, name: str, int8: Fig, maxp: Fig) -> dict[str, Any]:
    return device(
        "npu",
        "npu",
        name,
        tier="hot",
        ep="HailoExecutionProvider",
        precisions=["int4", "int8"],
        families=NPU_TRANSFORMER_FAMILIES,
        formats=["hef"],
        peaks={
            "int8": int8,
            "fp16": zero(
                "GOPS",
                "Hailo runs quantized models only (int8, int4 weights, some int16 activations)",
            ),
            "fp32": zero("GOPS", "Hailo runs quantized models only"),
        },
        memory=host_memory_note(
            "no external DRAM; models beyond on-chip capacity run "
            "multi-context (lower FPS) rather than failing"
        ),
        bw=est(
            16.0,
            "GB/s",
            "on-chip bandwidth unpublished; chosen so single-context models are compute-bound",
        ),
        idle=est(1.0, "W", "Hailo module idle"),
        maxp=maxp,
        dispatch=est(0.0005, "s", "HailoRT vstream write/read per frame over PCIe"),
        note="HailoExecutionProvider exists only in the hailo-ai/onnxruntime fork; HailoRT "
        "runs HEF files. Model-zoo 'FPS at batch 1' is pipelined throughput, so those "
        "rows are marked throughput_equivalent and are not latencies.",
    )


def build_hailo8(d: Data) -> dict[str, Any]:
    maxp = d.fig(
        "hailo8",
        None,
        "measured_power_resnet50",
        "W",
        note="used as max power (streaming resnet_v1_50)",
    )
    npu = hailo_npu(
        d,
        "hailo8",
        "Hailo-8 (26 TOPS) M.2 / AI HAT+",
        d.fig("hailo8", "npu", "peak_int8", "GOPS", 1000),
        maxp,
    )
    return host_profile(
        "hailo8_host",
        "Hailo-8 on a host (M.2 / PCIe)",
        60,
        [{"pci_id": "1e60:2864"}, {"device_node": "/dev/hailo*"}],
        npu,
        note="Hailo-8 plus a generic x86 host CPU. On a Raspberry Pi 5 (AI HAT+) the host "
        "CPU is the Pi's, not this generic one.",
        match_note="Hailo-8 and Hailo-8L share PCI id 1e60:2864; tell them apart with "
        "'hailortcli fw-control identify' (device architecture HAILO8 vs HAILO8L).",
    )


def build_hailo8l(d: Data) -> dict[str, Any]:
    npu = hailo_npu(
        d,
        "hailo8l",
        "Hailo-8L (13 TOPS) AI Kit / AI HAT+",
        d.fig("hailo8l", "npu", "peak_int8", "GOPS", 1000),
        est(1.6, "W", "about half of the Hailo-8's measured 3.19 W"),
    )
    npu["efficiency"] = est(
        0.09,
        "fraction",
        "taken from the Hailo-8 (latency-derived); no Hailo-8L single-frame latency in the sources",
    )
    return host_profile(
        "hailo8l_host",
        "Hailo-8L on a host (M.2 / RPi AI Kit)",
        59,
        [{"pci_id": "1e60:2864"}, {"device_node": "/dev/hailo*"}],
        npu,
        note="Hailo-8L plus a generic x86 host CPU. Large models are multi-context on the "
        "8L: batch-1 FPS is far below batch-8 FPS.",
        match_note="Same PCI id as Hailo-8 (1e60:2864), hence one priority lower: the probe "
        "must confirm the architecture with HailoRT to pick this profile.",
    )


def build_ascend310(d: Data) -> dict[str, Any]:
    b = "ascend310"
    npu = device(
        "npu",
        "npu",
        "Huawei Ascend 310 (2 Da Vinci AI cores)",
        tier="hot",
        ep="CANNExecutionProvider",
        precisions=["int8", "fp16"],
        families=NPU_TRANSFORMER_FAMILIES,
        formats=["om", "onnx"],
        peaks={
            "int8": d.fig(b, "npu", "peak_int8", "GOPS", 1000),
            "fp16": d.fig(b, "npu", "peak_fp16", "GOPS", 1000),
            "fp32": zero("GOPS", "Da Vinci cube units run int8/fp16"),
        },
        memory=est(8 * GIB, "bytes", "Atlas 200 module LPDDR4 size assumed 8 GB"),
        bw=est(47.7, "GB/s", "LPDDR4 bandwidth of the Atlas 200 module, recalled"),
        idle=est(2.0, "W", "module idle"),
        maxp=d.fig(b, None, "typical_power", "W", note="typical power used as max"),
        dispatch=est(0.0005, "s", "ACL model execute call over PCIe"),
        note="Ascend ModelZoo '310 fps' figures are per 4-chip Atlas 300I card, so no "
        "per-chip latency is given here.",
    )
    return host_profile(
        "ascend310_host",
        "Huawei Ascend 310 on a host (Atlas 200 / 300I)",
        60,
        [{"device_node": "/dev/davinci[0-9]*"}, {"pci_id": "19e5:d100"}],
        npu,
        note="One Ascend 310 chip plus a generic x86 host CPU; an Atlas 300I card holds 4 "
        "chips (4 davinci nodes): the probe should add one npu per node.",
        match_note="PCI id 19e5:d100 is recalled, unverified; /dev/davinciN is created by the "
        "Ascend driver.",
    )
