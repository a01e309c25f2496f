"""Alibaba openb (FGD, ATC'23): GPU nodes and pods with fractional GPU requests.

GPUs become devices whose "memory" is the GPU share: 1000 milli-GPU each, so a pod's
``gpu_milli`` is its memory need and the kernel's memory constraint is the share
constraint. CPU and host memory of nodes are not modelled; only single-GPU pods
(``num_gpu`` = 1, fractional or whole) are kept. The fragmentation rate follows FGD:
the share of unallocated GPU capacity that the typical pod cannot use.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cloud_hub.simulator.errors import SimulationInputError
from edge_agent.resources.device import Capability, Device
from edge_agent.resources.vocab import DeviceKind, ModelFormat, Precision
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract

SHARE = 1000.0  # milli-GPU per GPU: the "memory" of a GPU device


@dataclass(frozen=True)
class Pod:
    """One single-GPU pod: its name, GPU share in milli-GPU, creation time (s)."""

    name: str
    milli: int
    t: float


def _rows(path: str | Path, need: set[str]) -> list[tuple[int, dict[str, str]]]:
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = need - set(reader.fieldnames or ())
        if missing:
            raise SimulationInputError(str(path), ",".join(sorted(missing)), "missing", 1)
        return [(reader.line_num, row) for row in reader]


def load_nodes(path: str | Path, every: int = 1) -> list[tuple[str, int, str]]:
    """Return (node, GPU count, GPU model) of GPU nodes; keep every ``every``-th node."""
    out = []
    for line, row in _rows(path, {"sn", "gpu", "model"}):
        try:
            gpus = int(row["gpu"])
        except ValueError:
            raise SimulationInputError(str(path), "gpu", "not an integer", line) from None
        if gpus > 0:
            out.append((row["sn"], gpus, row["model"]))
    if not out:
        raise SimulationInputError(str(path), "gpu", "no GPU nodes")
    return out[::every]


def load_pods(path: str | Path) -> tuple[list[Pod], int]:
    """Return (single-GPU pods in creation order, how many multi-GPU pods were left out)."""
    pods, multi = [], 0
    for line, row in _rows(path, {"name", "num_gpu", "gpu_milli", "creation_time"}):
        try:
            n, milli, t = int(row["num_gpu"]), int(row["gpu_milli"]), float(row["creation_time"])
        except ValueError:
            raise SimulationInputError(str(path), "num_gpu", "not a number", line) from None
        if n > 1:
            multi += 1
        elif n == 1:
            if not 0 < milli <= SHARE:
                raise SimulationInputError(str(path), "gpu_milli", f"{milli} not in 1..1000", line)
            pods.append(Pod(row["name"], milli, t))
    if not pods:
        raise SimulationInputError(str(path), "num_gpu", "no single-GPU pods")
    pods.sort(key=lambda p: p.t)
    return pods, multi


def gpu_devices(nodes: list[tuple[str, int, str]]) -> tuple[list[Device], list[int]]:
    """Return one Device per GPU (all alike: 1000 milli-GPU share) and each GPU's node index."""
    cap = Capability(
        peak_int8_gops=0.0,
        peak_fp16_gops=0.0,
        peak_fp32_gops=1000.0,
        memory_bytes=SHARE,
        memory_bw_gbs=0.0,
        idle_power_w=0.0,
        max_power_w=1.0,
        precision_mask=1 << Precision.FP32,
        format_mask=1 << ModelFormat.COMMAND,
        execution_provider="openb",
        efficiency=1.0,
    )
    devices, node_of = [], []
    for n, (sn, gpus, model) in enumerate(nodes):
        for g in range(gpus):
            devices.append(Device(f"{sn}/gpu{g}", DeviceKind.GPU_NVIDIA, model, cap, emulated=True))
            node_of.append(n)
    return devices, node_of


def pod_contract(milli: int) -> TaskContract:
    """Return a pod's contract: its GPU share as the memory need, its share as its work."""
    sem = Semantics(gflops=float(milli), precision="fp32")
    req = Requirements(model_format="command", min_memory_bytes=float(milli))
    return TaskContract(sem, req, task_class=f"pod:{milli}")


class Fragmentation:
    """FGD's fragmentation measure against the pods' request distribution."""

    def __init__(self, pods: list[Pod]) -> None:
        counts = Counter(p.milli for p in pods)
        self.requests = np.array(sorted(counts), dtype=np.float64)
        self.weights = np.array([counts[int(r)] for r in self.requests]) / len(pods)

    def per_gpu(self, free: np.ndarray) -> np.ndarray:
        """Return each GPU's expected fragment: sum_m p_m * free * [free < request_m]."""
        small = free[:, None] < self.requests[None, :]
        return np.asarray((small * self.weights[None, :]).sum(axis=1) * free)

    def rate(self, free: np.ndarray) -> float:
        """Return fragmented / unallocated GPU capacity (0 when nothing is free)."""
        total = float(free.sum())
        return float(self.per_gpu(free).sum()) / total if total > 0 else 0.0
