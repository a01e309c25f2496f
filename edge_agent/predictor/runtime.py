"""Run the shipped predictor with onnxruntime; validate candidates locally; EWMA fallback."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edge_agent.errors import InvalidInput
from edge_agent.predictor import baselines
from edge_agent.predictor.fastpath import AGREE_ATOL, FastPredictor
from edge_agent.predictor.features import FeatureSpec, device_datasets, make_features
from edge_agent.predictor.onnx_export import (
    INPUT_NAME,
    digest,
    read_metadata,
    spec_from_metadata,
)

FloatArray = NDArray[np.float64]
log = logging.getLogger(__name__)

DEFAULT_MARGIN = 0.02
NOT_ENOUGH_DATA = "no local series"  # how a verdict that could not score anything begins
EWMA_ALPHA = 0.5


class OrtPredictor:
    """One ONNX load model in an onnxruntime session (single-threaded, CPU)."""

    def __init__(self, data: bytes) -> None:
        """Load and check a serialized model; raises InvalidInput naming the problem."""
        self.spec = spec_from_metadata(read_metadata(data))
        self.version = digest(data)
        self.data = data
        # imported here, not with the module: an idle agent that validated no model (EWMA
        # forecasts) does not carry onnxruntime's ~30 MB
        import onnxruntime as ort  # type: ignore[import-untyped]  # no type information shipped

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
        self.fast = FastPredictor(data, self.spec)
        probe = np.random.default_rng(0).uniform(0.0, 2.0, (16, self.spec.n_features))
        gap = float(np.max(np.abs(self.fast.predict_norm(probe) - self.predict_norm(probe))))
        if not gap <= AGREE_ATOL:
            raise InvalidInput(f"numpy and onnxruntime disagree by {gap:.3g} on probe inputs")

    def predict_norm(self, x: FloatArray) -> FloatArray:
        """Normalized forecasts for feature rows (n, F)."""
        out = self._session.run(None, {INPUT_NAME: np.asarray(x, dtype=np.float32)})[0]
        return np.asarray(out, dtype=np.float64)[:, 0]


@dataclass(frozen=True)
class Verdict:
    """The outcome of validating a candidate model on local recent data."""

    accepted: bool
    candidate_rel_mae: float  # relative MAE (baselines.rel_mae), as the hub reports models
    current_rel_mae: float | None
    ewma_rel_mae: float
    reason: str


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
        """Forecast for the bucket starting at t_next, and its source ('model' or 'ewma').

        The model path is FastPredictor (the validated ONNX weights in numpy, checked against
        onnxruntime when the model was loaded); EWMA while no model passed validation.
        """
        if self.current is not None:
            value = self.current.fast.forecast(window, t_next)
            if value == value and value - value == 0.0:  # finite, without a numpy call
                return (value if value > 0.0 else 0.0), "model"
            make_features(np.asarray(window, dtype=np.float64), t_next, self.spec)  # names why
            log.warning("model %s gave a non-finite forecast; using EWMA", self.version)
        w = np.asarray(window, dtype=np.float64)
        if w.shape != (self.spec.window,):
            raise InvalidInput(f"window must have {self.spec.window} values, got shape {w.shape}")
        return float(baselines.ewma(w[None, :], EWMA_ALPHA)[0]), "ewma"

    def validate(self, data: bytes, series: FloatArray, t0: float) -> Verdict:
        """Score a candidate against the current model and EWMA on a recent local series."""
        return self.validate_many(data, [(series, t0)])

    def validate_many(self, data: bytes, series: list[tuple[FloatArray, float]]) -> Verdict:
        """As validate, pooled over several local series (e.g. one per device): (series, t0)."""
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
        parts = device_datasets(series, self.spec)  # too short ones skipped
        if not parts:
            reason = f"{NOT_ENOUGH_DATA} of at least {self.spec.window + self.spec.horizon} buckets"
            return Verdict(False, float("inf"), None, float("nan"), reason)
        x = np.concatenate([p[0] for p in parts])
        level = np.concatenate([p[2] for p in parts])
        truth = np.concatenate([p[1] for p in parts]) * level
        windows = x[:, : self.spec.window] * level[:, None]
        floor = self.spec.floor
        ewma_mae = baselines.rel_mae(baselines.ewma(windows, EWMA_ALPHA), truth, floor)
        cand_mae = baselines.rel_mae(np.maximum(cand.predict_norm(x) * level, 0.0), truth, floor)
        cur_mae = None
        if self.current is not None:
            cur = np.maximum(self.current.predict_norm(x) * level, 0.0)
            cur_mae = baselines.rel_mae(cur, truth, floor)
        bar = min(ewma_mae, cur_mae if cur_mae is not None else float("inf"))
        ok = cand_mae <= bar * (1.0 + self.margin)
        reason = (
            f"candidate rel. MAE {cand_mae:.4g} vs bar {bar:.4g} (margin {self.margin:.0%}, "
            f"{x.shape[0]} forecasts)"
        )
        return Verdict(ok, cand_mae, cur_mae, ewma_mae, reason)

    def offer(self, data: bytes, series: FloatArray, t0: float) -> Verdict:
        """Validate a candidate and swap it in only if it passes; the old model stays otherwise."""
        return self.offer_many(data, [(series, t0)])

    def offer_many(self, data: bytes, series: list[tuple[FloatArray, float]]) -> Verdict:
        """offer() pooled over several local series."""
        verdict = self.validate_many(data, series)
        if verdict.accepted:
            self.current = OrtPredictor(data)
            log.info("load model %s accepted: %s", self.version, verdict.reason)
        else:
            log.warning("load model candidate refused: %s", verdict.reason)
        return verdict

    def load_trusted(self, data: bytes) -> None:
        """Use a model this agent validated before (its own persisted copy), without re-scoring."""
        model = OrtPredictor(data)
        if model.spec != self.spec:
            raise InvalidInput(f"stored model's feature spec {model.spec} is not {self.spec}")
        self.current = model
