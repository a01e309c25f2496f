"""The agent's per-call prediction path: the validated ONNX model's weights evaluated in numpy.

onnxruntime costs ~15-40 us per call on a 1x50 input (session dispatch, not arithmetic). The
exported graph is a fixed two-branch MLP (see onnx_export.to_onnx), so the agent reads its
initializers, checks the graph is exactly that shape, and evaluates it with preallocated
buffers: one matmul for both branches. At load the result is compared with onnxruntime on
probe inputs; any disagreement refuses the model (OrtPredictor remains the reference).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from edge_agent.errors import InvalidInput
from edge_agent.predictor.features import FeatureSpec
from edge_agent.predictor.model import WEIGHT_NAMES
from edge_agent.predictor.onnx_export import INPUT_NAME, OUTPUT_NAME

FloatArray = NDArray[np.float64]

#: The exported graph, node by node: (op type, inputs, outputs).
GRAPH = (
    ("MatMul", (INPUT_NAME, "w_lin"), ("lin_mm",)),
    ("Add", ("lin_mm", "b_lin"), ("lin",)),
    ("MatMul", (INPUT_NAME, "w1"), ("h_mm",)),
    ("Add", ("h_mm", "b1"), ("h_pre",)),
    ("Relu", ("h_pre",), ("h",)),
    ("MatMul", ("h", "w2"), ("mlp",)),
    ("Add", ("lin", "mlp"), (OUTPUT_NAME,)),
)
AGREE_ATOL = 1e-4  # float32 (onnxruntime) against float64 (numpy), on normalized values


class FastPredictor:
    """forecast(window, t_next) for one model, allocation-light; not thread-safe (one caller)."""

    def __init__(self, data: bytes, spec: FeatureSpec) -> None:
        """Read the weights of an exported load model; InvalidInput if the graph is different."""
        import onnx  # here, not at import: an agent with no model never loads it
        from onnx import numpy_helper

        proto = onnx.load_from_string(data)
        nodes = tuple((n.op_type, tuple(n.input), tuple(n.output)) for n in proto.graph.node)
        if nodes != GRAPH:
            raise InvalidInput("model graph is not the exported load-model graph")
        inits = {
            t.name: numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer
        }
        try:
            w_lin, b_lin, w1, b1, w2 = (inits[n] for n in WEIGHT_NAMES)
        except KeyError as err:
            raise InvalidInput(f"model lacks initializer {err.args[0]!r}") from err
        f, hidden = spec.n_features, w1.shape[-1]
        if w_lin.shape != (f, 1) or w1.shape != (f, hidden) or w2.shape != (hidden, 1):
            raise InvalidInput(f"model weight shapes do not fit {f} features")
        self.spec = spec
        self._win = spec.window
        self._shape = (spec.window,)
        self._floor = spec.floor
        self._period = spec.period_s
        # one matmul for both branches and both biases: x = [w/level, sin, cos, 1];
        # column 0 of z is the linear path, the rest the hidden layer's pre-activation
        self._w = np.ascontiguousarray(
            np.concatenate(
                [
                    np.concatenate([w_lin, w1], axis=1),
                    np.concatenate([b_lin.reshape(1), b1.reshape(hidden)])[None, :],
                ],
                axis=0,
            )
        )
        self._w2 = np.concatenate([[0.0], w2[:, 0]])  # z[0] (linear path) is read before ReLU
        self._x = np.ones(f + 1)
        self._z = np.zeros(hidden + 1)
        self._abs = np.zeros(spec.window)
        self._mean = np.full(spec.window, 1.0 / spec.window)

    def predict_norm(self, x: FloatArray) -> FloatArray:
        """Normalized forecasts for feature rows (n, F), as OrtPredictor.predict_norm."""
        z = np.asarray(x, dtype=np.float64) @ self._w[:-1] + self._w[-1]
        return np.asarray(z[:, 0] + np.maximum(z, 0.0) @ self._w2, dtype=np.float64)

    def forecast(self, window: FloatArray, t_next: float) -> float:
        """Denormalized forecast for one window (float64, len == spec.window); NaN if non-finite.

        The same arithmetic as features.make_features + the graph: window / max(mean|w|,
        floor), sin/cos of the target's phase, linear + ReLU branch, times the level.
        """
        if window.shape != self._shape:
            raise InvalidInput(f"window must have {self._win} values, got shape {window.shape}")
        x = self._x
        level = float(np.abs(window, out=self._abs).dot(self._mean))
        if not level > self._floor:  # also NaN
            level = self._floor if level == level else math.nan
        # z = level * (the graph's pre-activations on the normalized row), since level > 0:
        # so the window goes in unscaled and the clock and bias slots are scaled instead
        x[: self._win] = window
        phase = 2.0 * math.pi * ((t_next % self._period) / self._period)
        x[self._win] = math.sin(phase) * level
        x[self._win + 1] = math.cos(phase) * level
        x[self._win + 2] = level
        z = np.dot(x, self._w, out=self._z)
        lin = float(z[0])
        np.maximum(z, 0.0, out=z)  # relu(level * a) = level * relu(a)
        return lin + float(z.dot(self._w2))
