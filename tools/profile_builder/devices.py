"""Shared builders of device, board and profile objects (schema order) and CPU peaks."""

from __future__ import annotations

from typing import Any

from .figures import GIB, Fig, derive, est, fig, zero

SCHEMA = "hetmesh.firmware_profile/1"

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


def cpu_device(
    kind: str,
    name: str,
    *,
    ep: str = "CPUExecutionProvider",
    formats: list[str],
    peaks: dict[str, Fig],
    memory: Fig,
    bw: Fig,
    idle: Fig,
    maxp: Fig,
    efficiency: Fig | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """The board's CPU: every operator family, and the precisions with a non-zero peak."""
    return device(
        "cpu",
        kind,
        name,
        tier="warm",
        ep=ep,
        precisions=[p for p in ("int8", "fp16", "fp32") if peaks[p]["value"] > 0],
        families=ALL_FAMILIES,
        formats=formats,
        peaks=peaks,
        memory=memory,
        bw=bw,
        idle=idle,
        maxp=maxp,
        efficiency=efficiency,
        note=note,
    )


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
    return cpu_device(
        "cpu_x86",
        name,
        formats=["onnx", "tflite", "ncnn", "openvino"],
        peaks=peaks,
        memory=est(memory_gib * GIB, "bytes", f"{memory_gib} GiB host RAM assumed"),
        bw=est(bw, "GB/s", "dual-channel DDR4-2400 assumed"),
        idle=est(idle, "W", "desktop-class host idle"),
        maxp=est(maxp, "W", "desktop-class host under load"),
        note="Host CPU of an accelerator card; generic figures so tasks can fall back to it.",
    )


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


def cpu_accel_board(
    memory: Fig, bw: Fig, cpu: dict[str, Any], accel: dict[str, Any], note: str | None = None
) -> dict[str, Any]:
    """The board block of a CPU plus an accelerator: idle and max power summed over both."""
    return board(
        memory,
        bw,
        total([cpu["idle_power_w"], accel["idle_power_w"]], "W", "idle"),
        total([cpu["max_power_w"], accel["max_power_w"]], "W", "max"),
        note,
    )


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


def find_device(doc: dict[str, Any], local: str) -> dict[str, Any]:
    return next(dev for dev in doc["devices"] if dev["id"] == local)
