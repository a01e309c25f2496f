"""A re-pool passes only the devices it marked, over cached means (``pooling``, ``device_logs``).

Session 11 made ``Placer.feedback``'s pooling cost grow at most linearly with a device's
twins: means are cached per device and per group of identical devices, a re-pool (and a
re-drift) passes over the marked devices only, and a class's lendable twins are pruned as
they get measured. The reference here is the same Placer with all three undone (every mean
summed afresh, every twin passed, every twin checked, as before), fed the same random
feedbacks, overruns, imports and new classes on a fleet with twins: the correction tables,
the estimate sources and the exploration bounds must stay equal bit for bit, and every
device's pooled factor and drift equal a from-scratch recomputation.

Session 12: a pass that relabels many pairs of a class (a new class pooled on every device,
a re-pool over many twins) tells the explorer once, not once a pair (``_relabel``); the
reference tells it pair by pair, and the explorer's rows and book must stay equal too.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from edge_agent.placement import Placer, Policy, devices_from_profiles
from edge_agent.placement.device_logs import DeviceLogs
from edge_agent.placement.explore import POOLED, POOLED_WITHIN, TWIN
from edge_agent.placement.pooling import DRIFTED
from edge_agent.placement.priors import ROOFLINE
from edge_agent.resources.device import Device
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract
from tests.test_placer_cold import _twin
from tests.test_placer_quality import dev

# (model, GFLOPs): the RK3588's CPU publishes resnet18, resnet50 and mobilenet_v2
MODELS = [("resnet18", 3.64), ("resnet50", 8.19), ("mobilenet_v2", 0.6), ("edge_net", 5.0)]
LATE = [("late_net", 2.0), ("resnet18", 3.64)]  # classes first seen mid-run


class AfreshLogs(DeviceLogs):
    """The same logs, each mean summed afresh over the device or its twins (no cache)."""

    def own_mean(self, d: int) -> float | None:
        logs = self.logs.get(d)
        return sum(logs.values()) / len(logs) if logs else None

    def mean(self, d: int) -> tuple[float, int] | None:
        twins = tuple(j for j in self._groups[d] if j != d)
        for group in ((d,), twins):
            values = [v for j in group for v in self.logs.get(j, {}).values()]
            if values:
                classes = {c for j in group for c in self.logs.get(j, {})}
                return sum(values) / len(values), len(classes)
        return None


class Forgetful(dict[tuple[int, int], tuple[int, ...]]):
    """A lendable-twins memory that keeps nothing: every twin is checked every time."""

    def __setitem__(self, key: tuple[int, int], value: tuple[int, ...]) -> None:
        pass


class FullPassPlacer(Placer):
    """A Placer whose re-pools pass every twin over means summed afresh (as before)."""

    def _init_pooling(self) -> None:
        super()._init_pooling()
        self._learned_logs = AfreshLogs(self._group)
        self._published_logs = AfreshLogs(self._group)
        self._drift_logs = AfreshLogs(self._group)
        self._lendable = Forgetful()

    def _marked(self, pending: dict[int, set[int]], d: int) -> tuple[int, ...]:
        pending.pop(self._group[d][0], None)
        return (d, *(j for j in self._group[d] if j != d))

    def _relabel(self, cls: int, labels: dict[int, str]) -> None:
        """Relabel pair by pair, telling the explorer after each (as before session 12)."""
        for d, label in labels.items():
            marks = list(self._sources[cls] or (ROOFLINE,) * len(self.devices))
            marks[d] = label
            self._sources[cls] = tuple(marks)
            self.exploration.set_sources(cls, self._sources[cls])


def _fleet() -> list[Device]:
    """Four RK3588 boxes (two groups of four twins), a fifth RK3588 CPU whose roofline is
    too far off for the published figures to apply (so it pools its twins' published
    figures, not its own), two made-up twins and a lone GPU."""
    boxes = devices_from_profiles(["rk3588"] * 4)
    slow = dataclasses.replace(
        boxes[0].capability, efficiency=boxes[0].capability.efficiency / 1000
    )
    return [
        *boxes,
        dataclasses.replace(boxes[0], id="rk3588#5/cpu", capability=slow),
        _twin("box-1/cpu"),
        _twin("box-2/cpu"),
        dev("gpu", int8=1000, fp32=100),
    ]


def _task(model: str, gflops: float, precision: str) -> TaskContract:
    return TaskContract(
        Semantics(gflops=gflops, precision=precision),
        Requirements(),
        task_class=f"{model}:{precision}",
        model=model,
    )


def _same_state(p: Placer, ref: Placer) -> None:
    n = p._ws.n_classes
    assert np.array_equal(p._ws.corrections[:n], ref._ws.corrections[:n])
    assert p._sources == ref._sources
    assert np.array_equal(p.exploration.bound_rows, ref.exploration.bound_rows)
    assert np.array_equal(p.exploration.divisor_rows, ref.exploration.divisor_rows)
    assert p.exploration.untried == ref.exploration.untried
    assert np.array_equal(p.exploration.book, ref.exploration.book)
    for d in range(len(p.devices)):
        assert p._pooled(d) == ref._pooled(d)  # cached means == summed afresh
        assert p._drift(d) == ref._drift(d)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_marked_repools_over_cached_means_equal_full_passes_summed_afresh(
    backend: str, seed: int
) -> None:
    rng = random.Random(seed)
    fleet = _fleet()
    p = Placer(fleet, Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]
    ref = FullPassPlacer(fleet, Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]
    ids = p.device_ids
    hidden = [rng.choice([0.5, 1.0, 1.0, 2.0, 3.0]) for _ in ids]
    tasks = [_task(m, g, prec) for m, g in MODELS for prec in ("fp32", "int8")]
    tasks.append(TaskContract(Semantics(gflops=1.0, precision="int8"), task_class="plain"))
    late = [_task(m, g, "fp16") for m, g in LATE]
    for placer in (p, ref):
        for task in tasks:
            placer.preview(task)
    _same_state(p, ref)
    pooled_twins = drifted = 0
    for _ in range(400):
        roll = rng.random()
        if roll < 0.03 and late:  # a class first seen now: pooled from what is known
            task = late.pop()
            tasks.append(task)
            for placer in (p, ref):
                placer.preview(task)
        elif roll < 0.08:  # a factor from outside, on any pair (cold ones included)
            table = {rng.choice(tasks).task_class: {rng.choice(ids): rng.uniform(0.2, 5.0)}}
            for placer in (p, ref):
                placer.import_corrections(table)
        else:  # a task on one device, measured (now and then first seen overrunning)
            # half on a few pairs, measured past the re-pooling samples (``_POOL_SAMPLES``)
            few = rng.random() < 0.5
            task = rng.choice(tasks[:3] if few else tasks)
            k = rng.choice((0, 2, 8)) if few else rng.randrange(len(ids))
            overrun = roll > 0.95
            factor = hidden[k] * rng.uniform(0.7, 1.4)
            for placer in (p, ref):
                decision = placer.place_one(task, candidates=(ids[k],))
                if not decision.placed:
                    placer.release(decision)
                    continue
                if overrun:
                    placer._overrun(decision, 4.0 * factor * decision.base_s)
                placer.feedback(decision, latency_s=factor * decision.base_s)
        _same_state(p, ref)
        pooled_twins += sum(
            1
            for marks in p._sources
            for j, mark in enumerate(marks or ())
            if mark in (TWIN, POOLED) and fleet[j].profile is not None
        )
        drifted += sum(mark.endswith(DRIFTED) for marks in p._sources for mark in marks or ())
    # the run went through the cases the marks stand for: twins lent to and pooled, pairs
    # measured past the re-pooling samples, published priors drifted
    assert pooled_twins > 0
    assert max(p._samples.values()) > 8
    assert drifted > 0
    calibrated_from_twins = p._published_logs.mean(8)
    assert 8 not in p._published_logs.logs and calibrated_from_twins is not None


def test_a_class_pooled_on_many_twins_tells_the_explorer_once() -> None:
    """A model's class first seen on 64 identical CPUs, one of them measured on another
    model: every pair starts pooled, and the explorer hears the class's sources once (it
    heard them once a pair: a pass over the fleet per twin)."""
    fleet = [_twin(f"box-{i}/cpu") for i in range(64)]
    p = Placer(fleet, Policy.template("balanced"))
    seed = p.place_one(_task("seed_net", 5.0, "int8"))
    p.feedback(seed, latency_s=3.0 * seed.base_s)
    told: list[int] = []
    set_sources = p.exploration.set_sources

    def counted(cls: int, sources: tuple[str, ...]) -> None:
        told.append(cls)
        set_sources(cls, sources)

    p.exploration.set_sources = counted  # type: ignore[method-assign]
    cls = p.class_index(p.prepare(_task("new_net", 5.0, "int8")).contract.task_class)
    assert p._sources[cls] == (POOLED,) * 64
    assert told == [cls]
    untried = p.exploration.untried[cls]
    assert untried is not None and set(untried) == {POOLED_WITHIN}
