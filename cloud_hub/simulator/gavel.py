"""Gavel's GPU cluster as a hetmesh fleet, and its Philly-derived traces as a workload.

Devices are K80 / P100 / V100 GPUs described inline (datasheet figures below) whose
``rates`` are Gavel's measured isolated steps/s per job type; a job is a task of
``work`` = its total steps, so its true service time is steps / (steps/s on that GPU).
Only single-GPU jobs are kept (Gavel's "continuous-single" setting): gangs are not
modelled. Jobs are not preempted (Gavel time-slices rounds; this is FIFO per GPU).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloud_hub.simulator.errors import SimulationInputError
from cloud_hub.simulator.fleet import Fleet, parse_fleet
from cloud_hub.simulator.models import MODELS, model_info
from cloud_hub.simulator.workload import Workload

#: Datasheet figures of one schedulable GPU of each type (fp32 training, as in Gavel).
GPUS: dict[str, dict[str, Any]] = {
    "v100": {
        "name": "NVIDIA Tesla V100 SXM2 16GB",
        "peak_gops": {"fp32": 15700.0, "fp16": 125000.0},
        "memory_gb": 16,
        "memory_bw_gbs": 900.0,
        "idle_power_w": 40.0,
        "max_power_w": 300.0,
        "source": "NVIDIA Tesla V100 datasheet (SXM2: 15.7 TFLOPS fp32, 125 tensor, "
        "900 GB/s, 300 W); idle power an estimate",
    },
    "p100": {
        "name": "NVIDIA Tesla P100 PCIe 16GB",
        "peak_gops": {"fp32": 9300.0, "fp16": 18700.0},
        "memory_gb": 16,
        "memory_bw_gbs": 732.0,
        "idle_power_w": 30.0,
        "max_power_w": 250.0,
        "source": "NVIDIA Tesla P100 datasheet (PCIe: 9.3 TFLOPS fp32, 18.7 fp16, "
        "732 GB/s, 250 W); idle power an estimate",
    },
    "k80": {
        "name": "NVIDIA Tesla K80 (one GK210 of the board)",
        "peak_gops": {"fp32": 4365.0},
        "memory_gb": 12,
        "memory_bw_gbs": 240.0,
        "idle_power_w": 25.0,
        "max_power_w": 150.0,
        "source": "NVIDIA Tesla K80 datasheet (board: 8.73 TFLOPS fp32 boost, 24 GB, "
        "480 GB/s, 300 W), halved per GPU; idle power an estimate",
    },
}
BOX = "cluster"


def load_throughputs(path: str | Path) -> dict[str, dict[str, float]]:
    """Return {gpu type: {job type: steps/s}} of single-GPU rows of Gavel's isolated CSV."""
    out: dict[str, dict[str, float]] = {}
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        need = {"worker_type", "job_type", "scale_factor", "steps_per_sec_isolated"}
        if not need <= set(reader.fieldnames or ()):
            raise SimulationInputError(str(path), ",".join(sorted(need)), "missing from header", 1)
        for row in reader:
            if row["worker_type"] in GPUS and row["scale_factor"] == "1":
                try:
                    rate = float(row["steps_per_sec_isolated"])
                except ValueError:
                    raise SimulationInputError(
                        str(path), "steps_per_sec_isolated", "not a number", reader.line_num
                    ) from None
                out.setdefault(row["worker_type"], {})[row["job_type"]] = rate
    if not out:
        raise SimulationInputError(str(path), "worker_type", "no k80/p100/v100 single-GPU rows")
    return out


def cluster_doc(throughputs: Mapping[str, Mapping[str, float]], spec: str) -> dict[str, Any]:
    """Return a fleet document for Gavel's cluster spec "V100:P100:K80" (e.g. "8:8:8")."""
    parts = spec.split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or sum(map(int, parts)) == 0:
        raise SimulationInputError("--cluster", "spec", f"expected V100:P100:K80 counts: {spec!r}")
    devices = []
    for gpu, count in zip(("v100", "p100", "k80"), map(int, parts), strict=True):
        if count:
            devices.append(
                {
                    "id": gpu,
                    "kind": "gpu_nvidia",
                    "count": count,
                    **GPUS[gpu],
                    "rates": dict(throughputs[gpu]),
                }
            )
    return {
        "schema": "hetmesh.sim.fleet/1",
        "name": f"gavel-{spec}",
        "default_link_ms": 0.0,
        "boxes": [{"id": BOX, "devices": devices}],
    }


def gavel_fleet(throughputs: Mapping[str, Mapping[str, float]], spec: str = "8:8:8") -> Fleet:
    """Return the cluster as a Fleet: one box, ``spec`` V100:P100:K80 inline GPUs."""
    return parse_fleet(cluster_doc(throughputs, spec), f"gavel cluster {spec}")


def load_trace(
    path: str | Path,
    throughputs: Mapping[str, Mapping[str, float]],
    slo_x: float = 3.0,
    limit: int | None = None,
) -> tuple[Workload, int]:
    """Return (single-GPU jobs as a workload, how many multi-GPU jobs were left out).

    Reads both Gavel trace formats (7 tab-separated fields, msr; 10, physical_cluster).
    A job's SLO is ``slo_x`` x its isolated run time on its fastest GPU type (a metric
    only; Gavel traces carry none).
    """
    where = str(path)
    rows: list[dict[str, Any]] = []
    skipped = 0
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            f = line.rstrip("\n").split("\t")
            try:
                if len(f) == 7:
                    job, steps, t, scale = f[0], int(f[4]), float(f[5]), int(f[6])
                elif len(f) == 10:
                    job, steps, scale, t = f[0], int(f[5]), int(f[6]), float(f[9])
                else:
                    raise ValueError(f"expected 7 or 10 tab-separated fields, got {len(f)}")
            except ValueError as err:
                raise SimulationInputError(where, "(line)", str(err), n) from None
            if job not in MODELS:
                raise SimulationInputError(where, "job type", f"unknown Gavel job {job!r}", n)
            if scale != 1:
                skipped += 1
                continue
            best = max(throughputs[g].get(job, 0.0) for g in throughputs)
            if best <= 0 or steps <= 0:
                raise SimulationInputError(where, "job type", f"no throughput for {job!r}", n)
            rows.append(
                {
                    "t": max(t, 0.0),
                    "model": job,
                    "precision": "fp32",
                    "max_latency_ms": slo_x * steps / best * 1e3,
                    "priority": 0,
                    "tenant": "default",
                    "origin": BOX,
                    "work": float(steps),
                }
            )
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise SimulationInputError(where, "(file)", "no single-GPU jobs in the trace")
    rows.sort(key=lambda r: r["t"])
    return Workload(where, rows=tuple(rows)), skipped


def profiled_corrections(fleet: Fleet, precision: str = "fp32") -> dict[str, dict[str, float]]:
    """Return {task class: {device id: measured / roofline}} from the devices' rates.

    What an operator who profiled every job type on every GPU type (Gavel's assumption)
    would import; the kernel then starts from the measured medians instead of datasheets.
    """
    table: dict[str, dict[str, float]] = {}
    for sd in fleet.devices:
        cap = sd.device.capability
        peak = cap.peak_fp32_gops if precision == "fp32" else cap.peak_fp16_gops
        for job, rate in sd.rates.items():
            if rate <= 0 or peak <= 0 or job not in MODELS:
                continue
            roof = model_info(job).gops / (peak * cap.efficiency)
            table.setdefault(f"{job}:{precision}", {})[sd.device.id] = (1.0 / rate) / roof
    return table
