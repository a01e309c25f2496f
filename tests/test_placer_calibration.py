"""A device's roofline calibrated on the figures its profile publishes for other models.

An RK3588's A76 cluster publishes fp32 latencies for resnet18, resnet50, mobilenet_v2 (and
more), none for ``edge_net`` (a made-up model): once classes of published models have
shown published / roofline on it, ``edge_net`` starts there, not at the bare roofline.
"""

from __future__ import annotations

import math

import pytest

from edge_agent.placement import Placer, Policy
from edge_agent.placement.explore import POOLED, POOLED_WITHIN, ROOFLINE_WITHIN
from edge_agent.placement.pooling import DRIFTED, calibrated_label
from edge_agent.resources.device import Device
from edge_agent.resources.profiles import load_profile
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract
from tests.test_placer_quality import dev

CPU = "rk3588/cpu"
GPU = "gpu"  # a device of no profile: nothing published, its roofline stays as it is


def _fleet() -> list[Device]:
    cpu = next(d for d in load_profile("rk3588").devices(emulated=True) if d.id == CPU)
    return [cpu, dev(GPU, int8=1000, fp32=500)]


def _placer(backend: str) -> Placer:
    return Placer(_fleet(), Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]


def _contract(model: str, gflops: float) -> TaskContract:
    return TaskContract(
        Semantics(gflops=gflops, precision="fp32"),
        Requirements(),
        task_class=f"{model}:fp32",
        model=model,
    )


def _published_factor(p: Placer, model: str, gflops: float) -> float:
    """Register the class of a model the CPU publishes; return its (published) correction."""
    d = p.preview(_contract(model, gflops))
    assert d.sources is not None and d.sources[0].startswith("published fp32")
    return p.correction(f"{model}:fp32", CPU)


def test_an_unknown_model_starts_from_the_devices_published_figures(backend: str) -> None:
    p = _placer(backend)
    cold = p.preview(_contract("edge_net", 5.0))  # first: nothing published seen yet
    assert cold.sources is None  # every estimate is the bare roofline
    f18 = _published_factor(p, "resnet18", 3.64)
    f50 = _published_factor(p, "resnet50", 8.19)
    assert f18 != pytest.approx(1.0) and f50 != pytest.approx(1.0)
    expected = math.sqrt(f18 * f50)  # geometric mean of published / roofline
    # the class registered before the evidence is re-started from it, as is a new one
    for model in ("edge_net", "other_net"):
        d = p.preview(_contract(model, 5.0))
        assert p.correction(f"{model}:fp32", CPU) == pytest.approx(expected)
        assert d.sources is not None and d.sources[0] == calibrated_label(2)
        assert d.sources[1] == "roofline"  # the GPU publishes nothing: its roofline
        assert p.correction(f"{model}:fp32", GPU) == 1.0
        row = p.exploration.optimism_row(p.class_index(f"{model}:fp32"))
        assert row[0] == POOLED_WITHIN and row[1] == ROOFLINE_WITHIN
    assert calibrated_label(2) == "roofline calibrated on 2 published models"


def test_a_models_own_published_figure_wins_over_the_calibration(backend: str) -> None:
    p = _placer(backend)
    f18 = _published_factor(p, "resnet18", 3.64)
    f50 = _published_factor(p, "resnet50", 8.19)
    p.preview(_contract("edge_net", 5.0))
    assert p.correction("resnet18:fp32", CPU) == pytest.approx(f18)  # untouched by the pool
    assert p.correction("resnet50:fp32", CPU) == pytest.approx(f50)
    d = p.preview(_contract("resnet18", 3.64))
    assert d.sources is not None and d.sources[0].startswith("published fp32")


def test_measurements_override_the_calibration(backend: str) -> None:
    p = _placer(backend)
    _published_factor(p, "resnet18", 3.64)
    _published_factor(p, "resnet50", 8.19)
    p.preview(_contract("other_net", 2.0))
    # a measurement of edge_net on the CPU replaces its calibrated start
    own = p.place_one(_contract("edge_net", 5.0), candidates=(CPU,))
    assert own.estimate_source == calibrated_label(2)
    p.feedback(own, latency_s=40.0 * own.base_s)
    assert p.correction("edge_net:fp32", CPU) == pytest.approx(40.0)
    # and what the device measured is the better evidence for its other cold classes
    d = p.preview(_contract("other_net", 2.0))
    assert d.sources is not None and d.sources[0] == POOLED
    assert p.correction("other_net:fp32", CPU) == pytest.approx(40.0)
    # a published class that arrives later does not overwrite either
    _published_factor(p, "mobilenet_v2", 0.602)
    assert p.correction("edge_net:fp32", CPU) == pytest.approx(40.0)
    assert p.correction("other_net:fp32", CPU) == pytest.approx(40.0)


def test_the_label_says_how_many_models_calibrated_it(backend: str) -> None:
    p = _placer(backend)
    _published_factor(p, "resnet18", 3.64)
    d = p.preview(_contract("edge_net", 5.0))
    assert d.sources is not None and d.sources[0] == "roofline calibrated on 1 published model"
    _published_factor(p, "mobilenet_v2", 0.602)
    d = p.place_one(_contract("edge_net", 5.0), candidates=(CPU,))
    label = "roofline calibrated on 2 published models"
    assert d.to_dict()["estimate_source"] == label  # what ``edge-agent explain`` reports
    assert label in d.summary()


def test_a_device_slower_than_its_published_figures_is_expected_so_for_its_other_models(
    backend: str,
) -> None:
    """resnet50 measured 1.5x its published figure on the CPU: resnet18, published and never
    measured there, is then expected 1.5x its figure too (a device-wide drift)."""
    p = _placer(backend)
    f18 = _published_factor(p, "resnet18", 3.64)
    d50 = p.place_one(_contract("resnet50", 8.19), candidates=(CPU,))
    assert d50.device_id == CPU
    p.feedback(d50, latency_s=1.5 * d50.service_s)  # the first measurement: its whole ratio
    assert p.correction("resnet18:fp32", CPU) == pytest.approx(1.5 * f18)
    again = p.preview(_contract("resnet18", 3.64), candidates=(CPU,))
    assert again.sources is not None and again.sources[0].startswith("published fp32")
    assert again.sources[0].endswith(DRIFTED)  # explain says the figure was scaled
    assert p.correction("resnet18:fp32", GPU) == 1.0  # nothing published there: untouched
    d18 = p.place_one(_contract("resnet18", 3.64), candidates=(CPU,))
    p.feedback(d18, latency_s=d18.base_s * f18)  # its own measurement: as published
    assert p.correction("resnet18:fp32", CPU) == pytest.approx(f18)  # its own evidence wins
