"""The agent personalises a pulled model (Ditto) on its own telemetry before its gate judges both.

Real ONNX models scored by onnxruntime in the agent's gate, real agent-schema SQLite telemetry,
and (last test) a real hub and agent on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import sqlite_utils
from aiohttp import web

from cloud_hub.hub.api import make_app as hub_app
from cloud_hub.hub.config import HubConfig
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.hub.local_model import MODEL_FILE, STATE_FILE, LocalModel
from edge_agent.agent.hub.model_candidates import (
    personal_candidate,
    personalise_buckets,
    recent_series,
)
from edge_agent.agent.web.api import AGENT
from edge_agent.agent.web.api import make_app as agent_app
from edge_agent.predictor.features import FeatureSpec, make_dataset
from edge_agent.predictor.model import TrainConfig, model_for
from edge_agent.predictor.onnx_export import read_metadata, spec_metadata, to_onnx
from edge_agent.predictor.personalise import split_for_gate
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate

SPEC = FeatureSpec(window=8, bucket_s=60.0)
DEVICES = ("rk3588/cpu", "rk3588/npu")
Series = list[tuple[np.ndarray[Any, Any], float]]


def fleet_model() -> bytes:
    """The fleet's model: trained on smooth 8-minute cycles (other sites' load)."""
    xs, ys = [], []
    for phase in (0.3, 1.7, 2.9):
        i = np.arange(400)
        x, y, _ = make_dataset(0.5 + 0.4 * np.sin(2 * math.pi * i / 8 + phase), 0.0, SPEC)
        xs.append(x)
        ys.append(y)
    model = model_for(SPEC.n_features, SPEC.window, hidden=8)
    model.fit(np.concatenate(xs), np.concatenate(ys), TrainConfig(epochs=40, lr=0.05))
    return to_onnx(model, metadata=spec_metadata(SPEC))


def site_load(n: int, seed: int) -> np.ndarray[Any, Any]:
    """This site's load, unlike the fleet's: a 6-minute ramp that drops back to idle."""
    i = np.arange(n)
    noise = 0.02 * np.random.default_rng(seed).standard_normal(n)
    return np.asarray(np.clip(0.1 + 0.15 * (i % 6) + noise, 0.0, 1.0))


def write_telemetry(db_path: Path, now: float, buckets: int) -> None:
    """One utilization sample per device in the middle of each of the last ``buckets`` minutes."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite_utils.Database(db_path)
    migrate(db, MIGRATIONS)
    last = math.floor(now / 60.0) - 1
    idx = np.arange(last - buckets + 1, last + 1)
    rows = [
        {"ts": 60.0 * i + 30.0, "kind": "sample", "device": dev, "utilization": float(u)}
        for k, dev in enumerate(DEVICES)
        for i, u in zip(idx, site_load(buckets, k), strict=True)
    ]
    db.table("telemetry").insert_all(rows)
    db.close()


def telemetry(tmp_path: Path, buckets: int) -> Series:
    """The series the agent reads for personalisation from a real agent database."""
    now = time.time()
    db = tmp_path / "agent.db"
    write_telemetry(db, now, buckets)
    return recent_series(db, DEVICES, SPEC, now, personalise_buckets(len(DEVICES)))


def test_a_site_unlike_the_fleet_adopts_its_personalised_model(tmp_path: Path) -> None:
    data = fleet_model()
    series = telemetry(tmp_path, 480)
    personal, gate, note = personal_candidate(data, series, SPEC)
    assert personal is not None and note == ""
    local = LocalModel(tmp_path / "predictor", SPEC)
    verdict = local.offer(data, 3, gate, personal, note)

    row = local.history[-1]
    assert verdict.accepted and row["accepted"] and row["personalised"] is True
    assert row["reason"].startswith(f"personalised (Ditto mu {personal.mu:g}, ")
    assert "candidate rel. MAE" in row["reason"]
    assert row["personalised_rel_mae"] * 1.02 < row["global_rel_mae"]  # clearly better, same gate
    assert row["candidate_rel_mae"] == row["personalised_rel_mae"] < row["ewma_rel_mae"]
    sha = hashlib.sha256(data).hexdigest()
    assert (
        row["global_sha256"] == sha and row["sha256"] == hashlib.sha256(personal.data).hexdigest()
    )
    assert (row["mu"], row["epochs"]) == (personal.mu, personal.epochs)
    assert 1 <= personal.epochs <= 30 and personal.mu in (0.01, 0.1, 1.0)
    meta = read_metadata(personal.data)
    assert meta["hetmesh.personalised"] == "true" and meta["hetmesh.global_sha256"] == sha

    # persisted with its provenance, restored from disk, reported, not pulled again
    assert (tmp_path / "predictor" / MODEL_FILE).read_bytes() == personal.data
    state = json.loads((tmp_path / "predictor" / STATE_FILE).read_text())
    assert state["accepted"]["personalised"] is True and state["accepted"]["global_sha256"] == sha
    restored = LocalModel(tmp_path / "predictor", SPEC)
    restored.load()
    assert restored.sha256 == row["sha256"] and restored.global_sha256 == sha
    report = restored.report()
    assert report["personalised"] is True and report["version"] == 3
    assert restored.forecaster.forecast(np.full(SPEC.window, 0.3), 0.0)[1] == "model"


