"""Each demo agent is a site on its own grid: a real 2022 hourly series that ships with the
package (CISO, ERCO, NYIS, BPAT), or a labelled illustrative constant if one is unreadable."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from edge_agent.carbon_series import SeriesError, load_series, shipped_series_dir

#: Each agent's grid: the real 2022 hourly series of benchmarks/data/carbon_intensity.
REGIONS = (("CISO", "California"), ("ERCO", "Texas"), ("NYIS", "New York"),
           ("BPAT", "Pacific Northwest"))  # fmt: skip


#: Used only when those files are not installed: illustrative, not measured (g/kWh).
FALLBACK_G_PER_KWH = {"CISO": 230.0, "ERCO": 400.0, "NYIS": 250.0, "BPAT": 90.0}


@dataclass(frozen=True)
class Site:
    """An agent's grid: a real hourly series, or an illustrative constant."""

    region: str
    name: str
    series: Path | None = None
    constant: float = 0.0

    def env(self) -> dict[str, str]:
        """Return the agent's ``[carbon]`` settings as environment variables."""
        env = {"EDGE_AGENT_CARBON_REGION": self.region}
        if self.series is not None:
            return env | {"EDGE_AGENT_CARBON_SERIES": str(self.series)}
        return env | {"EDGE_AGENT_CARBON_INTENSITY_G_PER_KWH": f"{self.constant:g}"}

    def now(self) -> float:
        """Return the intensity now (a 2022 series replays the same hour of 2022)."""
        if self.series is None:
            return self.constant
        return load_series(self.series).at_epoch(time.time())

    def label(self) -> str:
        where = f"{self.region} ({self.name})"
        if self.series is None:
            return f"{where}: constant {self.constant:g} g/kWh (illustrative, not measured)"
        return f"{where}: real 2022 hourly series {self.series.name}"


def sites(n: int) -> tuple[list[Site], str]:
    """Return the grids of ``n`` agents and, when the real series are missing, why."""
    folder = shipped_series_dir()
    out, missing = [], ""
    for region, name in REGIONS[:n]:
        path = folder / f"{region}_hourly_2022.csv"
        try:
            load_series(path)
        except (OSError, SeriesError) as err:
            missing = missing or f"no usable {path} ({err}); using illustrative constants"
            out.append(Site(region, name, constant=FALLBACK_G_PER_KWH[region]))
        else:
            out.append(Site(region, name, path))
    return out, missing
