"""Run the shipped predictor with onnxruntime; validate candidates locally; EWMA fallback."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort  # type: ignore[import-untyped]  # no type information shipped
from numpy.typing import NDArray

from edge_agent.errors import InvalidInput
from edge_agent.predictor import baselines
from edge_agent.predictor.features import FeatureSpec, make_dataset, make_features
from edge_agent.predictor.onnx_export import (
    INPUT_NAME,
    digest,
    read_metadata,
    spec_from_metadata,
)

FloatArray = NDArray[np.float64]
log = logging.getLogger(__name__)

DEFAULT_MARGIN = 0.02
EWMA_ALPHA = 0.5


class OrtPredictor:
    """One ONNX load model in an onnxruntime session (single-threaded, CPU)."""

    def __init__(self, data: bytes) -> None:
        """Load and check a serialized model; raises InvalidInput naming the problem."""
        self.spec = spec_from_metadata(read_metadata(data))
        self.version = digest(data)
        self.data = data
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(
                data, sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as err:  # onnxruntime raises its own untyped errors
            raise InvalidInput(f"onnxruntime refused the model: {err}") from err
        shape = self._session.get_inputs()[0].shape
        if shape[-1] != self.spec.n_features:
            raise InvalidInput(
                f"model input has {shape[-1]} features, metadata implies {self.spec.n_features}"
            )

    def predict_norm(self, x: FloatArray) -> FloatArray:
        """Normalized forecasts for feature rows (n, F)."""
        out = self._session.run(None, {INPUT_NAME: np.asarray(x, dtype=np.float32)})[0]
        return np.asarray(out, dtype=np.float64)[:, 0]


@dataclass(frozen=True)
class Verdict:
    """The outcome of validating a candidate model on local recent data."""

    accepted: bool
    candidate_mae: float
    current_mae: float | None
    ewma_mae: float
    reason: str


def _mae(pred: FloatArray, truth: FloatArray) -> float:
    """Mean absolute error; +inf if any forecast is not finite."""
    if not np.all(np.isfinite(pred)):
        return float("inf")
    return float(np.mean(np.abs(pred - truth)))


class Forecaster:
    """The agent's load forecaster: a validated ONNX model when present, EWMA otherwise."""

    def __init__(self, spec: FeatureSpec, margin: float = DEFAULT_MARGIN) -> None:
        """Start with no model: forecasts come from EWMA until a candidate passes validation."""
        self.spec = spec
        self.margin = margin
        self.current: OrtPredictor | None = None

    @property
    def version(self) -> str | None:
        """sha256 of the model in use, or None while on the EWMA fallback."""
        return None if self.current is None else self.current.version

    def forecast(self, window: FloatArray, t_next: float) -> tuple[float, str]:
        """Forecast for the bucket starting at t_next, and its source ('model' or 'ewma')."""
        w = np.asarray(window, dtype=np.float64)
        if self.current is not None:
            x, level = make_features(w, t_next, self.spec)
            value = float(self.current.predict_norm(x[None, :])[0]) * level
            if np.isfinite(value):
                return max(value, 0.0), "model"
            log.warning("model %s gave a non-finite forecast; using EWMA", self.version)
        return float(baselines.ewma(w[None, :], EWMA_ALPHA)[0]), "ewma"

    def validate(self, data: bytes, series: FloatArray, t0: float) -> Verdict:
        """Score a candidate against the current model and EWMA on a recent local series."""
        try:
            cand = OrtPredictor(data)
        except InvalidInput as err:
            return Verdict(False, float("inf"), None, float("nan"), f"unusable: {err}")
        if cand.spec != self.spec:
            return Verdict(
                False,
                float("inf"),
                None,
                float("nan"),
                f"feature spec {cand.spec} differs from the agent's {self.spec}",
            )
        x, y_norm, level = make_dataset(np.asarray(series, dtype=np.float64), t0, self.spec)
        truth = y_norm * level
        windows = x[:, : self.spec.window] * level[:, None]
        ewma_mae = _mae(baselines.ewma(windows, EWMA_ALPHA), truth)
        cand_mae = _mae(np.maximum(cand.predict_norm(x) * level, 0.0), truth)
        cur_mae = None
        if self.current is not None:
            cur_mae = _mae(np.maximum(self.current.predict_norm(x) * level, 0.0), truth)
        bar = min(ewma_mae, cur_mae if cur_mae is not None else float("inf"))
        ok = cand_mae <= bar * (1.0 + self.margin)
        reason = f"candidate MAE {cand_mae:.4g} vs bar {bar:.4g} (margin {self.margin:.0%})"
        return Verdict(ok, cand_mae, cur_mae, ewma_mae, reason)

    def offer(self, data: bytes, series: FloatArray, t0: float) -> Verdict:
        """Validate a candidate and swap it in only if it passes; the old model stays otherwise."""
        verdict = self.validate(data, series, t0)
        if verdict.accepted:
            self.current = OrtPredictor(data)
            log.info("load model %s accepted: %s", self.version, verdict.reason)
        else:
            log.warning("load model candidate refused: %s", verdict.reason)
        return verdict