def test_too_little_data_judges_the_global_model_alone(tmp_path: Path) -> None:
    data = fleet_model()
    series = telemetry(tmp_path, 60)
    personal, gate, note = personal_candidate(data, series, SPEC)
    assert personal is None
    assert note.startswith("too little data to personalise: ") and "older windows, need" in note
    assert [len(v) for v, _ in gate] == [len(v) for v, _ in series]  # the whole recent series
    local = LocalModel(tmp_path / "predictor", SPEC)
    local.offer(data, 1, gate, personal, note)
    row = local.history[-1]
    assert row["personalised"] is False and row["sha256"] == row["global_sha256"]
    assert row["reason"].startswith("global model only (too little data to personalise: ")
    assert "candidate rel. MAE" in row["reason"] and "mu" not in row


def test_the_choice_never_sees_the_gate_slice(tmp_path: Path) -> None:
    data = fleet_model()
    series = telemetry(tmp_path, 480)
    older, gate = split_for_gate(series, SPEC)
    span = SPEC.window + SPEC.horizon - 1
    for (o, o_t0), (_, g_t0) in zip(older, gate, strict=True):
        last_trained_target = o_t0 + SPEC.bucket_s * (len(o) - 1)
        first_gate_target = g_t0 + SPEC.bucket_s * span
        assert first_gate_target == last_trained_target + SPEC.bucket_s
    base, base_gate, _ = personal_candidate(data, series, SPEC)
    assert base is not None

    # the gate's targets replaced by noise: the personalised model and its mu/epochs stay
    rng = np.random.default_rng(7)
    changed = []
    for (values, t0), (o, _) in zip(series, older, strict=True):
        v = values.copy()
        v[len(o) :] = rng.uniform(0.0, 1.0, len(v) - len(o))
        changed.append((v, t0))
    again, again_gate, _ = personal_candidate(data, changed, SPEC)
    assert again is not None
    assert not np.array_equal(again_gate[0][0], base_gate[0][0])  # the gate did change
    assert (again.mu, again.epochs, again.val_rel_mae) == (base.mu, base.epochs, base.val_rel_mae)
    assert again.data == base.data

    # whereas the last bucket before the gate (a validation target) does change the choice's
    # figures: the comparison above can fail
    touched = [(v.copy(), t0) for v, t0 in series]
    touched[0][0][len(older[0][0]) - 1] += 0.5
    other, _, _ = personal_candidate(data, touched, SPEC)
    assert other is not None and other.val_rel_mae != base.val_rel_mae


Until = Callable[..., Awaitable[Any]]


@pytest.mark.asyncio
async def test_an_agent_pulls_personalises_and_reports_it(
    until: Until,
    hub_config: Callable[..., HubConfig],
    joined_agent: Callable[..., AgentConfig],
) -> None:
    hub_cfg = hub_config(heartbeat_interval_s=0.1)
    runners: list[web.AppRunner] = []

    async def serve(app: web.Application) -> str:
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    try:
        hub_url = await serve(hub_app(hub_cfg))
        agent_cfg = joined_agent(hub_url, "a1", telemetry_interval_s=3600.0)
        write_telemetry(agent_cfg.db_path, time.time(), 480)
        agent = agent_app(agent_cfg)
        await serve(agent)
        learning = agent[AGENT].learning
        assert learning is not None
        data = fleet_model()
        body = {"onnx_base64": base64.b64encode(data).decode(), "metrics": {"eval_rel_mae": 0.1}}
        auth = {"Authorization": f"Bearer {hub_cfg.admin_token}"}
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{hub_url}/v1/models", json=body, headers=auth) as resp:
                assert resp.status == 201
            await until(lambda: learning.local.model_version == 1)
            row = learning.local.history[-1]
            assert row["personalised"] is True and row["reason"].startswith("personalised")
            assert learning.local.global_sha256 == hashlib.sha256(data).hexdigest()

            async def reported() -> Any:
                async with s.get(f"{hub_url}/v1/learning") as resp:
                    model = (await resp.json())["agents"].get("a1", {}).get("model") or {}
                return model if model.get("version") == 1 else None

            model = await until(reported)
            assert model["personalised"] is True
            assert model["last_verdict"]["reason"].startswith("personalised (Ditto mu ")
            puller = learning.puller
            assert puller is not None
            polls = puller.polls
            await until(lambda: puller.polls >= polls + 3)
            assert len(learning.local.history) == 1  # its source model is not pulled again
    finally:
        for runner in reversed(runners):
            await runner.cleanup()
