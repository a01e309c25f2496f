"""GPU sharing: pods take a fraction of a GPU until the cluster is full (FGD's inflation).

Pods arrive in trace order, then keep being drawn from the trace (seeded) until the
requested share reaches the cluster's capacity, as in FGD's evaluation; pods never leave.
A pod nobody can fit fails. The fragmentation rate is sampled as the cluster fills.
hetmesh policies decide with one ``Placer`` over every GPU; baselines read the shares.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from cloud_hub.simulator.openb import SHARE, Fragmentation, Pod, pod_contract
from edge_agent.placement import Placer, Policy, PreparedTask
from edge_agent.resources.device import Device

CHECKPOINTS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0)  # arrived share of capacity


class ShareChooser(Protocol):
    """Picks a GPU index that fits ``milli`` given every GPU's free share, or None."""

    name: str

    def choose(self, milli: int, free: np.ndarray) -> int | None:
        """Return the GPU for the pod, or None when it fits nowhere."""


class HetmeshShare:
    """One hetmesh Placer over all GPUs; its memory accounting is the share accounting."""

    def __init__(self, devices: list[Device], policy: Policy) -> None:
        self.name = policy.name
        self.placer = Placer(devices, policy, keep_reasons=False)
        self._prepared: dict[int, PreparedTask] = {}
        self.place_s = 0.0

    def choose(self, milli: int, free: np.ndarray) -> int | None:
        """Place with the kernel; it charges the share and the pod's work to the GPU."""
        prepared = self._prepared.get(milli)
        if prepared is None:
            prepared = self._prepared[milli] = self.placer.prepare(pod_contract(milli))
        t0 = time.perf_counter()
        decision = self.placer.place_one(prepared)
        self.place_s += time.perf_counter() - t0
        return decision.device_indices[0] if decision.placed else None


class _Fit:
    """Shared helpers: the GPUs a pod fits on, seeded tie breaks."""

    name = "fit"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def pick(self, score: np.ndarray, fits: np.ndarray) -> int | None:
        """Return a fitting GPU with the least score (ties at random)."""
        if not fits.any():
            return None
        s = np.where(fits, score, np.inf)
        best = np.flatnonzero(s == s.min())
        return int(best[self.rng.integers(len(best))])


class RandomShare(_Fit):
    """Random-fit: any GPU the pod fits on."""

    name = "random"

    def choose(self, milli: int, free: np.ndarray) -> int | None:
        """Return a random fitting GPU."""
        return self.pick(np.zeros_like(free), free >= milli)


class SpreadShare(_Fit):
    """Kubernetes LeastAllocated on the GPU share: the emptiest GPU that fits."""

    name = "k8s-spread"

    def choose(self, milli: int, free: np.ndarray) -> int | None:
        """Return the fitting GPU with the most free share."""
        return self.pick(-free, free >= milli)


class BinpackShare(_Fit):
    """Kubernetes MostAllocated on the GPU share: the fullest GPU that fits (best fit)."""

    name = "k8s-binpack"

    def choose(self, milli: int, free: np.ndarray) -> int | None:
        """Return the fitting GPU with the least free share."""
        return self.pick(free, free >= milli)


class FgdShare(_Fit):
    """FGD (Weng et al., ATC'23): the GPU whose expected fragmentation grows the least."""

    name = "fgd"

    def __init__(self, seed: int, frag: Fragmentation) -> None:
        super().__init__(seed)
        self.frag = frag

    def choose(self, milli: int, free: np.ndarray) -> int | None:
        """Return the fitting GPU minimizing the fragmentation increase of placing there."""
        fits = free >= milli
        delta = np.zeros_like(free)
        idx = np.flatnonzero(fits)
        delta[idx] = self.frag.per_gpu(free[idx] - milli) - self.frag.per_gpu(free[idx])
        return self.pick(delta, fits)


def arrivals(pods: list[Pod], capacity: float, seed: int) -> list[int]:
    """Return the pods' requests: the trace in order, then seeded draws until ``capacity``."""
    out, total = [], 0.0
    rng = np.random.default_rng(seed)
    stream = iter(pods)
    while total < capacity:
        pod = next(stream, None)
        milli = pod.milli if pod is not None else pods[int(rng.integers(len(pods)))].milli
        out.append(milli)
        total += milli
    return out


def simulate_sharing(
    n_gpus: int,
    requests: list[int],
    chooser: ShareChooser,
    frag: Fragmentation,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Place ``requests`` one by one; return fragmentation along the way and at the end."""
    free = np.full(n_gpus, SHARE)
    capacity = SHARE * n_gpus
    arrived = failed_share = 0.0
    failed = 0
    curve: dict[str, float] = {}
    marks = list(CHECKPOINTS)
    step = max(1, len(requests) // 100)
    t0 = time.perf_counter()
    for i, milli in enumerate(requests):
        gpu = chooser.choose(milli, free)
        if gpu is None:
            failed += 1
            failed_share += milli
        else:
            if free[gpu] < milli:
                raise RuntimeError(f"{chooser.name} overbooked GPU {gpu}")
            free[gpu] -= milli
        arrived += milli
        while marks and arrived >= marks[0] * capacity - 1e-9:
            curve[f"{marks.pop(0):.0%}"] = frag.rate(free)
        if progress is not None and ((i + 1) % step == 0 or i + 1 == len(requests)):
            progress(i + 1)
    return {
        "pods": len(requests),
        "failed_pods": failed,
        "failed_share": failed_share / max(arrived, 1.0),
        "allocated_share": 1.0 - float(free.sum()) / capacity,
        "frag_rate_by_arrived": curve,
        "frag_rate_end": frag.rate(free),
        "fragmented_share_of_capacity": float(frag.per_gpu(free).sum()) / capacity,
        "wall_s": time.perf_counter() - t0,
    }
