"""Ditto personalisation: a site's own model pulled towards the global one (Li et al. 2021).

One implementation for the hub's evaluation harness (``cloud_hub.learning.evaluation``) and
the agent (``edge_agent.agent.hub.model_pull``): a fresh model, started as local-only starts, is
trained on the site's older windows with the proximal term mu/2 · ‖w − w_global‖²; mu and the
epoch count are chosen together on a validation slice (the newest VAL_FRACTION of each
series' training windows). Nothing newer than the training windows is looked at here: the
agent's gate and the harness's test part stay unseen.

On the agent, ``personalise`` splits each device's recent utilization into older buckets (for
training and the choice) and the newest ones (``GATE_FRACTION``, for the gate), trains, and
exports the chosen model to ONNX with the same exporter as the hub's models, its provenance
(global model, mu, epochs) in the metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from edge_agent.errors import InvalidInput
from edge_agent.predictor.baselines import rel_mae
from edge_agent.predictor.features import FeatureSpec, device_datasets, split_point
from edge_agent.predictor.model import LoadModel, TrainConfig, model_for
from edge_agent.predictor.onnx_export import digest, from_onnx, spec_metadata, to_onnx

FloatArray = NDArray[np.float64]
#: A chronological (features, normalized target, level) dataset, oldest window first.
Part = tuple[FloatArray, FloatArray, FloatArray]
#: A device's utilization series and the time its first bucket starts.
Series = tuple[FloatArray, float]

VAL_FRACTION = 0.2  # newest part of the training windows that picks mu and epochs
DITTO_MUS = (0.01, 0.1, 1.0)  # proximal weights Ditto chooses from on validation
#: The agent's budget: epochs (the harness's 30 rounds x 1 epoch), learning rate as the
#: ClientApp's default, seed as local-only's.
AGENT_TRAIN = TrainConfig(epochs=30, lr=0.02, seed=0)
GATE_FRACTION = 0.3  # newest part of each device's windows kept for the gate (ClientApp: 30 %)
#: Fewest older windows (all devices together) worth training an own model on, and never
#: fewer than the model has weights: below that a fresh model is underdetermined and its
#: validation slice too small to choose mu and epochs, so the agent judges the global model
#: alone.
MIN_TRAIN_WINDOWS = 128


class TooLittleData(InvalidInput):
    """Not enough older telemetry to train and choose a personalised model."""


def n_weights(model: LoadModel) -> int:
    """How many numbers the model learns."""
    return sum(w.size for w in model.get_weights())


def copy_model(model: LoadModel) -> LoadModel:
    """An independent copy of a model."""
    out = LoadModel(model.n_features, model.hidden)
    out.set_weights(model.get_weights())
    return out


def _split(parts: Sequence[Part], val_fraction: float) -> tuple[Part, Part]:
    """Each part's older windows (fit) and its newest ``val_fraction`` (validation), pooled."""
    fit: list[Part] = []
    val: list[Part] = []
    for x, y, level in parts:
        cut = split_point(x.shape[0], val_fraction)
        fit.append((x[:cut], y[:cut], level[:cut]))
        val.append((x[cut:], y[cut:], level[cut:]))

    def pooled(ps: list[Part]) -> Part:
        return (
            np.concatenate([p[0] for p in ps]),
            np.concatenate([p[1] for p in ps]),
            np.concatenate([p[2] for p in ps]),
        )

    return pooled(fit), pooled(val)


def early_stopped(
    model: LoadModel,
    parts: Sequence[Part],
    cfg: TrainConfig,
    anchor: list[FloatArray] | None = None,
    prox: float = 0.0,
    val_fraction: float = VAL_FRACTION,
) -> tuple[LoadModel, float, int]:
    """Train a copy of ``model`` up to cfg.epochs on the windows before each validation slice.

    The newest ``val_fraction`` of each part scores the model (relative MAE, pooled) after
    every epoch and before the first; returns the best (model, validation rel. MAE, epochs).
    """
    if not parts:
        raise TooLittleData("no training windows")
    (fit_x, fit_y, _), (val_x, val_y, val_level) = _split(parts, val_fraction)

    floor = FeatureSpec().floor

    def val_mae(m: LoadModel) -> float:
        return rel_mae(np.maximum(m.predict(val_x), 0.0) * val_level, val_y * val_level, floor)

    model = copy_model(model)
    best, best_mae, best_epochs = model.get_weights(), val_mae(model), 0
    for epoch in range(cfg.epochs):
        model.fit(fit_x, fit_y, replace(cfg, epochs=1, seed=cfg.seed + epoch), anchor, prox)
        if (mae := val_mae(model)) < best_mae:
            best, best_mae, best_epochs = model.get_weights(), mae, epoch + 1
    model.set_weights(best)
    return model, best_mae, best_epochs


