"""Flower ClientApp: trains and evaluates the load model on this box's own data only.

The data is what the agent forecasts: each device's sampled utilization per bucket
(``features.device_series``), the older part of each series for training, the newest
``holdout`` fraction for evaluation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from edge_agent.errors import InvalidInput
from edge_agent.predictor import baselines
from edge_agent.predictor.features import (
    FeatureSpec,
    FloatArray,
    device_datasets,
    device_series,
    split_point,
)
from edge_agent.predictor.model import TrainConfig, model_for

log = logging.getLogger(__name__)

app = ClientApp()


def spec_from_config(cfg: Mapping[str, object]) -> FeatureSpec:
    """The FeatureSpec a run asks for (run config keys window, horizon, bucket-s, period-s)."""
    return FeatureSpec(
        window=int(cast(int, cfg.get("window", 24))),
        horizon=int(cast(int, cfg.get("horizon", 1))),
        bucket_s=float(cast(float, cfg.get("bucket-s", 60.0))),
        period_s=float(cast(float, cfg.get("period-s", 86400.0))),
    )


def local_series(
    node_config: Mapping[str, object], spec: FeatureSpec
) -> list[tuple[FloatArray, float]]:
    """This node's load series, ``[(series, t0)]``.

    From the agent's SQLite telemetry (``telemetry-db``): every device's sampled utilization,
    built by ``device_series`` exactly as the agent builds what it validates and forecasts on.
    From a series file (``series-npz``, arrays ``t0`` and ``series``): that one series.
    """
    if "telemetry-db" in node_config:
        path = str(node_config["telemetry-db"])
        found = device_series(path, spec.bucket_s)
        if not found:
            raise InvalidInput(f"no utilization samples in {path}")
        return found
    if "series-npz" in node_config:
        path = str(node_config["series-npz"])
        try:
            with np.load(path) as data:
                return [(np.asarray(data["series"], dtype=np.float64), float(data["t0"]))]
        except (OSError, KeyError, ValueError) as err:
            raise InvalidInput(f"cannot read series file {path}: {err}") from err
    raise InvalidInput("node config needs 'telemetry-db' (agent SQLite) or 'series-npz'")


@dataclass(frozen=True)
class LocalData:
    """A node's windows, pooled over its series, split chronologically within each series."""

    spec: FeatureSpec
    train_x: FloatArray
    train_y: FloatArray
    train_level: FloatArray
    test_x: FloatArray
    test_y: FloatArray
    test_level: FloatArray


def local_data(context: Context, msg_config: Mapping[str, object]) -> LocalData:
    """Features and normalized targets for this node: the older part of each series trains."""
    spec = spec_from_config({**dict(context.run_config), **msg_config})
    holdout = float(cast(float, msg_config.get("holdout", 0.3)))
    series = local_series(dict(context.node_config), spec)
    parts = [p for p in device_datasets(series, spec) if len(p[0]) > 1]  # train and test rows
    if not parts:
        raise InvalidInput(
            f"no local series of at least {spec.window + spec.horizon + 1} buckets to train on"
        )
    cuts = [split_point(x.shape[0], holdout) for x, _, _ in parts]

    def pool(i: int, old: bool) -> FloatArray:
        return np.concatenate(
            [p[i][:c] if old else p[i][c:] for p, c in zip(parts, cuts, strict=True)]
        )

    return LocalData(
        spec, pool(0, True), pool(1, True), pool(2, True), pool(0, False), pool(1, False),
        pool(2, False),
    )  # fmt: skip


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Start from the global weights, run local SGD epochs, reply weights and metrics."""
    cfg: dict[str, object] = dict(msg.content.config_records["config"])
    data = local_data(context, cfg)
    spec = data.spec
    model = model_for(spec.n_features, spec.window, hidden=int(cast(int, cfg.get("hidden", 16))))
    model.set_weights(msg.content.array_records["arrays"].to_numpy_ndarrays())
    tc = TrainConfig(
        epochs=int(cast(int, cfg.get("local-epochs", 2))),
        lr=float(cast(float, cfg.get("lr", 0.02))),
        seed=int(cast(int, cfg.get("server-round", 0))) * 7919 + int(context.node_id) % 7919,
    )
    cut = int(data.train_x.shape[0])
    model.fit(data.train_x, data.train_y, tc)
    # the training error in the one unit hub and agents report (baselines.rel_mae)
    level = data.train_level
    pred = np.maximum(model.predict(data.train_x) * level, 0.0)
    train_rel_mae = baselines.rel_mae(pred, data.train_y * level, spec.floor)
    log.info("node %s trained on %d windows, rel. MAE %.4f", context.node_id, cut, train_rel_mae)
    reply = RecordDict(
        {
            "arrays": ArrayRecord(model.get_weights()),
            "metrics": MetricRecord({"train_rel_mae": train_rel_mae, "num-examples": cut}),
        }
    )
    return Message(content=reply, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Score the global weights and EWMA on this node's most recent holdout slice."""
    cfg: dict[str, object] = dict(msg.content.config_records["config"])
    data = local_data(context, cfg)
    spec, level = data.spec, data.test_level
    model = model_for(spec.n_features, spec.window, hidden=int(cast(int, cfg.get("hidden", 16))))
    model.set_weights(msg.content.array_records["arrays"].to_numpy_ndarrays())
    truth = data.test_y * level
    pred = np.maximum(model.predict(data.test_x) * level, 0.0)
    ewma = baselines.ewma(data.test_x[:, : spec.window] * level[:, None])
    metrics = MetricRecord(
        {
            "eval_rel_mae": baselines.rel_mae(pred, truth, spec.floor),
            "ewma_rel_mae": baselines.rel_mae(ewma, truth, spec.floor),
            "num-examples": int(truth.shape[0]),
        }
    )
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
