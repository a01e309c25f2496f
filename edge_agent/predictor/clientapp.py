"""Flower ClientApp: trains and evaluates the load model on this box's own data only."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import cast

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from edge_agent.errors import InvalidInput
from edge_agent.predictor import baselines
from edge_agent.predictor.features import (
    FeatureSpec,
    FloatArray,
    make_dataset,
    series_from_telemetry,
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


def local_series(node_config: Mapping[str, object], spec: FeatureSpec) -> tuple[float, FloatArray]:
    """This node's load series: the agent's SQLite telemetry, or a series file (.npz)."""
    if "telemetry-db" in node_config:
        return series_from_telemetry(str(node_config["telemetry-db"]), spec.bucket_s)
    if "series-npz" in node_config:
        path = str(node_config["series-npz"])
        try:
            with np.load(path) as data:
                return float(data["t0"]), np.asarray(data["series"], dtype=np.float64)
        except (OSError, KeyError, ValueError) as err:
            raise InvalidInput(f"cannot read series file {path}: {err}") from err
    raise InvalidInput("node config needs 'telemetry-db' (agent SQLite) or 'series-npz'")


def _local_data(
    context: Context, msg_config: Mapping[str, object]
) -> tuple[FeatureSpec, FloatArray, FloatArray, FloatArray, int]:
    """Features, normalized targets, levels and the holdout split point for this node."""
    spec = spec_from_config({**dict(context.run_config), **msg_config})
    t0, series = local_series(dict(context.node_config), spec)
    x, y, level = make_dataset(series, t0, spec)
    cut = split_point(x.shape[0], float(cast(float, msg_config.get("holdout", 0.3))))
    return spec, x, y, level, cut


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Start from the global weights, run local SGD epochs, reply weights and metrics."""
    cfg: dict[str, object] = dict(msg.content.config_records["config"])
    spec, x, y, _, cut = _local_data(context, cfg)
    model = model_for(spec.n_features, spec.window, hidden=int(cast(int, cfg.get("hidden", 16))))
    model.set_weights(msg.content.array_records["arrays"].to_numpy_ndarrays())
    tc = TrainConfig(
        epochs=int(cast(int, cfg.get("local-epochs", 2))),
        lr=float(cast(float, cfg.get("lr", 0.02))),
        seed=int(cast(int, cfg.get("server-round", 0))) * 7919 + int(context.node_id) % 7919,
    )
    train_mae = model.fit(x[:cut], y[:cut], tc)
    log.info("node %s trained on %d windows, MAE %.4f", context.node_id, cut, train_mae)
    reply = RecordDict(
        {
            "arrays": ArrayRecord(model.get_weights()),
            "metrics": MetricRecord({"train_mae_norm": train_mae, "num-examples": cut}),
        }
    )
    return Message(content=reply, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Score the global weights and EWMA on this node's most recent holdout slice."""
    cfg: dict[str, object] = dict(msg.content.config_records["config"])
    spec, x, y, level, cut = _local_data(context, cfg)
    model = model_for(spec.n_features, spec.window, hidden=int(cast(int, cfg.get("hidden", 16))))
    model.set_weights(msg.content.array_records["arrays"].to_numpy_ndarrays())
    truth = y[cut:] * level[cut:]
    pred = np.maximum(model.predict(x[cut:]) * level[cut:], 0.0)
    ewma = baselines.ewma(x[cut:, : spec.window] * level[cut:, None])
    scale = max(float(np.mean(np.abs(truth))), spec.floor)
    metrics = MetricRecord(
        {
            "eval_rel_mae": float(np.mean(np.abs(pred - truth))) / scale,
            "ewma_rel_mae": float(np.mean(np.abs(ewma - truth))) / scale,
            "num-examples": int(truth.shape[0]),
        }
    )
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
