"""Evaluation harness: FedAvg vs local-only vs centralized vs naive baselines, MAE per site."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from cloud_hub.learning.localgrid import LocalGrid
from cloud_hub.learning.serverapp import RoundSettings, train_federated
from cloud_hub.learning.traces import Site
from edge_agent.predictor import baselines, personalise
from edge_agent.predictor.clientapp import app as client_app
from edge_agent.predictor.features import make_dataset, split_point
from edge_agent.predictor.model import LoadModel, TrainConfig, model_for
from edge_agent.predictor.personalise import DITTO_MUS, VAL_FRACTION, Part, early_stopped

FloatArray = NDArray[np.float64]
log = logging.getLogger(__name__)
FIRST_NODE_ID = 101  # clear of Flower's SUPERLINK_NODE_ID (1)
NAIVE = ("last_value", "ewma", "seasonal_naive")
FINETUNE_EPOCHS = 10  # at most this many local epochs on top of the global model
#: The shared models and three ways of making the federated one a site's own, each choosing
#: on the validation slice of the site's train part (never its test part).
LEARNED = (
    "centralized",
    "fedavg",
    "fedavg_finetuned",  # trained on locally, epochs chosen on validation
    "fedavg_local_mix",  # w·fine-tuned + (1-w)·local-only, w chosen on validation
    "fedavg_ditto",  # own model with a pull towards the global one, mu and epochs on validation
)


@dataclass
class SiteData:
    """A site's windows split chronologically into train and test."""

    name: str
    x: FloatArray
    y: FloatArray
    level: FloatArray
    cut: int

    def test_truth(self) -> FloatArray:
        """Test targets in the site's own units."""
        return self.y[self.cut :] * self.level[self.cut :]


@dataclass
class Report:
    """MAE per method per site (site units) and mean relative MAE per method."""

    sites: list[str]
    mae: dict[str, dict[str, float]] = field(default_factory=dict)
    rel_mae: dict[str, float] = field(default_factory=dict)
    mix_weights: dict[str, float] = field(default_factory=dict)  # fedavg_local_mix's w per site
    ditto_choice: dict[str, tuple[float, int]] = field(default_factory=dict)  # (mu, epochs)

    def local_only_sites_won(self, method: str = "fedavg") -> int:
        """Sites where method's MAE (FedAvg by default) is lower than the local-only model's."""
        return sum(self.mae[method][s] < self.mae["local_only"][s] for s in self.sites)

    def best_naive(self) -> str:
        """The naive baseline with the lowest mean relative MAE."""
        return min(NAIVE, key=lambda m: self.rel_mae[m])


def prepare(sites: list[Site], settings: RoundSettings) -> list[SiteData]:
    """Windows and chronological split for every site."""
    out = []
    for s in sites:
        spec = replace(settings.spec, bucket_s=s.bucket_s)
        x, y, level = make_dataset(s.series, s.t0, spec)
        out.append(SiteData(s.name, x, y, level, split_point(x.shape[0], settings.holdout)))
    return out


def _model_preds(model: LoadModel, d: SiteData) -> FloatArray:
    """The model's test forecasts in site units (clipped at zero like the runtime)."""
    return np.maximum(model.predict(d.x[d.cut :]) * d.level[d.cut :], 0.0)


def _naive_preds(d: SiteData, settings: RoundSettings, season: int) -> dict[str, FloatArray]:
    """Each naive baseline's test forecasts in site units."""
    w = d.x[d.cut :, : settings.spec.window] * d.level[d.cut :, None]
    return {
        "last_value": baselines.last_value(w),
        "ewma": baselines.ewma(w),
        "seasonal_naive": baselines.seasonal_naive(w, season, settings.spec.horizon),
    }


def run_fedavg(
    sites: list[Site],
    settings: RoundSettings,
    offline: set[int] | None = None,
    workdir: Path | None = None,
) -> LoadModel:
    """FedAvg through the real Flower strategy and ClientApp, sites as in-process nodes."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        configs: dict[int, dict[str, object]] = {}
        for i, s in enumerate(sites, start=FIRST_NODE_ID):
            path = Path(tmp) / f"site{i}.npz"
            np.savez(path, t0=s.t0, series=s.series)
            configs[i] = {"series-npz": str(path)}
        grid = LocalGrid(client_app, configs)
        grid.offline = set(offline or ())
        model, _ = train_federated(grid, settings)
    return model


def _early_stopped(
    model: LoadModel,
    d: SiteData,
    cfg: TrainConfig,
    anchor: list[FloatArray] | None = None,
    prox: float = 0.0,
) -> tuple[LoadModel, float, int]:
    """Train a copy of ``model`` up to cfg.epochs on the train part before the validation slice.

    ``personalise.early_stopped`` on the site's train part: the newest VAL_FRACTION of it
    scores the model after every epoch (and before the first); returns the best (model,
    validation MAE in site units, epochs). The test part is never looked at.
    """
    return early_stopped(model, [_train_part(d)], cfg, anchor, prox, VAL_FRACTION)


def _train_part(d: SiteData) -> Part:
    """The site's train windows (features, normalized targets, levels)."""
    return d.x[: d.cut], d.y[: d.cut], d.level[: d.cut]


