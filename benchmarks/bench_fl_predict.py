"""Per-prediction latency of the load forecaster: numpy path and onnxruntime path (JSON last).

predict_*_us is Forecaster.forecast with a model loaded, the call the agent makes per device
(edge_agent/agent/forecast.py): FastPredictor, the validated ONNX initializers in numpy.
ort_run_us is one onnxruntime session run (the validation path), for comparison.
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
        "ort_run_us": lambda: ort.predict_norm(xb),
        "ewma_forecast_us": lambda: fc.forecast(window, 0.0),
    }
    out: dict[str, float] = {}
    for name, fn in paths.items():
        for _ in range(500):
            fn()
        samples = []
        for _ in range(N):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
        out[f"{name}_p50"] = round(_p(samples, 50), 2)
        out[f"{name}_p99"] = round(_p(samples, 99), 2)
    fc.current = ort  # the agent's call: FastPredictor on the validated ONNX weights
    samples = []
    for _ in range(N):
        t = time.perf_counter()
        fc.forecast(window, 0.0)
        samples.append(time.perf_counter() - t)
    out["predict_p50_us"] = round(_p(samples, 50), 2)
    out["predict_p99_us"] = round(_p(samples, 99), 2)
    out["numpy_predict_p99_us"] = round(out["features_us_p99"] + out["numpy_us_p99"], 2)
    for k, v in out.items():
        print(f"{k:24s} {v:10.2f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
