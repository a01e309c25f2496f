"""Per-prediction latency of the load forecaster: numpy path and onnxruntime path (JSON last).

predict_*_us is Forecaster.forecast with a model loaded, the call the agent makes per device
(edge_agent/agent/sensing/forecast.py): FastPredictor, the validated ONNX initializers in numpy.
ort_run_us is one onnxruntime session run (the validation path), for comparison.
numpy_predict_us is one timed call of features then the numpy model's prediction (the two
steps together, not the sum of their separate percentiles). Every percentile has its
sample count beside it (``*_n``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np

from edge_agent.predictor.features import FeatureSpec, make_features
from edge_agent.predictor.model import model_for
from edge_agent.predictor.onnx_export import spec_metadata, to_onnx
from edge_agent.predictor.runtime import Forecaster, OrtPredictor

N = 20000


def _p(samples: list[float], q: float) -> float:
    """Quantile in microseconds."""
    return float(np.percentile(np.asarray(samples) * 1e6, q))


def main() -> None:
    """Time one forecast at a time, as the agent asks for one device per tick."""
    spec = FeatureSpec(window=48, bucket_s=60.0)
    model = model_for(spec.n_features, spec.window)
    data = to_onnx(model, metadata=spec_metadata(spec))
    ort = OrtPredictor(data)
    fc = Forecaster(spec)
    rng = np.random.default_rng(0)
    window = rng.random(spec.window)
    x, _ = make_features(window, 0.0, spec)
    xb = x[None, :]
    paths: dict[str, Callable[[], object]] = {
        "features_us": lambda: make_features(window, 0.0, spec),
        "numpy_us": lambda: model.predict(xb),
        "numpy_predict_us": lambda: model.predict(make_features(window, 0.0, spec)[0][None, :]),
        "ort_run_us": lambda: ort.predict_norm(xb),
        "ewma_forecast_us": lambda: fc.forecast(window, 0.0),
    }
    out: dict[str, float] = {}
    for name, fn in paths.items():
        _time(out, name, fn)
    fc.current = ort  # the agent's call: FastPredictor on the validated ONNX weights
    _time(out, "predict_us", lambda: fc.forecast(window, 0.0))
    for k, v in out.items():
        print(f"{k:24s} {v:10.2f}")
    print(json.dumps(out))


def _time(out: dict[str, float], name: str, fn: Callable[[], object]) -> None:
    """Time ``fn`` N times one call at a time (after a warm-up); add p50, p99 and the count."""
    for _ in range(500):
        fn()
    samples = []
    for _ in range(N):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    stem = name.removesuffix("_us")
    out[f"{stem}_p50_us"] = round(_p(samples, 50), 2)
    out[f"{stem}_p99_us"] = round(_p(samples, 99), 2)
    out[f"{stem}_n"] = len(samples)


if __name__ == "__main__":
    main()