@dataclass(frozen=True)
class DittoChoice:
    """A personalised model and what validation chose for it."""

    model: LoadModel
    mu: float
    epochs: int
    val_rel_mae: float


def ditto(
    global_model: LoadModel,
    parts: Sequence[Part],
    cfg: TrainConfig,
    window: int,
    mus: tuple[float, ...] = DITTO_MUS,
    val_fraction: float = VAL_FRACTION,
) -> DittoChoice:
    """A fresh model pulled towards ``global_model``; mu and epochs chosen on validation.

    Trained on each part's windows before its validation slice with the proximal term
    mu/2 · ‖w − w_global‖²; mu from ``mus`` and the epoch count (up to cfg.epochs) are chosen
    together on the validation slices (ties: the first, smallest mu).
    """
    if not mus or any(not mu > 0.0 for mu in mus):
        raise InvalidInput(f"Ditto needs proximal weights > 0, got {mus}")
    anchor = global_model.get_weights()
    start = model_for(global_model.n_features, window, global_model.hidden, cfg.seed)
    tried = [(*early_stopped(start, parts, cfg, anchor, mu, val_fraction), mu) for mu in mus]
    model, val_mae, epochs, mu = min(tried, key=lambda t: t[1])
    return DittoChoice(model, mu, epochs, val_mae)


def split_for_gate(
    series: Sequence[Series], spec: FeatureSpec, gate_fraction: float = GATE_FRACTION
) -> tuple[list[Series], list[Series]]:
    """Each device's series cut into older buckets (training, choice) and the gate's newest.

    Of each series' forecast windows the newest ``gate_fraction`` go to the gate: the older
    series ends with the target of the last training window, the gate's series starts so that
    its first window's target is the bucket after it. Gate windows read older buckets as input,
    but no training window or choice ever sees a gate target. Series too short for two windows
    go to the gate whole.
    """
    span = spec.window + spec.horizon - 1  # buckets before a window's target
    older: list[Series] = []
    gate: list[Series] = []
    for values, t0 in series:
        v = np.asarray(values, dtype=np.float64)
        windows = v.shape[0] - span
        if windows < 2:
            gate.append((v, t0))
            continue
        cut = split_point(windows, gate_fraction)  # first gate window
        older.append((v[: cut + span], t0))
        gate.append((v[cut:], t0 + spec.bucket_s * cut))
    return older, gate


@dataclass(frozen=True)
class Personalised:
    """The agent's personalised candidate: ONNX bytes and its provenance."""

    data: bytes
    global_sha256: str
    mu: float
    epochs: int
    val_rel_mae: float
    windows: int  # older windows it was trained and chosen on

    def provenance(self) -> dict[str, object]:
        """What the agent records about it (state.json, its report)."""
        return {
            "personalised": True,
            "global_sha256": self.global_sha256,
            "mu": self.mu,
            "epochs": self.epochs,
            "val_rel_mae": self.val_rel_mae,
            "train_windows": self.windows,
        }


def personalise(
    global_data: bytes,
    older: Sequence[Series],
    spec: FeatureSpec,
    cfg: TrainConfig = AGENT_TRAIN,
    min_windows: int = MIN_TRAIN_WINDOWS,
) -> Personalised:
    """Ditto on the agent's older telemetry (``split_for_gate``'s first part), as ONNX.

    Raises TooLittleData (saying how many windows there are and how many it needs) when the
    older series hold fewer than ``min_windows`` forecast windows or fewer than the model has
    weights, InvalidInput when the global model cannot be read.
    """
    global_model = from_onnx(global_data)
    if global_model.n_features != spec.n_features:
        raise InvalidInput(
            f"global model has {global_model.n_features} features, the agent feeds "
            f"{spec.n_features}"
        )
    parts = [p for p in device_datasets(older, spec) if p[0].shape[0] >= 2]
    windows = sum(p[0].shape[0] for p in parts)
    need = max(min_windows, n_weights(global_model))
    if windows < need:
        raise TooLittleData(
            f"{windows} older windows, need {need} (at least {min_windows} and the model's "
            f"{n_weights(global_model)} weights)"
        )
    choice = ditto(global_model, parts, cfg, spec.window)
    sha = digest(global_data)
    meta = {
        **spec_metadata(spec),
        "hetmesh.personalised": "true",
        "hetmesh.global_sha256": sha,
        "hetmesh.mu": repr(choice.mu),
        "hetmesh.epochs": str(choice.epochs),
    }
    data = to_onnx(choice.model, name="hetmesh-load-predictor-personalised", metadata=meta)
    return Personalised(data, sha, choice.mu, choice.epochs, choice.val_rel_mae, windows)
