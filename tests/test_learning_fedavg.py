"""Server side: FedAvg through Flower's strategy and the ClientApp, registry, evaluation."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401
    from flwr.app import Message, MessageType

from cloud_hub.learning import serverapp
from cloud_hub.learning.evaluation import (
    DITTO_MUS,
    NAIVE,
    VAL_FRACTION,
    ditto,
    evaluate,
    fine_tuned,
    prepare,
    run_fedavg,
)
from cloud_hub.learning.localgrid import CLIENT_ERROR_CODE, LocalGrid
from cloud_hub.learning.registry import ModelRegistry
from cloud_hub.learning.serverapp import RoundSettings, RunCannotStart, publish, train_federated
from cloud_hub.learning.traces import Site, all_sites
from edge_agent.errors import InvalidInput
from edge_agent.predictor.clientapp import app as client_app
from edge_agent.predictor.features import FeatureSpec, split_point
from edge_agent.predictor.model import LoadModel, TrainConfig, model_for
from edge_agent.predictor.runtime import OrtPredictor

SPEC = FeatureSpec(window=24, bucket_s=3600.0)  # seasonal naive needs a day of window


def _sites() -> list[Site]:
    """Three short non-IID sites cut from the real traces (first 400 hourly buckets)."""
    return [Site(s.name, s.t0, s.bucket_s, s.series[:400]) for s in all_sites()[:3]]


class RecordingGrid(LocalGrid):
    """A LocalGrid that keeps every reply it hands to the strategy."""

    def __init__(self, node_configs: dict[int, dict[str, object]]) -> None:
        super().__init__(client_app, node_configs)
        self.replies: list[Message] = []

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        got = list(super().pull_messages(message_ids))
        self.replies.extend(got)
        return got


def _grid(workdir: Path, sites: dict[int, Site]) -> RecordingGrid:
    """A grid with one node per site, each reading its series from an npz in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    configs: dict[int, dict[str, object]] = {}
    for nid, s in sites.items():
        np.savez(workdir / f"{nid}.npz", t0=s.t0, series=s.series)
        configs[nid] = {"series-npz": str(workdir / f"{nid}.npz")}
    return RecordingGrid(configs)


