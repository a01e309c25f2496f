#!/usr/bin/env python3
"""Dev-only: regenerate ``firmware_profiles/*.json`` from the public data set.

Reads ``tools/profile_data/`` (devices.json and the latency CSVs beside it, each folder with
its ORIGIN.txt and license; ``--data`` for another copy) and writes one
profile per board. Nothing at run time imports this script; the generated JSON files
are the product and are committed. Hand-written choices — match rules, estimates for
figures the sources do not give, which rows map to which device — are the commented
data tables below, so every number in a profile can be traced to a line here.

    python tools/build_profiles.py                # write firmware_profiles/*.json
    python tools/build_profiles.py --check        # exit 1 if the files are stale
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "tools" / "profile_data"
SCHEMA = "hetmesh.firmware_profile/1"
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
# Model work in GOPs (2 x MACs), used only to derive efficiency from a published latency.
MODEL_GOPS = {
    "resnet50": (8.19, "Vitis AI 2.5 zoo tf_mlperf_resnet50_imagenet_224_224_8.19G"),
    "resnet50_v1": (6.98, "Hailo model zoo resnet_v1_50 GOPs column (6.98)"),
    "mobilenet_v2": (0.602, "Vitis AI 2.5 zoo tf_mobilenetv2_1.0_imagenet_224_224_602M"),
    "yolov8n": (8.74, "Hailo model zoo yolov8n GOPs column (8.74)"),
    "yolo11n": (6.55, "Hailo model zoo yolov11n GOPs column (6.55)"),
}

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


class Data:
    """The data set: devices.json plus the CSV latency tables."""

    def __init__(self, root: Path) -> None:
        self.root = root
        doc = json.loads((root / "devices.json").read_text(encoding="utf-8"))
        self.boards = {b["id"]: b for b in doc["boards"]}
        self.latencies: list[dict[str, Any]] = doc["latencies"]

    def raw(self, board: str, device: str | None, field: str) -> dict[str, Any]:
        b = self.boards[board]
        if device is None:
            return dict(b["board"][field])
        dev = next(d for d in b["devices"] if d["id"] == f"{board}.{device}")
        return dict(dev[field])

    def fig(
        self,
        board: str,
        device: str | None,
        field: str,
        unit: str,
        scale: float = 1.0,
        value: float | None = None,
        note: str | None = None,
    ) -> Fig:
        """Convert a devices.json figure (``value`` picks one of a list, e.g. a SKU)."""
        f = self.raw(board, device, field)
        raw_value = f["value"] if value is None else value
        notes = []
        if scale != 1.0:
            notes.append(f"converted from {raw_value} {f.get('unit', '')}".strip())
        if f.get("note"):
            notes.append(str(f["note"]))
        if note:
            notes.append(note)
        where = f"{board}.{device}.{field}" if device else f"{board}.board.{field}"
        source = str(f["source"])
        if source.startswith("derived - formula"):
            source = "derived; formula in note"
        return fig(
            raw_value * scale,
            unit,
            map_status(f["status"]),
            f"{source} [{VIA}: {where}]",
            "; ".join(notes) or None,
            f["status"],
        )

    def csv(self, rel: str) -> list[dict[str, str]]:
        with (self.root / rel).open(encoding="utf-8-sig", newline="") as fh:
            return list(csv.DictReader(fh))


# --------------------------------------------------------------------------------------
# Device building blocks.
# --------------------------------------------------------------------------------------
ALL_FAMILIES = [
    "conv",
    "gemm",
    "attention",
    "recurrent",
    "pool",
    "norm",
    "elementwise",
    "reshape",
    "control_flow",
    "custom",
]
GPU_FAMILIES = ALL_FAMILIES[:-1]
CNN_FAMILIES = ["conv", "gemm", "pool", "norm", "elementwise", "reshape"]
NPU_TRANSFORMER_FAMILIES = ["conv", "gemm", "attention", "pool", "norm", "elementwise", "reshape"]

# CPU per-core throughput per cycle (ops, FMA = 2): the formulas in devices.json notes.
CORE_OPS = {
    # A76/A78: 2x128-bit NEON FMA; FP16 2x; SDOT 2 pipes x 16 MAC x 2 ops
    "a76": {"fp32": 16, "fp16": 32, "int8": 64},
    # A53: 64-bit-wide NEON datapath, no FP16 arithmetic, no SDOT (SMLAL ~2x fp32 rate)
    "a53": {"fp32": 8, "fp16": 0, "int8": 16},
    # A55: ARMv8.2 with FP16 and SDOT on a 64-bit-wide datapath
    "a55": {"fp32": 8, "fp16": 16, "int8": 32},
    # Gracemont (N100): 2x128-bit FMA, AVX-VNNI 128-bit x 2 ports
    "gracemont": {"fp32": 16, "fp16": 0, "int8": 64},
    # generic AVX2 x86-64 core: 2x256-bit FMA; int8 via VPMADDUBSW ~2x fp32 rate
    "avx2": {"fp32": 32, "fp16": 0, "int8": 64},
}


def cpu_peaks(
    clusters: list[tuple[int, float, str]],
    clock_status: str,
    basis: str,
    given: dict[str, Fig] | None = None,
) -> dict[str, Fig]:
    """Peak GOPS per precision from (cores, GHz, core type) clusters; ``given`` wins."""
    out: dict[str, Fig] = {}
    for prec in ("int8", "fp16", "fp32"):
        if given and prec in given:
            out[prec] = given[prec]
            continue
        if all(CORE_OPS[c][prec] == 0 for _, _, c in clusters):
            out[prec] = zero("GOPS", f"no native {prec} arithmetic on this CPU; not offered")
            continue
        total = sum(n * ghz * CORE_OPS[c][prec] for n, ghz, c in clusters)
        terms = " + ".join(
            f"{n} x {ghz} GHz x {CORE_OPS[c][prec]} ops/cycle ({c})" for n, ghz, c in clusters
        )
        status = "derived" if clock_status != "unverified" else "unverified"
        out[prec] = fig(
            total, "GOPS", status, f"derived from {basis}", f"{terms} - theoretical peak"
        )
    return out


def device(
    did: str,
    kind: str,
    name: str,
    *,
    tier: str,
    ep: str,
    precisions: list[str],
    families: list[str],
    formats: list[str],
    peaks: dict[str, Fig],
    memory: Fig,
    bw: Fig,
    idle: Fig,
    maxp: Fig,
    efficiency: Fig | None = None,
    dispatch: Fig | None = None,
    reconfig: Fig | None = None,
    note: str | None = None,
    configurations: list[dict[str, Any]] | None = None,
    pr_slots: Fig | None = None,
) -> dict[str, Any]:
    """Assemble one device object in schema order."""
    dev: dict[str, Any] = {
        "id": did,
        "kind": kind,
        "name": name,
        "tier": tier,
        "execution_provider": ep,
        "precisions": precisions,
        "operator_families": families,
        "model_formats": formats,
        "peak_gops": {k: peaks[k] for k in ("int8", "fp16", "fp32")},
        "memory_bytes": memory,
        "memory_bw_gbs": bw,
        "idle_power_w": idle,
        "max_power_w": maxp,
        "efficiency": efficiency or est(0.3, "fraction", "typical fraction of peak"),
        "dispatch_s": dispatch or est(0.0, "s", "in-process call, overhead negligible"),
        "reconfig_s": reconfig or zero("s", "not a reconfigurable device"),
    }
    if note:
        dev["note"] = note
    if configurations:
        dev["configurations"] = configurations
    if pr_slots:
        dev["pr_slots"] = pr_slots
    dev["latencies"] = []
    return dev


def x86_host_cpu(
    name: str = "generic x86-64 host CPU (4 cores @ 3.0 GHz, AVX2 assumed)",
    cores: int = 4,
    ghz: float = 3.0,
    memory_gib: float = 16,
    bw: float = 38.4,
    idle: float = 15,
    maxp: float = 65,
) -> dict[str, Any]:
    """A host CPU whose figures are generic estimates (the accelerator is the real subject)."""
    peaks = cpu_peaks([(cores, ghz, "avx2")], "unverified", "an assumed generic host (not sourced)")
    return device(
        "cpu",
        "cpu_x86",
        name,
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp32"],
        families=ALL_FAMILIES,
        formats=["onnx", "tflite", "ncnn", "openvino"],
        peaks=peaks,
        memory=est(memory_gib * GIB, "bytes", f"{memory_gib} GiB host RAM assumed"),
        bw=est(bw, "GB/s", "dual-channel DDR4-2400 assumed"),
        idle=est(idle, "W", "desktop-class host idle"),
        maxp=est(maxp, "W", "desktop-class host under load"),
        note="Host CPU of an accelerator card; generic figures so tasks can fall back to it.",
    )


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


def total(parts: list[Fig], unit: str, what: str) -> Fig:
    """Sum of device figures for a board-level figure (e.g. a host plus its accelerator)."""
    value = sum(p["value"] for p in parts)
    formula = f"{what}: sum of " + " + ".join(str(p["value"]) for p in parts)
    return derive(value, unit, formula, parts, "derived from the device figures; see note")


def board(memory: Fig, bw: Fig, idle: Fig, maxp: Fig, note: str | None = None) -> dict[str, Any]:
    """The board-level figure block."""
    out: dict[str, Any] = {
        "memory_bytes": memory,
        "memory_bw_gbs": bw,
        "idle_power_w": idle,
        "max_power_w": maxp,
    }
    if note:
        out["note"] = note
    return out


def profile(
    pid: str,
    name: str,
    arch_class: str,
    priority: int,
    rules: list[dict[str, str]],
    brd: dict[str, Any],
    devices: list[dict[str, Any]],
    note: str | None = None,
    match_note: str | None = None,
) -> dict[str, Any]:
    """Assemble one profile document in schema order."""
    match: dict[str, Any] = {"priority": priority, "any": rules}
    if match_note:
        match["note"] = match_note
    doc: dict[str, Any] = {"schema": SCHEMA, "id": pid, "name": name, "arch_class": arch_class}
    if note:
        doc["note"] = note
    doc.update({"match": match, "board": brd, "devices": devices})
    return doc


# --------------------------------------------------------------------------------------
# The boards. Estimates (est) are this project's guesses; every one says so in its note.
# --------------------------------------------------------------------------------------
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
    cpu = device(
        "cpu",
        "cpu_arm",
        "4x Cortex-A76 @ 2.4 GHz (BCM2712)",
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp16", "fp32"],
        families=ALL_FAMILIES,
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
    cpu = device(
        "cpu",
        "cpu_arm",
        "4x Cortex-A76 @ 2.4 GHz (big cluster; 4x A55 not modelled)",
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp16", "fp32"],
        families=ALL_FAMILIES,
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
        board(
            mem,
            bw,
            total([cpu_idle, npu["idle_power_w"]], "W", "idle"),
            total([cpu_max, npu["max_power_w"]], "W", "max"),
        ),
        [cpu, npu],
        note="The Mali-G610 GPU is left out: no ONNX Runtime EP drives it (ncnn Vulkan rows "
        "in devices.json show it slower than the NPU).",
    )


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
    return device(
        "cpu",
        "cpu_arm",
        str(name),
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp16", "fp32"],
        families=ALL_FAMILIES,
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
    mem = fig(
        8 * GIB,
        "bytes",
        "official",
        d.raw(b, None, "memory")["source"] + f" [{VIA}]",
        "8 GB 128-bit LPDDR5 shared CPU/GPU (x 2^30)",
    )
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
    mem = fig(
        16 * GIB,
        "bytes",
        "official",
        d.raw(b, None, "memory")["source"] + f" [{VIA}]",
        "16 GB 128-bit LPDDR5 shared (x 2^30)",
    )
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
    mem = fig(
        64 * GIB,
        "bytes",
        "official",
        d.raw(b, None, "memory")["source"] + f" [{VIA}]",
        "64 GB 256-bit LPDDR5 shared (x 2^30)",
    )
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
    brd = board(
        host["memory_bytes"],
        host["memory_bw_gbs"],
        total([host["idle_power_w"], accel["idle_power_w"]], "W", "idle"),
        total([host["max_power_w"], accel["max_power_w"]], "W", "max"),
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


def build_kv260(d: Data) -> dict[str, Any]:
    b = "kria_kv260"
    mem = fig(
        4 * GIB,
        "bytes",
        "official",
        d.raw(b, None, "memory")["source"] + f" [{VIA}]",
        "4 GB 64-bit DDR4 shared by the A53s and the DPU (x 2^30)",
    )
    bw = d.fig(b, None, "memory_bw", "GB/s")
    cpu_idle = est(3.0, "W", "K26 SOM + carrier idle with the PL loaded")
    cpu = device(
        "cpu",
        "cpu_arm",
        "4x Cortex-A53 @ 1.5 GHz (Zynq UltraScale+ XCK26)",
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp32"],
        families=ALL_FAMILIES,
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


def build_imx8mp(d: Data) -> dict[str, Any]:
    b = "imx8mp"
    mem = est(6 * GIB, "bytes", "EVK ships 6 GB LPDDR4; boards vary; read MemTotal")
    bw = est(16.0, "GB/s", "32-bit LPDDR4-4000")
    cpu_idle = est(1.5, "W", "devices.json idle_power is null; measure")
    cpu = device(
        "cpu",
        "cpu_arm",
        "4x Cortex-A53 up to 1.8 GHz",
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp32"],
        families=ALL_FAMILIES,
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
        board(
            mem,
            bw,
            total([cpu_idle, npu["idle_power_w"]], "W", "idle"),
            total([cpu["max_power_w"], npu["max_power_w"]], "W", "max"),
        ),
        [cpu, npu],
    )


def build_intel_n100(d: Data) -> dict[str, Any]:
    b = "intel_n100"
    mem = est(16 * GIB, "bytes", "mini-PCs ship 8-32 GB, single channel; read MemTotal")
    bw = d.fig(b, None, "memory_bw", "GB/s")
    idle = est(6.0, "W", "whole-box idle; devices.json: several W, measure")
    tdp = d.fig(b, None, "tdp", "W", note="PL1; PL2 bursts are higher")
    cpu = device(
        "cpu",
        "cpu_x86",
        "Intel Processor N100 (4x Gracemont, up to 3.4 GHz)",
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp32"],
        families=ALL_FAMILIES,
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


def build_qcs6490(d: Data) -> dict[str, Any]:
    b = "qcs6490"
    mem = est(6 * GIB, "bytes", "RB3 Gen 2 vision kit RAM assumed 6 GB; read MemTotal")
    bw = est(25.6, "GB/s", "LPDDR5 bus width/speed not in the sources")
    cpu_idle = est(2.0, "W", "devices.json idle_power is null; measure")
    cpu = device(
        "cpu",
        "cpu_arm",
        "Kryo 670: 1x A78 2.7 GHz + 3x A78 2.4 GHz + 4x A55 1.9 GHz",
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp16", "fp32"],
        families=ALL_FAMILIES,
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
        board(
            mem,
            bw,
            total([cpu_idle, npu["idle_power_w"]], "W", "idle"),
            total([cpu["max_power_w"], npu["max_power_w"]], "W", "max"),
        ),
        [cpu, npu],
        note="The Adreno 643 GPU is left out: no sourced figures.",
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
    cpu = device(
        "cpu",
        "cpu_x86",
        "Core Ultra 7 258V: 4 P-cores + 4 LP E-cores",
        tier="warm",
        ep="OpenVINOExecutionProvider",
        precisions=["int8", "fp32"],
        families=ALL_FAMILIES,
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
    cpu = device(
        "cpu",
        "cpu_x86",
        "AMD Ryzen AI 300 'Strix' CPU (12 Zen 5 / Zen 5c cores)",
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp32"],
        families=ALL_FAMILIES,
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


def build_snapdragon_x_elite(d: Data) -> dict[str, Any]:
    b = "snapdragon_x_elite"
    mem = est(32 * GIB, "bytes", "CRD RAM")
    bw = est(135.0, "GB/s", "128-bit LPDDR5X-8448")
    idle = est(4.0, "W", "laptop idle")
    cpu = device(
        "cpu",
        "cpu_arm",
        "Snapdragon X Elite: 12 Oryon cores",
        tier="warm",
        ep="CPUExecutionProvider",
        precisions=["int8", "fp16", "fp32"],
        families=ALL_FAMILIES,
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


def split_variant(model: str) -> tuple[str, str | None]:
    """'resnet50 (mlperf tf)' -> ('resnet50', 'mlperf tf')."""
    m = re.match(r"^(.*?)\s*\((.*)\)\s*$", model)
    return (m.group(1), m.group(2)) if m else (model, None)


def normalize(name: str) -> str:
    """Lower-case snake model key (the loader applies the same rule to queries)."""
    return re.sub(r"[^a-z0-9.]+", "_", name.strip().lower()).strip("_")


def norm_precision(text: str, kind: str) -> tuple[str, str | None]:
    """Map a source's precision text to a vocab name plus the original detail."""
    low = text.lower()
    if low.startswith(("int8", "w8a8", "w8a16")):
        name = "int8"
    elif low.startswith("fp16"):
        name = "fp16"
    elif low.startswith("fp32"):
        name = "fp32"
    elif low == "float":
        name = "fp16" if kind == "npu" else "fp32"
        return name, "float model (the HTP computes float at fp16)"
    else:
        raise SystemExit(f"unmapped precision {text!r}")
    return name, None if low == name else text


