"""Naive forecasts beside the model: last value, EWMA and seasonal naive."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from edge_agent.errors import InvalidInput

FloatArray = NDArray[np.float64]


def last_value(windows: FloatArray) -> FloatArray:
    """The last observed value of each window (rows are windows, oldest first)."""
    return np.asarray(windows[:, -1], dtype=np.float64)


def ewma(windows: FloatArray, alpha: float = 0.5) -> FloatArray:
    """Exponentially weighted mean of each window, newest weighted alpha."""
    if not 0.0 < alpha <= 1.0:
        raise InvalidInput(f"EWMA alpha must be in (0, 1], got {alpha}")
    n = windows.shape[1]
    w = alpha * (1.0 - alpha) ** np.arange(n - 1, -1, -1, dtype=np.float64)
    w[0] += (1.0 - alpha) ** n  # the oldest value carries the initial state
    return np.asarray(windows @ w, dtype=np.float64)


def seasonal_naive(windows: FloatArray, season: int, horizon: int = 1) -> FloatArray:
    """The value one season before the target: window[-(season - horizon + 1)]."""
    back = season - horizon + 1
    if not 1 <= back <= windows.shape[1]:
        raise InvalidInput(
            f"seasonal naive needs season-horizon+1 in [1, {windows.shape[1]}], got {back}"
        )
    return np.asarray(windows[:, -back], dtype=np.float64)


def ewma_update(state: float | None, value: float, alpha: float = 0.5) -> float:
    """Streaming EWMA: the agent's always-available fallback, O(1) per sample."""
    return value if state is None else alpha * value + (1.0 - alpha) * state


def rel_mae(pred: FloatArray, truth: FloatArray, floor: float) -> float:
    """The load model's error in the one unit hub and agents report: relative MAE.

    mean |forecast − observed| ÷ mean observed load (at least ``floor``), a fraction: 0.10
    means forecasts are off by 10 % of the mean load. +inf if any forecast is not finite.
    Every JSON key with this figure ends in ``rel_mae``; texts call it "rel. MAE".
    """
    if not np.all(np.isfinite(pred)):
        return float("inf")
    scale = max(float(np.mean(np.abs(truth))), floor)
    return float(np.mean(np.abs(pred - truth))) / scale