def test_fedavg_rounds_complete_with_a_node_offline(tmp_path: Path) -> None:
    settings = RoundSettings(spec=SPEC, num_rounds=2, min_nodes=2, local_epochs=1)
    a, b, c = _sites()
    grid = _grid(tmp_path / "three", {101: a, 102: b, 103: c})
    grid.offline = {102}
    model, result = train_federated(grid, settings)
    # every requested round was aggregated, from the two online nodes' replies
    assert sorted(result.train_metrics_clientapp) == [1, 2]
    assert sorted(set(grid.delivered)) == [101, 103]
    train = [r for r in grid.replies if r.metadata.message_type == MessageType.TRAIN]
    assert sorted(r.metadata.src_node_id for r in train) == [101, 101, 103, 103]
    assert not any(r.has_error() for r in grid.replies)
    # the offline node contributed nothing: the same rounds without it give the same model
    alone, _ = train_federated(_grid(tmp_path / "two", {101: a, 103: c}), settings)
    for got, want in zip(model.get_weights(), alone.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # and it is not the model all three would have made
    everyone, _ = train_federated(_grid(tmp_path / "all", {101: a, 102: b, 103: c}), settings)
    assert any(
        not np.allclose(x, y)
        for x, y in zip(model.get_weights(), everyone.get_weights(), strict=True)
    )


def test_run_that_cannot_start_is_stopped(tmp_path: Path) -> None:
    npz = tmp_path / "s.npz"
    np.savez(npz, t0=0.0, series=np.ones(100))
    grid = LocalGrid(client_app, {101: {"series-npz": str(npz)}})
    settings = RoundSettings(spec=SPEC, num_rounds=1, min_nodes=2, start_timeout_s=0.0)
    with pytest.raises(RunCannotStart, match="1 of 2 required nodes"):
        train_federated(grid, settings)


def test_client_failure_is_an_error_reply_not_a_crash(tmp_path: Path) -> None:
    npz = tmp_path / "s.npz"
    np.savez(npz, t0=0.0, series=np.abs(np.sin(np.arange(300.0))))
    grid = RecordingGrid(
        {101: {"series-npz": str(npz)}, 102: {"series-npz": str(tmp_path / "missing.npz")}},
    )
    settings = RoundSettings(spec=SPEC, num_rounds=1, min_nodes=2)
    _, result = train_federated(grid, settings)
    assert sorted(set(grid.delivered)) == [101, 102]
    # the failing node answered, with an explicit error naming what went wrong
    failed = [r for r in grid.replies if r.metadata.src_node_id == 102]
    assert failed and all(r.has_error() for r in failed)
    assert failed[0].error.code == CLIENT_ERROR_CODE and "missing.npz" in failed[0].error.reason
    assert not any(r.has_error() for r in grid.replies if r.metadata.src_node_id == 101)
    mae = result.train_metrics_clientapp[1]["train_rel_mae"]
    assert isinstance(mae, float) and mae > 0  # the healthy node's reply


def test_publish_registers_loadable_onnx(tmp_path: Path) -> None:
    settings = RoundSettings(spec=SPEC, num_rounds=1, min_nodes=3, local_epochs=1)
    with_tmp = dataclasses.replace(settings)
    sites = _sites()
    grid_model = run_fedavg(sites, with_tmp, workdir=tmp_path)
    reg = ModelRegistry(tmp_path / "reg")
    from flwr.serverapp.strategy import Result

    entry = publish(grid_model, Result(), settings, reg)
    assert reg.latest() == entry and entry.version == 1
    ort = OrtPredictor(reg.read(entry))
    assert ort.spec == SPEC
    with pytest.raises(InvalidInput, match="not a valid ONNX"):
        reg.add(b"junk", {})
    assert [v.version for v in reg.versions()] == [1]


def test_settings_from_run_config() -> None:
    s = serverapp.settings_from_config(
        {"num-rounds": 3, "min-nodes": 4, "window": 8, "round-timeout-s": 5.0}
    )
    assert (s.num_rounds, s.min_nodes, s.spec.window, s.round_timeout_s) == (3, 4, 8, 5.0)


def test_evaluation_reports_every_method_per_site() -> None:
    sites = _sites()
    report = evaluate(sites, RoundSettings(spec=SPEC, num_rounds=2, min_nodes=3))
    for method in (*NAIVE, "local_only", "centralized", "fedavg", "fedavg_finetuned",
                   "fedavg_local_mix", "fedavg_ditto"):  # fmt: skip
        assert set(report.mae[method]) == {s.name for s in sites}
        assert np.isfinite(report.rel_mae[method])
    assert report.best_naive() in NAIVE
    assert 0 <= report.local_only_sites_won() <= 3
    assert 0 <= report.local_only_sites_won("fedavg_finetuned") <= 3
    assert set(report.mix_weights) == {s.name for s in sites}
    assert all(0.0 <= w <= 1.0 for w in report.mix_weights.values())
    assert set(report.ditto_choice) == {s.name for s in sites}
    budget = 2 * RoundSettings(spec=SPEC).local_epochs  # Ditto's epochs: the same SGD budget
    assert all(mu in DITTO_MUS and 0 <= ep <= budget for mu, ep in report.ditto_choice.values())


def test_fine_tuning_personalises_a_copy_of_the_global_model(tmp_path: Path) -> None:
    settings = RoundSettings(spec=SPEC, num_rounds=1, min_nodes=3, local_epochs=1)
    sites = _sites()
    fed = run_fedavg(sites, settings, workdir=tmp_path)
    before = fed.get_weights()
    site = prepare(sites, settings)[0]
    tuned = fine_tuned(fed, site, TrainConfig(epochs=5, lr=settings.lr))
    assert all(np.array_equal(a, b) for a, b in zip(fed.get_weights(), before, strict=True))
    val = split_point(site.cut, VAL_FRACTION)  # the slice that chose the epochs, before test
    x, y = site.x[val : site.cut], site.y[val : site.cut]

    def err(m: LoadModel) -> float:
        return float(
            np.mean(np.abs(np.maximum(m.predict(x), 0.0) - y) * site.level[val : site.cut])
        )

    assert err(tuned) < err(fed)  # one site's own data: the personalised model fits it better


def _toy(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(1.0, 0.3, (n, SPEC.n_features))
    return x, x[:, SPEC.window - 1] * 0.5 + 0.2


def test_proximal_term_pulls_training_towards_the_anchor() -> None:
    x, y = _toy()
    anchor = model_for(SPEC.n_features, SPEC.window, seed=3).get_weights()
    cfg = TrainConfig(epochs=3, lr=0.05)

    def gap(m: LoadModel) -> float:
        return sum(
            float(np.sum((w - a) ** 2)) for w, a in zip(m.get_weights(), anchor, strict=True)
        )

    def distance(prox: float) -> float:
        m = model_for(SPEC.n_features, SPEC.window, seed=3)
        m.fit(x, y, cfg, anchor=anchor, prox=prox)
        return gap(m)

    plain = model_for(SPEC.n_features, SPEC.window, seed=3)
    plain.fit(x, y, cfg)
    free = gap(plain)
    assert distance(0.0) == pytest.approx(free)  # prox 0: the anchor changes nothing
    assert distance(1.0) < distance(0.1) < free
    with pytest.raises(InvalidInput, match="proximal weight"):
        plain.fit(x, y, cfg, anchor=anchor, prox=-1.0)
    with pytest.raises(InvalidInput, match="shape"):
        plain.fit(x, y, cfg, anchor=[a.T for a in anchor], prox=0.1)


def test_head_only_training_keeps_the_hidden_layer() -> None:
    x, y = _toy()
    m = model_for(SPEC.n_features, SPEC.window, seed=1)
    before = m.get_weights()
    m.fit(x, y, TrainConfig(epochs=2, lr=0.05), head_only=True)
    after = m.get_weights()
    assert np.array_equal(after[2], before[2]) and np.array_equal(after[3], before[3])  # w1, b1
    assert not np.array_equal(after[0], before[0])  # the linear path trained


def test_ditto_picks_mu_and_epochs_on_the_validation_slice(tmp_path: Path) -> None:
    settings = RoundSettings(spec=SPEC, num_rounds=1, min_nodes=3, local_epochs=1)
    sites = _sites()
    fed = run_fedavg(sites, settings, workdir=tmp_path)
    site = prepare(sites, settings)[1]
    cfg = TrainConfig(epochs=3, lr=settings.lr)
    mus = (0.01, 1.0)
    own, mu, epochs = ditto(fed, site, cfg, SPEC.window, mus)
    assert mu in mus and 0 <= epochs <= 3
    val = split_point(site.cut, VAL_FRACTION)
    x, y, level = site.x[val : site.cut], site.y[val : site.cut], site.level[val : site.cut]

    def err(m: LoadModel) -> float:
        return float(np.mean(np.abs(np.maximum(m.predict(x), 0.0) - y) * level))

    for other in mus:  # no other mu, at any epoch count, did better on validation
        m = model_for(SPEC.n_features, SPEC.window, settings.hidden)
        for epoch in range(cfg.epochs):
            m.fit(site.x[:val], site.y[:val], dataclasses.replace(cfg, epochs=1, seed=epoch),
                  anchor=fed.get_weights(), prox=other)  # fmt: skip
            assert err(own) <= err(m) + 1e-12
    with pytest.raises(InvalidInput, match="proximal weights > 0"):
        ditto(fed, site, cfg, SPEC.window, (0.0,))
