"""Predictor: features, baselines, numpy model, ONNX export parity and the validation gate."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import onnx
import pytest

from edge_agent.errors import InvalidInput
from edge_agent.predictor import baselines
from edge_agent.predictor.features import (
    FeatureSpec,
    device_series,
    make_dataset,
    make_features,
    sampled_devices,
    series_from_intervals,
    utilization_from_telemetry,
)
from edge_agent.predictor.model import TrainConfig, model_for
from edge_agent.predictor.onnx_export import IR_VERSION, OPSET, spec_metadata, to_onnx
from edge_agent.predictor.runtime import Forecaster, OrtPredictor

SPEC = FeatureSpec(window=12, bucket_s=60.0, period_s=1440.0)


def _daily_series(n: int = 600, seed: int = 0) -> np.ndarray:
    """A periodic load with noise: what a busy device looks like over a few 'days'."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 5.0 + 3.0 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.3, n)


def _trained(series: np.ndarray, epochs: int = 20):  # type: ignore[no-untyped-def]
    x, y, _ = make_dataset(series, 0.0, SPEC)
    m = model_for(SPEC.n_features, SPEC.window, hidden=8)
    m.fit(x, y, TrainConfig(epochs=epochs, lr=0.02))
    return m


def test_series_from_intervals_is_time_weighted() -> None:
    s = series_from_intervals(
        np.array([0.0, 30.0]), np.array([90.0, 60.0]), np.array([1.0, 2.0]), 0.0, 120.0, 60.0
    )
    assert s.tolist() == pytest.approx([1.0 + 1.0, 0.5])


def test_features_match_dataset_rows() -> None:
    series = _daily_series(50)
    x, y, level = make_dataset(series, 0.0, SPEC)
    row, lvl = make_features(series[3 : 3 + SPEC.window], 60.0 * (3 + SPEC.window), SPEC)
    assert np.allclose(row, x[3]) and lvl == pytest.approx(level[3])
    assert y[3] * level[3] == pytest.approx(series[3 + SPEC.window])


def test_bad_window_is_refused_with_its_shape() -> None:
    with pytest.raises(InvalidInput, match="window must have 12"):
        make_features(np.zeros(5), 0.0, SPEC)


def test_baselines() -> None:
    w = np.array([[1.0, 2.0, 3.0, 4.0]])
    assert baselines.last_value(w)[0] == 4.0
    assert baselines.seasonal_naive(w, season=3)[0] == 2.0
    assert baselines.ewma(w, 1.0)[0] == 4.0
    state = None
    for v in w[0]:
        state = baselines.ewma_update(state, float(v))
    assert baselines.ewma(w, 0.5)[0] == pytest.approx(state)


def test_training_beats_ewma_on_periodic_load() -> None:
    series = _daily_series()
    m = _trained(series[:400])
    x, y, level = make_dataset(series[400:], 400 * 60.0, SPEC)
    model_mae = np.mean(np.abs(m.predict(x) * level - y * level))
    ewma_mae = np.mean(np.abs(baselines.ewma(x[:, :12] * level[:, None]) - y * level))
    assert model_mae < 0.8 * ewma_mae


def test_onnx_export_matches_numpy_within_1e5() -> None:
    m = _trained(_daily_series())
    data = to_onnx(m, metadata=spec_metadata(SPEC))
    proto = onnx.load_from_string(data)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.ir_version == IR_VERSION and proto.opset_import[0].version == OPSET
    x, _, _ = make_dataset(_daily_series(200, seed=3), 0.0, SPEC)
    ort_out = OrtPredictor(data).predict_norm(x)
    assert np.max(np.abs(ort_out - m.predict(x))) < 1e-5


def test_gate_accepts_good_refuses_degraded_and_keeps_old(tmp_path: Path) -> None:
    series = _daily_series()
    good = to_onnx(_trained(series[:400]), metadata=spec_metadata(SPEC))
    fc = Forecaster(SPEC)
    window = series[-12:]
    assert fc.forecast(window, 0.0)[1] == "ewma"
    assert fc.offer(good, series[400:], 400 * 60.0).accepted
    assert fc.forecast(window, 0.0)[1] == "model"
    kept = fc.version
    bad_model = _trained(series[:400])
    bad_model.set_weights([w * 3.0 for w in bad_model.get_weights()])
    verdict = fc.offer(to_onnx(bad_model, metadata=spec_metadata(SPEC)), series[400:], 400 * 60.0)
    assert not verdict.accepted and verdict.candidate_rel_mae > verdict.ewma_rel_mae
    assert fc.version == kept


def test_gate_refuses_garbage_and_foreign_spec() -> None:
    fc = Forecaster(SPEC)
    series = _daily_series(100)
    assert "unusable" in fc.validate(b"not onnx", series, 0.0).reason
    other = FeatureSpec(window=12, bucket_s=30.0, period_s=1440.0)
    data = to_onnx(model_for(SPEC.n_features, 12), metadata=spec_metadata(other))
    verdict = fc.offer(data, series, 0.0)
    assert not verdict.accepted and "differs" in verdict.reason and fc.version is None


def test_device_series_from_agent_telemetry_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE telemetry (id INTEGER PRIMARY KEY, ts REAL, kind TEXT, device TEXT, "
        "utilization REAL, latency_s REAL)"
    )
    con.executemany(
        "INSERT INTO telemetry (ts, kind, device, utilization, latency_s) VALUES (?, ?, ?, ?, ?)",
        [
            (70.0, "sample", "gpu0", 0.2, None),
            (100.0, "sample", "gpu0", 0.4, None),
            (250.0, "sample", "gpu0", 0.8, None),  # bucket 180..240 has no sample
            (100.0, "sample", "cpu0", 0.5, None),
            (90.0, "task", "npu0", None, 30.0),  # task rows are not utilization
        ],
    )
    con.commit()
    con.close()
    assert sampled_devices(str(db)) == ["cpu0", "gpu0"]
    # without "now": up to the newest sample's bucket, which may still be filling
    [(gpu, t0)] = device_series(str(db), 60.0, ["gpu0", "npu0"])
    assert t0 == 60.0 and gpu.tolist() == pytest.approx([0.3, 0.3, 0.3])
    # with "now": complete buckets before it, the last value carried over a silent stretch
    found = device_series(str(db), 60.0, now=420.0)
    cpu, gpu = [s.tolist() for s, _ in found]
    assert cpu == [0.5] * 6 and gpu == pytest.approx([0.3, 0.3, 0.3, 0.8, 0.8, 0.8])
    with pytest.raises(InvalidInput, match="no utilization samples"):
        utilization_from_telemetry(str(db), 60.0, "npu0")
