"""One unit for the load model's error: the hub's and an agent's figures for one model agree.

The hub registers a model with the federated evaluation the ClientApp replies
(``eval_rel_mae``, ``ewma_rel_mae``); the agent reports the verdict of its gate
(``candidate_rel_mae``, ``ewma_rel_mae``). Scored on the same telemetry, the same model must
give the same figure on both paths, and the figure must be MAE ÷ mean observed load.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from cloud_hub.learning.localgrid import LocalGrid
from edge_agent.agent.hub.local_model import LocalModel
from edge_agent.predictor import baselines
from edge_agent.predictor.clientapp import app as client_app
from edge_agent.predictor.features import device_datasets, device_series, split_point
from edge_agent.predictor.model import TrainConfig, model_for
from edge_agent.predictor.onnx_export import spec_metadata, to_onnx
from tests.test_predictor_clientapp import SPEC, agent_db

HOLDOUT = 0.3


def test_hub_and_agent_report_the_same_relative_mae_for_the_same_model(tmp_path: Path) -> None:
    db = agent_db(tmp_path / "agent.db")
    series = device_series(str(db), SPEC.bucket_s)
    parts = device_datasets(series, SPEC)
    model = model_for(SPEC.n_features, SPEC.window, hidden=16, seed=3)
    model.fit(parts[0][0][:40], parts[0][1][:40], TrainConfig(epochs=1, lr=0.02, seed=1))
    onnx = to_onnx(model, metadata=spec_metadata(SPEC))

    # the hub's figure: the ClientApp's federated evaluation of the model on this node
    grid = LocalGrid(client_app, {7: {"telemetry-db": str(db)}})
    config = {"window": SPEC.window, "bucket-s": SPEC.bucket_s, "holdout": HOLDOUT, "hidden": 16}
    content = RecordDict(
        {"arrays": ArrayRecord(model.get_weights()), "config": ConfigRecord(config)}
    )
    [reply] = grid.send_and_receive([grid.create_message(content, "evaluate", 7, "1")])
    hub = reply.content.metric_records["metrics"]

    # the agent's figure: its gate's verdict row, scored on that node's evaluation slice
    cuts = [split_point(x.shape[0], HOLDOUT) for x, _, _ in parts]
    newest = [(s[c:], t0 + SPEC.bucket_s * c) for (s, t0), c in zip(series, cuts, strict=True)]
    local = LocalModel(tmp_path / "predictor", SPEC)
    local.offer(onnx, 1, newest)
    agent = local.history[-1]

    assert agent["candidate_rel_mae"] == pytest.approx(float(hub["eval_rel_mae"]), rel=1e-4)
    assert agent["ewma_rel_mae"] == pytest.approx(float(hub["ewma_rel_mae"]), rel=1e-9)
    assert f"rel. MAE {agent['candidate_rel_mae']:.4g}" in agent["reason"]
    # and the unit is MAE ÷ mean observed load (a fraction), not MAE in load units
    x = np.concatenate([p[0][c:] for p, c in zip(parts, cuts, strict=True)])
    level = np.concatenate([p[2][c:] for p, c in zip(parts, cuts, strict=True)])
    truth = np.concatenate([p[1][c:] for p, c in zip(parts, cuts, strict=True)]) * level
    pred = np.maximum(model.predict(x) * level, 0.0)
    mae = float(np.mean(np.abs(pred - truth)))
    assert float(hub["eval_rel_mae"]) == pytest.approx(mae / float(np.mean(truth)), rel=1e-9)
    assert mae / float(np.mean(truth)) != pytest.approx(mae, rel=0.1)  # the units differ here


def test_rel_mae_is_infinite_for_a_non_finite_forecast() -> None:
    truth = np.array([1.0, 2.0])
    assert baselines.rel_mae(np.array([1.0, np.nan]), truth, 1e-3) == float("inf")
    assert baselines.rel_mae(np.array([1.5, 2.5]), truth, 1e-3) == pytest.approx(0.5 / 1.5)
    assert baselines.rel_mae(np.array([0.01]), np.array([0.0]), 1e-3) == pytest.approx(10.0)
