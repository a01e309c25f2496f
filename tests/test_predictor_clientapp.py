"""The ClientApp trains on exactly the per-device utilization series the agent forecasts from."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import sqlite_utils

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from flwr.app import Context, RecordDict

from cloud_hub.learning.localgrid import LocalGrid
from cloud_hub.learning.serverapp import RoundSettings, train_federated
from edge_agent.agent.hub.model_candidates import recent_series
from edge_agent.agent.sensing.forecast import recent_window
from edge_agent.errors import InvalidInput
from edge_agent.predictor.clientapp import app as client_app
from edge_agent.predictor.clientapp import local_data
from edge_agent.predictor.features import FeatureSpec, device_datasets, split_point
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate

SPEC = FeatureSpec(window=8, bucket_s=60.0)
DEVICES = ("rk3588/cpu", "rk3588/npu")
T0 = 1_700_000_040.0 - 1_700_000_040.0 % 60.0
MINUTES = 120


def agent_db(path: Path, samples: bool = True) -> Path:
    """Agent-schema telemetry: per-device utilization samples in a cycle, and task rows that
    say something else (every device busy all the time) so the two sources are told apart."""
    db = sqlite_utils.Database(path)
    migrate(db, MIGRATIONS)
    rows = []
    for i in range(MINUTES):
        t = T0 + 60.0 * i
        rows.append({"ts": t + 59.0, "kind": "task", "device": DEVICES[0], "latency_s": 59.0})
        if samples:
            for k, device in enumerate(DEVICES):
                u = 0.5 + 0.4 * math.sin(2 * math.pi * i / 8 + k)
                rows.append({"ts": t + 30.0, "kind": "sample", "device": device, "utilization": u})
    db.table("telemetry").insert_all(rows)
    db.close()
    return path


def context(db: Path) -> Context:
    return Context(
        run_id=1,
        node_id=101,
        node_config={"telemetry-db": str(db)},
        state=RecordDict(),
        run_config={"window": SPEC.window, "bucket-s": SPEC.bucket_s},
    )


def test_client_trains_on_the_agents_per_device_utilization_windows(tmp_path: Path) -> None:
    db = agent_db(tmp_path / "agent.db")
    data = local_data(context(db), {"holdout": 0.3})
    # what the agent's validation gate scores: the same function, bounded by "now"
    now = T0 + 60.0 * (MINUTES - 1) + 45.0  # inside the newest sampled bucket (still filling)
    gate = device_datasets(recent_series(db, DEVICES, SPEC, now), SPEC)
    assert len(gate) == 2
    cuts = [split_point(x.shape[0], 0.3) for x, _, _ in gate]
    np.testing.assert_array_equal(
        data.train_x, np.concatenate([x[:c] for (x, _, _), c in zip(gate, cuts, strict=True)])
    )
    np.testing.assert_array_equal(
        data.test_y * data.test_level,
        np.concatenate([(y * lv)[c:] for (_, y, lv), c in zip(gate, cuts, strict=True)]),
    )
    # targets are sampled utilization (< 0.91), not the task rows' busy fraction (~1.0)
    assert float(np.max(data.test_y * data.test_level)) < 0.91
    # and the forecast loop feeds the model the newest buckets of that same series
    for device, (x, y, lv) in zip(DEVICES, gate, strict=True):
        window = recent_window(db, device, SPEC, now)
        assert window is not None  # the last training row's window, moved on by its target
        newest = np.append(x[-1, 1 : SPEC.window] * lv[-1], y[-1] * lv[-1])
        np.testing.assert_allclose(window[0], newest)


def test_federated_round_on_agent_telemetry_and_no_samples_is_an_error(tmp_path: Path) -> None:
    good = agent_db(tmp_path / "a.db")
    bare = agent_db(tmp_path / "b.db", samples=False)  # task rows only: nothing to learn from
    grid = LocalGrid(
        client_app, {101: {"telemetry-db": str(good)}, 102: {"telemetry-db": str(bare)}}
    )
    _, result = train_federated(grid, RoundSettings(spec=SPEC, num_rounds=1, min_nodes=2))
    assert sorted(set(grid.delivered)) == [101, 102]
    # the node with samples trained and evaluated (the other replied with an error)
    assert float(result.train_metrics_clientapp[1]["train_rel_mae"]) > 0  # type: ignore[arg-type]
    scored = result.evaluate_metrics_clientapp[1]
    assert float(scored["eval_rel_mae"]) < float(scored["ewma_rel_mae"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="no utilization samples"):
        local_data(context(bare), {})
