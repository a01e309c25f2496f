"""Placement uses the load forecast: the real agent, its SQLite telemetry and an ONNX model.

The agent emulates a Jetson AGX Orin, whose two DLA cores are identical, so only the forecast
separates them. The model is restored from ``<data_dir>/predictor`` as a restarted agent would.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlite_utils
from aiohttp.test_utils import TestClient

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.sensing.forecast import recent_window
from edge_agent.agent.web.api import AGENT, make_app
from edge_agent.predictor.features import FeatureSpec, utilization_from_telemetry
from edge_agent.predictor.model import model_for
from edge_agent.predictor.onnx_export import spec_metadata, to_onnx
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate

SPEC = FeatureSpec(window=8, bucket_s=60.0)
DLA = ("jetson_agx_orin/dla0", "jetson_agx_orin/dla1")
TASK = {"semantics": {"gflops": 1.0, "precision": "int8"}, "requirements": {"kinds": ["npu"]}}


def write_samples(db_path: Path, load: dict[str, float], minutes: int, now: float) -> None:
    """Agent-schema telemetry: one utilization sample per device every 20 s, up to ``now``."""
    db = sqlite_utils.Database(db_path)
    migrate(db, MIGRATIONS)
    rows = [
        {"ts": now - 20.0 * i, "kind": "sample", "device": dev, "utilization": u, "emulated": 1}
        for i in range(1, 3 * minutes)
        for dev, u in load.items()
    ]
    db.table("telemetry").insert_all(rows)
    db.close()


def store_model(data_dir: Path, data: bytes) -> None:
    """The files an agent leaves after accepting a model (local_model.LocalModel)."""
    d = data_dir / "predictor"
    d.mkdir(parents=True)
    (d / "model.onnx").write_bytes(data)
    state = {"sha256": hashlib.sha256(data).hexdigest(), "version": 7, "history": []}
    (d / "state.json").write_text(json.dumps(state))


@pytest.mark.asyncio
@pytest.mark.parametrize("busy", [0, 1])
async def test_task_goes_to_the_device_not_forecast_busy(
    aiohttp_client: Any, tmp_path: Path, busy: int
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    now = time.time()
    load = {DLA[busy]: 0.95, DLA[1 - busy]: 0.05}
    write_samples(data_dir / "agent.db", load, minutes=20, now=now)
    model = model_for(SPEC.n_features, SPEC.window)  # starts as last value (a valid model)
    store_model(data_dir, to_onnx(model, metadata=spec_metadata(SPEC)))
    config = AgentConfig(
        data_dir=data_dir,
        port=0,
        profile="jetson_agx_orin",
        telemetry_interval_s=3600.0,  # no fresh samples during the test
        shutdown_grace_s=0.0,
    )
    client: TestClient[Any, Any] = await aiohttp_client(make_app(config))
    assert client.app is not None
    agent = client.app[AGENT]
    assert agent.learning is not None
    assert agent.learning.local.model_version == 7  # restored from disk, no hub involved
    fc = agent.learning.forecasts
    for _ in range(200):  # the first tick runs as the agent starts
        if fc.ticks:
            break
        await asyncio.sleep(0.01)
    assert {d: fc.last[d]["source"] for d in DLA} == {DLA[0]: "model", DLA[1]: "model"}
    live = {d: agent.placer.live(d)["predicted_utilization"] for d in DLA}
    assert live[DLA[busy]] > 0.8 and live[DLA[1 - busy]] < 0.2

    resp = await client.post("/v1/tasks", json=TASK)
    assert resp.status == 202, await resp.text()
    task_id = (await resp.json())["task"]["id"]
    for _ in range(500):
        doc = await (await client.get(f"/v1/tasks/{task_id}")).json()
        if doc["task"]["state"] == "done":
            break
        await asyncio.sleep(0.01)
    assert doc["task"]["state"] == "done"
    decision = await (await client.get(f"/v1/tasks/{task_id}/explain")).json()
    assert decision["devices"] == [DLA[1 - busy]]
    why = decision["why_not"][DLA[busy]]  # feasible, just forecast busy (not rejected)
    assert "runner-up" in why or "was feasible but scored worse" in why, why
    health = await (await client.get("/v1/health")).json()
    assert health["predictor"]["model"]["version"] == 7


def test_utilization_series_buckets_means_and_carries_gaps(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    d = sqlite_utils.Database(db)
    migrate(d, MIGRATIONS)
    rows = [(0.0, 0.2), (30.0, 0.4), (61.0, 1.0), (200.0, 0.5)]  # bucket 2 has no sample
    d.table("telemetry").insert_all(
        {"ts": 6000.0 + t, "kind": "sample", "device": "x", "utilization": u} for t, u in rows
    )
    d.table("telemetry").insert({"ts": 6001.0, "kind": "task", "device": "x", "latency_s": 1.0})
    d.close()
    t0, series = utilization_from_telemetry(str(db), 60.0, "x")
    assert t0 == 6000.0
    np.testing.assert_allclose(series, [0.3, 1.0, 1.0, 0.5])
    w = recent_window(db, "x", FeatureSpec(window=2, bucket_s=60.0), now=6000.0 + 250.0)
    assert w is not None  # 4 complete buckets by then; the last window is buckets 2..3
    np.testing.assert_allclose(w[0], [1.0, 0.5])
    assert w[1] == 6000.0 + 60.0 * 4
    assert recent_window(db, "nope", FeatureSpec(window=2, bucket_s=60.0), now=6250.0) is None
