"""Grid carbon intensity per site: a constant, or an hourly series read from a CSV file.

A series file has a header row and then ``timestamp,grams CO2 per kWh`` rows one hour
apart (ISO 8601 timestamps, e.g. ``2022-01-01 00:00:00+00:00``). A missing hour takes the
previous hour's value (counted in ``Series.filled``). Simulated time 0 is the series hour
``start_hour``; the series wraps around at its end.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cloud_hub.datasets import benchmarks_data
from cloud_hub.simulator.errors import SimulationInputError

#: Named series ("CISO") resolve to ``<DATA_DIR>/<name>_hourly_2022.csv``.
DATA_DIR = benchmarks_data() / "carbon_intensity"
HOUR_S = 3600.0
J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class Series:
    """An hourly intensity series: values in gCO2/kWh from its first timestamp on."""

    path: str
    start: datetime
    values: tuple[float, ...]
    filled: int = 0  # missing hours carried forward from the hour before


def load_series(path: str | Path) -> Series:
    """Load an hourly series; SimulationInputError names the file, line and column."""
    return _load(str(Path(path).resolve()), str(path))


@functools.lru_cache(maxsize=16)
def _load(resolved: str, where: str) -> Series:
    try:
        text = Path(resolved).read_text(encoding="utf-8")
    except OSError as err:
        raise SimulationInputError(where, "(file)", f"cannot be read: {err.strerror}") from None
    rows = list(csv.reader(text.splitlines()))
    if len(rows) < 2:
        raise SimulationInputError(where, "(file)", "expected a header row and hourly rows")
    if len(rows[0]) != 2:
        raise SimulationInputError(where, "(header)", "expected 2 columns: timestamp,g_per_kwh", 1)
    values: list[float] = []
    start: datetime | None = None
    last: datetime | None = None
    filled = 0
    for line, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != 2:
            raise SimulationInputError(where, "(row)", f"expected 2 columns, got {len(row)}", line)
        try:
            stamp = datetime.fromisoformat(row[0].strip())
        except ValueError:
            raise SimulationInputError(
                where, "timestamp", f"not an ISO 8601 time: {row[0]!r}", line
            ) from None
        try:
            value = float(row[1])
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise SimulationInputError(
                where, "g_per_kwh", f"expected a number >= 0, got {row[1]!r}", line
            )
        if last is not None:
            try:
                step = (stamp - last).total_seconds()
            except TypeError:
                raise SimulationInputError(
                    where, "timestamp", "mixes times with and without a UTC offset", line
                ) from None
            if step <= 0 or step % HOUR_S:
                raise SimulationInputError(
                    where, "timestamp", f"expected whole hours after {last}, got {stamp}", line
                )
            gap = int(step // HOUR_S) - 1
            values.extend([values[-1]] * gap)
            filled += gap
        start = start or stamp
        last = stamp
        values.append(value)
    if start is None:
        raise SimulationInputError(where, "(file)", "the series has no rows")
    return Series(where, start, tuple(values), filled)


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