def row(
    model: str,
    latency_ms: float,
    precision: str,
    batch: int,
    metric: str,
    status: str,
    source: str,
    **extra: Any,
) -> dict[str, Any]:
    """One latency row in schema order; empty optional values are dropped."""
    out: dict[str, Any] = {
        "model": normalize(model),
        "latency_ms": round(latency_ms, 4),
        "precision": precision,
        "batch": batch,
        "metric": metric,
        "status": status,
        "source": source,
    }
    out.update({k: v for k, v in extra.items() if v not in (None, "", False)})
    return out


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


def find_device(doc: dict[str, Any], local: str) -> dict[str, Any]:
    return next(dev for dev in doc["devices"] if dev["id"] == local)


def build_all(d: Data) -> dict[str, dict[str, Any]]:
    """Build every profile document, keyed by id."""
    profiles = {doc["id"]: doc for doc in (b(d) for b in BUILDERS)}
    for attach in (dj_rows, rknn_rows, hailo_rows, vitis_rows, yolo11_rows, coral_rpi_rows):
        attach(d, profiles)
    for (pid, local), (model, prec, where, note) in EFFICIENCY_REFS.items():
        dev = find_device(profiles[pid], local)
        dev["efficiency"] = efficiency_from(dev, normalize(model), prec, where, note)
    for doc in profiles.values():
        for dev in doc["devices"]:
            dev["latencies"].sort(key=lambda r: (r["model"], r["precision"], r["latency_ms"]))
            if not dev["latencies"]:
                del dev["latencies"]
    return profiles


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=REPO / "firmware_profiles")
    parser.add_argument("--check", action="store_true", help="fail if files are stale")
    args = parser.parse_args(argv)
    profiles = build_all(Data(args.data))
    stale = []
    for pid, doc in sorted(profiles.items()):
        path = args.out / f"{pid}.json"
        text = render(doc)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
            continue
        path.write_text(text, encoding="utf-8")
    if stale:
        print("stale profiles: " + ", ".join(stale), file=sys.stderr)
        return 1
    print(f"{len(profiles)} profiles {'checked' if args.check else 'written'} in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
