"""Grid carbon intensity per site: a constant, or an hourly series read from a CSV file.

The file format and its parser are the agent's (``edge_agent.carbon_series``, one place
for both). Simulated time 0 is the series hour ``start_hour``; the series wraps around at
its end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cloud_hub.simulator.errors import SimulationInputError
from edge_agent.carbon_series import HOUR_S, J_PER_KWH, Series, SeriesError, shipped_series_dir
from edge_agent.carbon_series import load_series as _read

__all__ = ["DATA_DIR", "HOUR_S", "J_PER_KWH", "Intensity", "Series", "load_series", "parse_site"]

#: Named series ("CISO") resolve to ``<DATA_DIR>/<name>_hourly_2022.csv``.
DATA_DIR = shipped_series_dir()


def load_series(path: str | Path) -> Series:
    """Load an hourly series; SimulationInputError names the file, line and column."""
    try:
        return _read(path)
    except SeriesError as err:
        raise SimulationInputError(err.path, err.field, err.problem, err.line) from None


@dataclass(frozen=True)
class Intensity:
    """One site's intensity over simulated time: a constant, or a series from an hour on."""

    constant: float = 0.0
    series: Series | None = None
    start_hour: int = 0

    def at_hour(self, hour: int) -> float:
        """Return the intensity of simulated hour ``hour`` (negative = before the run)."""
        if self.series is None:
            return self.constant
        vals = self.series.values
        return vals[(self.start_hour + hour) % len(vals)]

    def at(self, t_s: float) -> float:
        """Return the intensity at simulated time ``t_s`` seconds."""
        return self.at_hour(math.floor(t_s / HOUR_S))

    def grams(self, energy_j: float, start_s: float, end_s: float) -> float:
        """Return the CO2 of ``energy_j`` spent evenly over [start_s, end_s], hour by hour."""
        if end_s <= start_s:
            return energy_j / J_PER_KWH * self.at(start_s)
        total, t = 0.0, start_s
        while t < end_s:
            nxt = min(end_s, (math.floor(t / HOUR_S) + 1) * HOUR_S)
            total += (nxt - t) * self.at(t)
            t = nxt
        return energy_j / J_PER_KWH * total / (end_s - start_s)

    def label(self) -> str:
        """Return a short description (the series file and start hour, or the constant)."""
        if self.series is None:
            return f"constant {self.constant:g} g/kWh"
        return f"{Path(self.series.path).name} from hour {self.start_hour}"


def parse_site(box: Mapping[str, object], constant: float, where: str, field: str) -> Intensity:
    """Return a box's intensity from its ``carbon_series`` object, else the constant."""
    raw = box.get("carbon_series")
    if raw is None:
        return Intensity(constant)
    if "carbon_g_per_kwh" in box:
        raise SimulationInputError(where, field, "give carbon_g_per_kwh or carbon_series, not both")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("series"), str):
        raise SimulationInputError(
            where, f"{field}.carbon_series", 'expected {"series": name or path, "start_hour": n}'
        )
    unknown = sorted(set(raw) - {"series", "start_hour"})
    if unknown:
        raise SimulationInputError(where, f"{field}.carbon_series.{unknown[0]}", "unknown key")
    start = raw.get("start_hour", 0)
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise SimulationInputError(
            where, f"{field}.carbon_series.start_hour", f"expected an integer >= 0, got {start!r}"
        )
    name = str(raw["series"])
    if "/" in name or name.endswith(".csv"):
        base = Path(where).parent if where and not where.startswith("<") else Path.cwd()
        path = base / name
    else:
        path = DATA_DIR / f"{name}_hourly_2022.csv"
    try:
        series = load_series(path)
    except SimulationInputError as err:
        raise SimulationInputError(
            where, f"{field}.carbon_series.series", f"{name!r}: {err}"
        ) from None
    return Intensity(0.0, series, start)
