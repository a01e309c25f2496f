"""Load series and feature windows: recent load plus time-of-day, scale-free per window."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from edge_agent.errors import InvalidInput

FloatArray = NDArray[np.float64]
HOST_ROW = "host"  # the telemetry sampler's whole-box row (edge_agent/agent/sensing/telemetry.py)


@dataclass(frozen=True)
class FeatureSpec:
    """How a load series becomes model inputs: window length, horizon and clock."""

    window: int = 24
    horizon: int = 1
    bucket_s: float = 60.0
    period_s: float = 86400.0
    floor: float = 1e-3

    def __post_init__(self) -> None:
        if self.window < 2:
            raise InvalidInput(f"FeatureSpec.window must be >= 2, got {self.window}")
        if self.horizon < 1:
            raise InvalidInput(f"FeatureSpec.horizon must be >= 1, got {self.horizon}")
        if not (self.bucket_s > 0 and self.period_s > 0 and self.floor > 0):
            raise InvalidInput("FeatureSpec.bucket_s, period_s and floor must be > 0")

    @property
    def n_features(self) -> int:
        """Window values plus sin/cos of the time of day."""
        return self.window + 2


def series_from_intervals(
    starts: FloatArray,
    ends: FloatArray,
    weights: FloatArray,
    t0: float,
    t1: float,
    bucket_s: float,
) -> FloatArray:
    """Time-weighted mean of the summed weights of intervals running in each bucket."""
    if t1 <= t0:
        raise InvalidInput(f"series end {t1} must be after its start {t0}")
    s = np.asarray(starts, dtype=np.float64)
    e = np.asarray(ends, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if not (s.shape == e.shape == w.shape) or np.any(e < s):
        raise InvalidInput("intervals need equal-length starts/ends/weights with end >= start")
    n = math.ceil((t1 - t0) / bucket_s)
    edges = t0 + bucket_s * np.arange(n + 1, dtype=np.float64)
    times = np.concatenate([s, e])
    deltas = np.concatenate([w, -w])
    order = np.argsort(times, kind="stable")
    times, deltas = times[order], deltas[order]
    level_after = np.cumsum(deltas)
    # integral of the step function at each event time, then exactly interpolated at edges
    integ = np.concatenate([[0.0], np.cumsum(level_after[:-1] * np.diff(times))])
    at_edges = np.interp(edges, times, integ, left=0.0, right=float(integ[-1]))
    return np.asarray(np.diff(at_edges) / bucket_s, dtype=np.float64)


def _read_samples(db_path: str, query: str, args: list[object]) -> list[tuple[object, ...]]:
    """Rows of a read-only query on the agent's telemetry database."""
    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            return con.execute(query, args).fetchall()
        finally:
            con.close()
    except sqlite3.Error as err:
        raise InvalidInput(f"cannot read telemetry from {db_path}: {err}") from err


