"""The agent's per-call path (FastPredictor) against onnxruntime, and the pooled validation gate."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from edge_agent.errors import InvalidInput
from edge_agent.predictor.features import FeatureSpec, make_features
from edge_agent.predictor.model import model_for
from edge_agent.predictor.onnx_export import spec_metadata, to_onnx
from edge_agent.predictor.runtime import NOT_ENOUGH_DATA, Forecaster, OrtPredictor

SPEC = FeatureSpec(window=12, bucket_s=60.0, period_s=3600.0)


def trained_like(seed: int) -> bytes:
    """A model with every weight non-trivial (random), so each path of the graph matters."""
    model = model_for(SPEC.n_features, SPEC.window, hidden=8, seed=seed)
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0.0, 0.3, w.shape) for w in model.get_weights()])
    return to_onnx(model, metadata=spec_metadata(SPEC))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_path_matches_onnxruntime_on_the_same_features(seed: int) -> None:
    ort = OrtPredictor(trained_like(seed))
    fc = Forecaster(SPEC)
    fc.current = ort
    rng = np.random.default_rng(100 + seed)
    for scale in (1e-5, 0.3, 1.0, 250.0):  # 1e-5: the level is the floor
        for _ in range(20):
            window = rng.random(SPEC.window) * scale
            t = float(rng.uniform(0, 1e6))
            x, level = make_features(window, t, SPEC)
            want = max(float(ort.predict_norm(x[None, :])[0]) * level, 0.0)
            got, source = fc.forecast(window, t)
            assert source == "model"
            assert got == pytest.approx(want, rel=1e-4, abs=1e-6 * max(level, 1.0))


def test_fast_path_refuses_bad_windows_and_ewma_is_used_without_a_model() -> None:
    fc = Forecaster(SPEC)
    window = np.linspace(0.1, 0.9, SPEC.window)
    value, source = fc.forecast(window, 0.0)
    assert source == "ewma" and 0.1 < value < 0.9
    fc.current = OrtPredictor(trained_like(0))
    bad = window.copy()
    bad[3] = np.nan
    with pytest.raises(InvalidInput, match="non-finite"):
        fc.forecast(bad, 0.0)
    with pytest.raises(InvalidInput, match="12 values"):
        fc.forecast(window[:5], 0.0)


def test_a_graph_other_than_the_exported_one_is_refused() -> None:
    proto = onnx.load_from_string(trained_like(0))
    proto.graph.node[4].op_type = "Sigmoid"  # Relu -> Sigmoid: valid ONNX, different model
    with pytest.raises(InvalidInput, match="not the exported load-model graph"):
        OrtPredictor(proto.SerializeToString())


def test_pooled_validation_scores_every_long_enough_series() -> None:
    i = np.arange(200)
    a = 0.5 + 0.4 * np.sin(2 * np.pi * i / 8)
    last_value = to_onnx(model_for(SPEC.n_features, SPEC.window), metadata=spec_metadata(SPEC))
    fc = Forecaster(SPEC)
    short = (a[:5], 0.0)
    both = fc.validate_many(last_value, [(a, 0.0), (a[::-1].copy(), 0.0), short])
    one = fc.validate_many(last_value, [(a, 0.0)])
    assert "376 forecasts" in both.reason and "188 forecasts" in one.reason  # 200 - 12 each
    nothing = fc.validate_many(last_value, [short])
    assert not nothing.accepted and nothing.reason.startswith(NOT_ENOUGH_DATA)
