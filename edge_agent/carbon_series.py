"""Hourly grid carbon intensity series read from CSV: the one parser (agent and simulator).

A series file has a header row and then ``timestamp,grams CO2 per kWh`` rows one hour apart
(ISO 8601 timestamps with a UTC offset, e.g. ``2022-01-01 00:00:00+00:00``), the format of
``benchmarks/data/carbon_intensity``. A file with more columns names the value column with
``column`` (a header name). A missing hour takes the previous hour's value (counted in
``Series.filled``). ``SeriesError`` names the file, the line and the field to fix.

The real 2022 series of four U.S. grid regions (CISO, ERCO, NYIS, BPAT; origin and license
beside them) ship inside the package: ``shipped_series("CISO_hourly_2022.csv")`` finds one
whatever the working directory.
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from edge_agent.errors import FileFieldError
from edge_agent.package_data import package_data_dir

HOUR_S = 3600.0
J_PER_KWH = 3.6e6


class SeriesError(FileFieldError):
    """A carbon intensity series file is malformed: names the file, line and field."""


@dataclass(frozen=True)
class Series:
    """An hourly intensity series: values in gCO2/kWh, one per hour from ``start`` on."""

    path: str
    start: datetime
    values: tuple[float, ...]
    filled: int = 0  # missing hours carried forward from the hour before

    @property
    def start_s(self) -> float:
        """Return the first hour as Unix seconds."""
        return self.start.timestamp()

    def at_epoch(self, t: float) -> float:
        """Return the intensity at Unix time ``t``.

        Inside the series: its hour. Outside (e.g. a 2022 series read in another year):
        the same hour of the series replayed, counted in whole series lengths from its
        start, so a one-year series repeats year after year.
        """
        index = math.floor((t - self.start_s) / HOUR_S)
        return self.values[index % len(self.values)]


def grams(energy_j: float, g_per_kwh: float) -> float:
    """Return the grams of CO2 of ``energy_j`` joules at ``g_per_kwh``."""
    return energy_j * g_per_kwh / J_PER_KWH


def shipped_series_dir() -> Path:
    """Return the folder of the grid series that ship with the package."""
    return package_data_dir("edge_agent.grid_series", "benchmarks/data/carbon_intensity")


def shipped_series(path: Path) -> Path:
    """Return ``path``, or the shipped series of that bare file name when ``path`` is missing."""
    if path.exists() or path.name != str(path):
        return path
    shipped = shipped_series_dir() / path.name
    return shipped if shipped.is_file() else path


def load_series(path: str | Path, column: str | None = None) -> Series:
    """Load an hourly series; SeriesError names the file, line and field when it is bad."""
    return _load(str(Path(path).resolve()), str(path), column)


@functools.lru_cache(maxsize=16)
def _load(resolved: str, where: str, column: str | None) -> Series:
    try:
        text = Path(resolved).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise SeriesError(where, "(file)", f"cannot be read: {why}") from None
    rows = list(csv.reader(text.splitlines()))
    if len(rows) < 2:
        raise SeriesError(where, "(file)", "expected a header row and hourly rows")
    header = [h.strip() for h in rows[0]]
    if column is None:
        if len(header) != 2:
            raise SeriesError(
                where, "(header)", "expected 2 columns: timestamp,g_per_kwh (or name a column)", 1
            )
        col = 1
    elif column in header[1:]:
        col = header.index(column, 1)
    else:
        raise SeriesError(where, "(header)", f"no column {column!r}; columns: {header[1:]}", 1)
    width = len(header)
    values: list[float] = []
    start: datetime | None = None
    last: datetime | None = None
    filled = 0
    for line, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != width:
            raise SeriesError(where, "(row)", f"expected {width} columns, got {len(row)}", line)
        try:
            stamp = datetime.fromisoformat(row[0].strip())
        except ValueError:
            raise SeriesError(
                where, "timestamp", f"not an ISO 8601 time: {row[0]!r}", line
            ) from None
        if stamp.tzinfo is None:
            raise SeriesError(
                where, "timestamp", f"needs a UTC offset (e.g. +00:00): {row[0]!r}", line
            )
        try:
            value = float(row[col])
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise SeriesError(where, "g_per_kwh", f"expected a number >= 0, got {row[col]!r}", line)
        if last is not None:
            step = (stamp - last).total_seconds()
            if step <= 0 or step % HOUR_S:
                raise SeriesError(
                    where, "timestamp", f"expected whole hours after {last}, got {stamp}", line
                )
            gap = int(step // HOUR_S) - 1
            values.extend([values[-1]] * gap)
            filled += gap
        start = start or stamp
        last = stamp
        values.append(value)
    if start is None:
        raise SeriesError(where, "(file)", "the series has no rows")
    return Series(where, start, tuple(values), filled)