def utilization_from_telemetry(
    db_path: str,
    bucket_s: float,
    device: str,
    since: float | None = None,
) -> tuple[float, FloatArray]:
    """Mean sampled utilization per bucket of one device (telemetry ``sample`` rows): (t0, series).

    Buckets without a sample repeat the previous bucket's value (the sampler skipped a tick).
    Read-only; InvalidInput if the device has no samples.
    """
    query = (
        "SELECT ts, utilization FROM telemetry WHERE kind = 'sample' AND device = ? "
        "AND utilization IS NOT NULL"
    )
    args: list[object] = [device]
    if since is not None:
        query += " AND ts >= ?"
        args.append(since)
    rows = _read_samples(db_path, query + " ORDER BY ts", args)
    if not rows:
        raise InvalidInput(f"no utilization samples in {db_path} for device {device!r}")
    data = np.asarray(rows, dtype=np.float64)
    t0 = math.floor(float(data[0, 0]) / bucket_s) * bucket_s
    idx = ((data[:, 0] - t0) // bucket_s).astype(np.int64)
    n = int(idx[-1]) + 1
    sums = np.bincount(idx, weights=data[:, 1], minlength=n)
    counts = np.bincount(idx, minlength=n)
    series = np.empty(n, dtype=np.float64)
    last = 0.0
    for i in range(n):  # carry forward over empty buckets
        if counts[i]:
            last = float(sums[i] / counts[i])
        series[i] = last
    return t0, series


def sampled_devices(db_path: str) -> list[str]:
    """The devices with utilization samples in the agent's telemetry, sorted (read-only).

    The ``host`` row (the whole box's CPU, next to the devices) is not a device the agent
    forecasts, so it is left out.
    """
    query = (
        "SELECT DISTINCT device FROM telemetry WHERE kind = 'sample' "
        "AND utilization IS NOT NULL AND device IS NOT NULL AND device != ? ORDER BY device"
    )
    return [str(row[0]) for row in _read_samples(db_path, query, [HOST_ROW])]


def device_series(
    db_path: str,
    bucket_s: float,
    devices: Sequence[str] | None = None,
    since: float | None = None,
    now: float | None = None,
) -> list[tuple[FloatArray, float]]:
    """Each device's utilization series of complete buckets, ``[(series, t0)]``.

    The one series the load model learns from (the ClientApp), is validated on (the agent's
    gate) and forecasts from (the agent's per-device forecasts). ``devices`` None: every
    device with samples. The bucket ``now`` falls in is still filling and left out; buckets
    up to it without samples repeat the last value. Without ``now``, the series ends before
    the bucket of the newest sample. Devices without samples are skipped.
    """
    out = []
    for device in sampled_devices(db_path) if devices is None else devices:
        try:
            t0, series = utilization_from_telemetry(db_path, bucket_s, device, since)
        except InvalidInput:
            continue
        complete = series.shape[0] - 1 if now is None else int((now - t0) // bucket_s)
        if complete <= 0:
            continue
        if series.shape[0] < complete:  # no samples lately: carry the last value forward
            series = np.concatenate([series, np.full(complete - series.shape[0], series[-1])])
        out.append((np.ascontiguousarray(series[:complete]), t0))
    return out


def window_level(window: FloatArray, spec: FeatureSpec) -> float:
    """The scale a window is normalized by: its mean, at least the floor."""
    return max(float(np.mean(np.abs(window))), spec.floor)


def make_features(window: FloatArray, t_next: float, spec: FeatureSpec) -> tuple[FloatArray, float]:
    """Features for one prediction: normalized window and the clock phase of the target."""
    w = np.asarray(window, dtype=np.float64)
    if w.shape != (spec.window,):
        raise InvalidInput(f"window must have {spec.window} values, got shape {w.shape}")
    if not np.all(np.isfinite(w)):
        raise InvalidInput("window holds a non-finite value")
    level = window_level(w, spec)
    phase = 2.0 * math.pi * ((t_next % spec.period_s) / spec.period_s)
    x = np.empty(spec.n_features, dtype=np.float64)
    x[: spec.window] = w / level
    x[spec.window] = math.sin(phase)
    x[spec.window + 1] = math.cos(phase)
    return x, level


def make_dataset(
    series: FloatArray, t0: float, spec: FeatureSpec
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """All (features, normalized target, level) triples a series yields, oldest first."""
    y_all = np.asarray(series, dtype=np.float64)
    n = y_all.shape[0] - spec.window - spec.horizon + 1
    if n <= 0:
        raise InvalidInput(
            f"series of {y_all.shape[0]} buckets is shorter than window+horizon "
            f"({spec.window + spec.horizon})"
        )
    idx = np.arange(n)[:, None] + np.arange(spec.window)[None, :]
    wins = y_all[idx]
    levels = np.maximum(np.mean(np.abs(wins), axis=1), spec.floor)
    target_idx = np.arange(n) + spec.window + spec.horizon - 1
    t_target = t0 + spec.bucket_s * target_idx
    phase = 2.0 * np.pi * ((t_target % spec.period_s) / spec.period_s)
    x = np.concatenate(
        [wins / levels[:, None], np.sin(phase)[:, None], np.cos(phase)[:, None]], axis=1
    )
    return x, y_all[target_idx] / levels, levels


def device_datasets(
    series: Sequence[tuple[FloatArray, float]], spec: FeatureSpec
) -> list[tuple[FloatArray, FloatArray, FloatArray]]:
    """make_dataset for each ``(series, t0)``, skipping series shorter than window + horizon."""
    parts = []
    for values, t0 in series:
        try:
            parts.append(make_dataset(np.asarray(values, dtype=np.float64), t0, spec))
        except InvalidInput:
            continue
    return parts


def split_point(n: int, holdout: float) -> int:
    """Index where the chronological holdout (the most recent fraction) begins."""
    if not 0.0 < holdout < 1.0:
        raise InvalidInput(f"holdout fraction must be in (0, 1), got {holdout}")
    return max(1, min(n - 1, round(n * (1.0 - holdout))))
