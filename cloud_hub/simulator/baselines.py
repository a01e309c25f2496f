"""Baseline choosers over the same engine: the heterogeneity-agnostic ones, static, oracle.

They all choose only among the devices that pass the placement kernel's hard constraints
(``FleetState.feasible``); none of them uses hetmesh's estimates.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from cloud_hub.simulator.engine import Chooser, FleetState, Job
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.workload import Task
from edge_agent.resources.vocab import DeviceKind

#: Static type mapping (task type -> preferred device kinds, best first), as in the seed
#: reports: CNNs to NPUs/DPUs, transformers to GPUs, everything else to CPUs.
STATIC_MAP: dict[str, tuple[str, ...]] = {
    "classification": ("npu", "fpga", "gpu_nvidia", "cpu_arm", "cpu_x86"),
    "detection": ("gpu_nvidia", "npu", "fpga", "cpu_arm", "cpu_x86"),
    "transformer": ("gpu_nvidia", "cpu_x86", "cpu_arm", "npu"),
    "training": ("gpu_nvidia", "gpu_other", "cpu_x86"),
}


class _Base:
    """Shared plumbing: a seeded RNG and the feasible set of a task."""

    name = "base"

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def feasible(self, task: Task, state: FleetState) -> list[int]:
        """Return the devices that pass the hard constraints for ``task``."""
        return state.feasible[(task.model, task.precision)]

    def pick_min(self, devs: list[int], key: list[float]) -> int:
        """Return the device with the least key, ties broken at random."""
        best = min(key[d] for d in devs)
        return self.rng.choice([d for d in devs if key[d] == best])

    def finished(self, job: Job, now: float) -> None:
        """Baselines do not learn."""


class RandomChooser(_Base):
    """Uniformly random feasible device."""

    name = "random"

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return a random feasible device."""
        devs = self.feasible(task, state)
        return self.rng.choice(devs) if devs else None


class RoundRobinChooser(_Base):
    """The next feasible device after the last one chosen, in fleet order."""

    name = "round-robin"

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.last = -1

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return the first feasible device after the previous choice (cyclic)."""
        devs = self.feasible(task, state)
        if not devs:
            return None
        after = [d for d in devs if d > self.last]
        self.last = after[0] if after else devs[0]
        return self.last


def _queue_lens(state: FleetState) -> list[float]:
    """Return every device's unfinished task count (running, waiting and in transit)."""
    return [float(state.queue_len(d)) for d in range(len(state.pending))]


class LeastLoadedChooser(_Base):
    """The feasible device with the fewest unfinished tasks (shortest queue)."""

    name = "least-loaded"

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return the feasible device with the shortest queue."""
        devs = self.feasible(task, state)
        return self.pick_min(devs, _queue_lens(state)) if devs else None


class StaticChooser(_Base):
    """Static type mapping: the first preferred kind with a feasible device, shortest queue."""

    name = "static"

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return a device of the task type's preferred kind."""
        devs = self.feasible(task, state)
        kinds = [sd.device.kind for sd in state.fleet.devices]
        for kind in STATIC_MAP[model_info(task.model).task_type]:
            of_kind = [d for d in devs if kinds[d] == DeviceKind[kind.upper()]]
            if of_kind:
                return self.pick_min(of_kind, _queue_lens(state))
        return self.pick_min(devs, _queue_lens(state)) if devs else None


class _Allocated(_Base):
    """Kubernetes NodeResourcesFit scoring on memory requests (allocated / allocatable)."""

    most = False

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return the least (spread) or most (binpack) allocated device the request fits."""
        need = state.memory[(task.model, task.precision)]
        caps = [sd.device.capability.memory_bytes for sd in state.fleet.devices]
        devs = [d for d in self.feasible(task, state) if state.committed_mem[d] + need <= caps[d]]
        if not devs:
            return None
        sign = -1.0 if self.most else 1.0
        frac = [
            sign * (m + need) / c if c > 0 else 0.0
            for m, c in zip(state.committed_mem, caps, strict=True)
        ]
        return self.pick_min(devs, frac)


class SpreadChooser(_Allocated):
    """Kubernetes LeastAllocated: spread requests over the emptiest devices."""

    name = "k8s-spread"


class BinpackChooser(_Allocated):
    """Kubernetes MostAllocated: pack requests onto the fullest device that fits."""

    name = "k8s-binpack"
    most = True


class OracleChooser(_Base):
    """Clairvoyant greedy: knows every true service time, picks the earliest completion."""

    name = "oracle"

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return the feasible device on which the task truly finishes first."""
        devs = self.feasible(task, state)
        if not devs:
            return None
        finish = {d: state.finish_if(task, d, now)[1] for d in devs}
        return min(devs, key=lambda d: (finish[d], d))


BASELINES: dict[str, Callable[[int], Chooser]] = {
    c.name: c
    for c in (
        RandomChooser,
        RoundRobinChooser,
        LeastLoadedChooser,
        StaticChooser,
        SpreadChooser,
        BinpackChooser,
        OracleChooser,
    )
}
#: The heterogeneity-agnostic baselines the issue's latency target compares against.
AGNOSTIC = ("random", "round-robin", "least-loaded", "k8s-spread", "k8s-binpack")
