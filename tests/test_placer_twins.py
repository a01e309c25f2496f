"""A class measured on one device starts its cold pairs on identical devices there (``pooling``).

Identical hardware (the same profile's same unit) runs one network alike: a (class, device)
factor measured on one unit is lent to the class's cold pairs (roofline, pooled,
calibrated) on its twins, labelled ``explore.TWIN``, scaled by the two devices' drifts where
both are measured; published priors keep their own figure; a pair's own measurement wins.
"""

from __future__ import annotations

import dataclasses

import pytest

from edge_agent.placement import Placer, Policy
from edge_agent.placement.explore import ROOFLINE_WITHIN, TWIN, TWIN_WITHIN
from edge_agent.resources.device import Device
from edge_agent.resources.profiles import load_profile
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract
from tests.test_placer_cold import _model_task, _twin
from tests.test_placer_quality import dev, placer

A, B = "box-1/cpu", "box-2/cpu"


def _measure(p: Placer, contract: TaskContract, device: str, factor: float) -> None:
    """Place ``contract`` on ``device`` and report it ``factor`` times its uncorrected model."""
    d = p.place_one(contract, candidates=(device,))
    p.feedback(d, latency_s=factor * d.base_s)


def test_a_twins_cold_pair_starts_from_the_measured_factor(backend: str) -> None:
    p = placer([dev("gpu", int8=1000), _twin(A), _twin(B)], backend)
    p.preview(_model_task("net-a"))  # registered cold: the roofline on every device
    _measure(p, _model_task("net-a"), A, 6.0)
    cls = p.class_index("net-a")
    assert p.correction("net-a", B) == pytest.approx(6.0)  # the twin's measurement
    assert p.correction("net-a", "gpu") == 1.0  # not the same hardware
    d = p.preview(_model_task("net-a"), candidates=(B,))
    assert d.sources is not None and d.sources[2] == TWIN and d.sources[0] == "roofline"
    assert d.estimate_source == TWIN and TWIN in d.summary()  # what `explain` shows
    row = p.exploration.optimism_row(cls)
    assert row[2] == TWIN_WITHIN and row[0] == ROOFLINE_WITHIN
    # the twin's later samples move it (it is still unmeasured on B) ...
    _measure(p, _model_task("net-a"), A, 2.0)
    assert p.correction("net-a", B) == pytest.approx(p.correction("net-a", A))
    # ... another class measured on A re-pools B's cold classes, not this one
    _measure(p, _model_task("net-b"), A, 50.0)
    assert p.correction("net-a", B) == pytest.approx(p.correction("net-a", A))
    # B's own first measurement replaces it, and A's later ones no longer reach it
    _measure(p, _model_task("net-a"), B, 3.0)
    assert p.correction("net-a", B) == pytest.approx(3.0)
    marks = p.preview(_model_task("net-a")).sources
    assert marks is not None and marks[2] == f"learned from measurements (prior: {TWIN})"
    assert p.exploration.optimism_row(cls)[2] == 1.0
    _measure(p, _model_task("net-a"), A, 9.0)
    assert p.correction("net-a", B) == pytest.approx(3.0)


def _rk3588_cpus() -> list[Device]:
    cpu = next(d for d in load_profile("rk3588").devices(emulated=True) if d.id == "rk3588/cpu")
    return [dataclasses.replace(cpu, id=A), dataclasses.replace(cpu, id=B)]


def _fp32(model: str, gflops: float) -> TaskContract:
    return TaskContract(
        Semantics(gflops=gflops, precision="fp32"), Requirements(), task_class=model, model=model
    )


def test_the_lent_factor_keeps_the_twins_drift_and_published_priors_keep_theirs(
    backend: str,
) -> None:
    """B runs 2x slower than its published figures where A runs at them: B's lent factor is
    A's measured one x 2; a model B's profile publishes keeps its (drifted) published prior."""
    p = Placer(_rk3588_cpus(), Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]
    resnet18, resnet50 = _fp32("resnet18", 3.64), _fp32("resnet50", 8.19)
    for contract in (resnet18, resnet50):
        p.preview(contract)
    edge_net = _fp32("edge_net", 5.0)  # no published figure: calibrated
    cold = p.preview(edge_net).sources
    assert cold is not None and cold[1].startswith("roofline calibrated on")
    f18, f50 = p.correction("resnet18", A), p.correction("resnet50", A)
    _measure(p, resnet18, A, f18)  # A: as published
    _measure(p, resnet18, B, 2.0 * f18)  # B: 2x its published figure
    _measure(p, edge_net, A, 4.0)
    assert p.correction("edge_net", B) == pytest.approx(8.0)  # A's 4 x B's drift over A's
    marks = p.preview(edge_net).sources
    assert marks is not None and marks[1] == TWIN
    # resnet50's published prior on B is not replaced by A's measurement of it: it keeps its
    # own published figure, scaled by B's measured drift (2x)
    _measure(p, resnet50, A, 3.0 * f50)
    assert p.correction("resnet50", B) == pytest.approx(2.0 * f50)
    published = p.preview(resnet50).sources
    assert published is not None and published[1].startswith("published fp32")
