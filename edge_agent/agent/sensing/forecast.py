"""Per-device load forecasts for placement: the Forecaster over each device's utilization samples.

Every bucket (the model's ``bucket_s``), for each device with at least a window of complete
buckets of telemetry ``sample`` rows, the agent forecasts the device's utilization ``horizon``
buckets ahead and hands it to the placer as ``predicted_utilization``; the placer scores a
device by max(utilization, predicted), so a device about to be busy scores worse. The model is
the one that passed local validation (local_model.LocalModel), EWMA until then.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.errors import InvalidInput
from edge_agent.placement import Placer
from edge_agent.predictor.features import FeatureSpec, device_series
from edge_agent.predictor.runtime import Forecaster

_log = logging.getLogger(__name__)

Window = tuple[np.ndarray[Any, np.dtype[np.float64]], float]


def recent_window(db_path: Path, device: str, spec: FeatureSpec, now: float) -> Window | None:
    """The device's last ``spec.window`` complete buckets and the target's time, or None."""
    since = (math.floor(now / spec.bucket_s) - spec.window - 1) * spec.bucket_s
    found = device_series(str(db_path), spec.bucket_s, [device], since, now)
    if not found or found[0][0].shape[0] < spec.window:
        return None
    series, t0 = found[0]
    window = np.ascontiguousarray(series[-spec.window :])
    return window, t0 + spec.bucket_s * (series.shape[0] - 1 + spec.horizon)


class DeviceForecasts:
    """Feeds ``predicted_utilization`` to the placer; ``run`` until cancelled."""

    def __init__(
        self,
        db_path: Path,
        devices: Sequence[str],
        placer: Placer,
        forecaster: Callable[[], Forecaster],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db_path, self.devices, self.placer = db_path, list(devices), placer
        self.forecaster, self.clock = forecaster, clock
        self.last: dict[str, dict[str, Any]] = {}  # device -> its latest forecast
        self.ticks = 0

    async def run(self) -> None:
        """Forecast once per bucket, aligned to bucket boundaries."""
        while True:
            await self.tick()
            bucket = self.forecaster().spec.bucket_s
            now = self.clock()
            await asyncio.sleep(bucket - now % bucket + 0.5)

    async def tick(self) -> dict[str, float]:
        """Forecast every device with enough telemetry; update the placer; return the values."""
        fc = self.forecaster()
        now = self.clock()
        windows = await asyncio.to_thread(self._windows, fc.spec, now)
        out: dict[str, float] = {}
        for device, (window, t_next) in windows.items():
            value, source = fc.forecast(window, t_next)  # the per-call path (~10 us)
            pred = min(1.0, max(0.0, value))
            try:
                self.placer.update_live(device, predicted_utilization=pred)
            except InvalidInput as err:
                _log.debug("forecast for %s refused: %s", device, err)
                continue
            out[device] = pred
            self.last[device] = {
                "predicted_utilization": round(pred, 4),
                "source": source,
                "for": t_next,
                "at": now,
            }
        self.ticks += 1
        return out

    def _windows(self, spec: FeatureSpec, now: float) -> dict[str, Window]:
        """Each device's recent window (blocking: SQLite)."""
        found = {}
        for device in self.devices:
            w = recent_window(self.db_path, device, spec, now)
            if w is not None:
                found[device] = w
        return found
