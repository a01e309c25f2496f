"""The site's grid carbon intensity in the agent: a constant or an hourly series (``[carbon]``).

``CarbonSource`` answers the intensity now and at any hour (the series is also the
forecast deferrable work is scheduled against); ``CarbonFeed`` writes the current value
into the Placer every ``update_s`` so the kernel's carbon objective and each decision's
``carbon_g`` follow the grid. ``grams`` turns a task's energy into grams of CO2.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from edge_agent.agent.config import AgentConfig
from edge_agent.carbon_series import HOUR_S, Series, grams, load_series
from edge_agent.placement import Placer
from edge_agent.resources.device import Device

__all__ = ["CarbonFeed", "CarbonSource", "grams", "task_carbon"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CarbonSource:
    """A site's intensity over wall-clock time: a constant, or an hourly series."""

    constant: float = 0.0
    series: Series | None = None
    region: str = ""

    @classmethod
    def from_config(cls, config: AgentConfig) -> CarbonSource | None:
        """Return the configured source, or None when ``[carbon]`` sets neither value."""
        if config.carbon_series is not None:
            series = load_series(config.carbon_series, config.carbon_column or None)
            return cls(0.0, series, config.carbon_region)
        if config.carbon_intensity_g_per_kwh is not None:
            return cls(config.carbon_intensity_g_per_kwh, None, config.carbon_region)
        return None

    def at(self, t: float) -> float:
        """Return the intensity (gCO2/kWh) at Unix time ``t``."""
        return self.constant if self.series is None else self.series.at_epoch(t)

    def hour(self, hour: int) -> float:
        """Return the intensity of the hour that starts at ``hour`` * 3600 (Unix hours)."""
        return self.at(hour * HOUR_S)

    def label(self) -> str:
        """Return a short description: the series file (and region) or the constant."""
        where = f" ({self.region})" if self.region else ""
        if self.series is None:
            return f"constant {self.constant:g} g/kWh{where}"
        return f"series {self.series.path}{where}"


class CarbonFeed:
    """Keeps every device's ``carbon_g_per_kwh`` in the Placer at the site's intensity now."""

    def __init__(
        self,
        source: CarbonSource,
        placer: Placer,
        interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not (math.isfinite(interval_s) and interval_s > 0):
            raise ValueError("interval_s must be a finite number > 0")
        self.source = source
        self.placer = placer
        self.interval_s = interval_s
        self.clock = clock
        self.current = math.nan

    def update(self) -> float:
        """Write the intensity now into every device's live state; return it."""
        value = self.source.at(self.clock())
        for device_id in self.placer.device_ids:
            self.placer.update_live(device_id, carbon_g_per_kwh=value)
        self.current = value
        return value

    async def run(self) -> None:
        """Update forever, every ``interval_s`` (until cancelled)."""
        while True:
            self.update()
            await asyncio.sleep(self.interval_s)


def task_carbon(
    source: CarbonSource | None,
    device: Device,
    energy_j: float | None,
    estimated_j: float,
    t: float | None = None,
) -> dict[str, float]:
    """Return a finished task's ``g_per_kwh`` and ``carbon_g`` telemetry columns.

    The intensity is the site's now (else the device profile's); the energy is the
    measured one when the platform reports power, else the placement estimate.
    """
    g = device.carbon_g_per_kwh if source is None else source.at(time.time() if t is None else t)
    used = estimated_j if energy_j is None else energy_j
    return {"g_per_kwh": g, "carbon_g": grams(used, g) if math.isfinite(used) else 0.0}
