"""A small numpy load model: a linear path plus a one-hidden-layer ReLU residual, SGD-trained."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edge_agent.errors import InvalidInput

FloatArray = NDArray[np.float64]

WEIGHT_NAMES = ("w_lin", "b_lin", "w1", "b1", "w2")


@dataclass(frozen=True)
class TrainConfig:
    """Local training settings: epochs, learning rate, batch size, Huber delta, seed."""

    epochs: int = 2
    lr: float = 0.02
    batch: int = 32
    huber_delta: float = 0.1
    l2: float = 1e-4
    seed: int = 0


class LoadModel:
    """y = x·w_lin + b_lin + relu(x·w1 + b1)·w2, on normalized windows (see features)."""

    def __init__(
        self, n_features: int, hidden: int = 16, last_index: int | None = None, seed: int = 0
    ) -> None:
        """Start as the last-value predictor (weight 1 on last_index) with a tiny MLP."""
        if n_features < 1 or hidden < 1:
            raise InvalidInput("LoadModel needs n_features >= 1 and hidden >= 1")
        rng = np.random.default_rng(seed)
        self.n_features = n_features
        self.hidden = hidden
        self.w_lin = np.zeros((n_features, 1))
        if last_index is not None:
            self.w_lin[last_index, 0] = 1.0
        self.b_lin = np.zeros(1)
        self.w1 = rng.normal(0.0, 1.0 / np.sqrt(n_features), (n_features, hidden))
        self.b1 = np.zeros(hidden)
        self.w2 = rng.normal(0.0, 0.01, (hidden, 1))

    def get_weights(self) -> list[FloatArray]:
        """Copies of the weights, in WEIGHT_NAMES order."""
        return [
            self.w_lin.copy(),
            self.b_lin.copy(),
            self.w1.copy(),
            self.b1.copy(),
            self.w2.copy(),
        ]

    def set_weights(self, weights: list[FloatArray]) -> None:
        """Replace the weights; shapes must match this model."""
        current = self.get_weights()
        if len(weights) != len(current):
            raise InvalidInput(f"expected {len(current)} weight arrays, got {len(weights)}")
        for name, new, old in zip(WEIGHT_NAMES, weights, current, strict=True):
            if np.shape(new) != old.shape:
                raise InvalidInput(f"weight {name}: shape {np.shape(new)} != {old.shape}")
            if not np.all(np.isfinite(new)):
                raise InvalidInput(f"weight {name} holds a non-finite value")
        self.w_lin, self.b_lin, self.w1, self.b1, self.w2 = (
            np.array(w, dtype=np.float64) for w in weights
        )

    def predict(self, x: FloatArray) -> FloatArray:
        """Normalized forecasts for a batch of feature rows, shape (n,)."""
        h = np.maximum(x @ self.w1 + self.b1, 0.0)
        out = x @ self.w_lin + self.b_lin + h @ self.w2
        return np.asarray(out[:, 0], dtype=np.float64)

    def fit(
        self,
        x: FloatArray,
        y: FloatArray,
        cfg: TrainConfig,
        anchor: list[FloatArray] | None = None,
        prox: float = 0.0,
        head_only: bool = False,
    ) -> float:
        """Mini-batch SGD on the Huber loss; returns the last epoch's mean absolute error.

        With ``anchor`` (weights in WEIGHT_NAMES order, e.g. the global model's) the loss adds
        the proximal term prox/2 · ‖w − anchor‖² (FedProx, Ditto). ``head_only`` keeps the
        hidden layer (w1, b1, the shared body) fixed and trains the linear path and w2.
        """
        if x.ndim != 2 or x.shape[1] != self.n_features or y.shape != (x.shape[0],):
            raise InvalidInput(f"fit needs x (n, {self.n_features}) and y (n,)")
        if prox < 0.0 or not np.isfinite(prox):
            raise InvalidInput(f"proximal weight must be finite and >= 0, got {prox}")
        pull: list[FloatArray] | None = None
        if anchor is not None and prox > 0.0:
            probe = LoadModel(self.n_features, self.hidden)
            probe.set_weights(anchor)  # same shapes and finite, or InvalidInput
            pull = probe.get_weights()
        rng = np.random.default_rng(cfg.seed)
        n = x.shape[0]
        mae = float("nan")
        for _ in range(cfg.epochs):
            order = rng.permutation(n)
            abs_sum = 0.0
            for lo in range(0, n, cfg.batch):
                idx = order[lo : lo + cfg.batch]
                abs_sum += self._step(x[idx], y[idx], cfg, pull, prox, head_only)
            mae = abs_sum / max(n, 1)
        return mae

    def _step(
        self,
        xb: FloatArray,
        yb: FloatArray,
        cfg: TrainConfig,
        anchor: list[FloatArray] | None = None,
        prox: float = 0.0,
        head_only: bool = False,
    ) -> float:
        """One SGD step on a batch; returns the batch's summed absolute error."""
        pre = xb @ self.w1 + self.b1
        h = np.maximum(pre, 0.0)
        err = (xb @ self.w_lin + self.b_lin + h @ self.w2)[:, 0] - yb
        g = np.clip(err, -cfg.huber_delta, cfg.huber_delta)[:, None] / xb.shape[0]
        gh = (g @ self.w2.T) * (pre > 0.0)
        grads = [
            xb.T @ g + cfg.l2 * self.w_lin,
            g.sum(axis=0),
            xb.T @ gh + cfg.l2 * self.w1,
            gh.sum(axis=0),
            h.T @ g + cfg.l2 * self.w2,
        ]
        if anchor is not None:
            own = (self.w_lin, self.b_lin, self.w1, self.b1, self.w2)
            grads = [gr + prox * (w - a) for gr, w, a in zip(grads, own, anchor, strict=True)]
        self.w_lin -= cfg.lr * grads[0]
        self.b_lin -= cfg.lr * grads[1]
        self.w2 -= cfg.lr * grads[4]
        if not head_only:
            self.w1 -= cfg.lr * grads[2]
            self.b1 -= cfg.lr * grads[3]
        return float(np.abs(err).sum())


def model_for(n_features: int, window: int, hidden: int = 16, seed: int = 0) -> LoadModel:
    """A fresh model whose linear path starts as last-value (last window slot)."""
    return LoadModel(n_features, hidden=hidden, last_index=window - 1, seed=seed)