def fine_tuned(global_model: LoadModel, d: SiteData, cfg: TrainConfig) -> LoadModel:
    """Personalisation: the global model trained on, up to cfg.epochs, on one site's train part.

    The newest VAL_FRACTION of the train part picks the epoch count (0 keeps the global
    model), so the test part is never looked at; the chosen model is returned.
    """
    return _early_stopped(global_model, d, cfg)[0]


def ditto(
    global_model: LoadModel,
    d: SiteData,
    cfg: TrainConfig,
    window: int,
    mus: tuple[float, ...] = DITTO_MUS,
) -> tuple[LoadModel, float, int]:
    """Personalisation à la Ditto: a site's own model pulled towards the global one.

    ``personalise.ditto`` (the agent runs the same) on the site's train part: a fresh model
    (as local-only starts) trained on the train part before the validation slice with the
    proximal term mu/2 · ‖w − w_global‖²; mu from ``mus`` and the epoch count (up to
    cfg.epochs) are chosen together on the validation slice. Returns (model, mu, epochs);
    the test part is never looked at.
    """
    choice = personalise.ditto(global_model, [_train_part(d)], cfg, window, mus, VAL_FRACTION)
    return choice.model, choice.mu, choice.epochs


def mix_weight(d: SiteData, shared: LoadModel, local_fit: LoadModel) -> float:
    """Personalisation by blending: the weight of ``shared`` in w·shared + (1-w)·local.

    Chosen on the validation slice from a grid of 0, 0.1, ..., 1, with ``local_fit`` a local
    model trained on the train part before that slice (the test part is never looked at).
    """
    val = split_point(d.cut, VAL_FRACTION)
    x, level = d.x[val : d.cut], d.level[val : d.cut]
    truth = d.y[val : d.cut] * level
    a, b = shared.predict(x) * level, local_fit.predict(x) * level

    def err(w: float) -> float:
        return float(np.mean(np.abs(np.maximum(w * a + (1 - w) * b, 0.0) - truth)))

    return min((i / 10 for i in range(11)), key=err)


def evaluate(
    sites: list[Site], settings: RoundSettings, finetune_epochs: int = FINETUNE_EPOCHS
) -> Report:
    """Every method on every site; models see each site's train part only."""
    data = prepare(sites, settings)
    spec = settings.spec
    season = round(spec.period_s / sites[0].bucket_s)
    epochs = settings.num_rounds * settings.local_epochs
    cfg = TrainConfig(epochs=epochs, lr=settings.lr, seed=settings.seed)
    preds: dict[str, dict[str, FloatArray]] = {m: {} for m in (*NAIVE, "local_only", *LEARNED)}
    tune = replace(cfg, epochs=finetune_epochs)
    report_weights: dict[str, float] = {}
    ditto_choice: dict[str, tuple[float, int]] = {}
    fed = run_fedavg(sites, settings)
    central = model_for(spec.n_features, spec.window, settings.hidden, settings.seed)
    central.fit(
        np.concatenate([d.x[: d.cut] for d in data]),
        np.concatenate([d.y[: d.cut] for d in data]),
        cfg,
    )
    for d in data:
        local = model_for(spec.n_features, spec.window, settings.hidden, settings.seed)
        local.fit(d.x[: d.cut], d.y[: d.cut], cfg)
        preds["local_only"][d.name] = _model_preds(local, d)
        preds["centralized"][d.name] = _model_preds(central, d)
        preds["fedavg"][d.name] = _model_preds(fed, d)
        tuned = fine_tuned(fed, d, tune)
        preds["fedavg_finetuned"][d.name] = _model_preds(tuned, d)
        local_fit = model_for(spec.n_features, spec.window, settings.hidden, settings.seed)
        val = split_point(d.cut, VAL_FRACTION)
        local_fit.fit(d.x[:val], d.y[:val], cfg)
        w = mix_weight(d, tuned, local_fit)
        mixed = w * _model_preds(tuned, d) + (1 - w) * preds["local_only"][d.name]
        preds["fedavg_local_mix"][d.name] = mixed
        report_weights[d.name] = w
        own, mu, own_epochs = ditto(fed, d, cfg, spec.window)
        preds["fedavg_ditto"][d.name] = _model_preds(own, d)
        ditto_choice[d.name] = (mu, own_epochs)
        for m, p in _naive_preds(d, settings, season).items():
            preds[m][d.name] = p
    report = Report([d.name for d in data], mix_weights=report_weights, ditto_choice=ditto_choice)
    for method, by_site in preds.items():
        report.mae[method] = {}
        rel = []
        for d in data:
            truth = d.test_truth()
            mae = float(np.mean(np.abs(by_site[d.name] - truth)))
            report.mae[method][d.name] = mae
            rel.append(mae / max(float(np.mean(np.abs(truth))), spec.floor))
        report.rel_mae[method] = float(np.mean(rel))
    return report
