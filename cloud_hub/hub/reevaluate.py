"""Fleet-wide re-evaluation of deferred work: which moves between sites would pay (issue 8).

Every ``interval_s`` (default 300 s, the seed report's 5-minute global evaluation) the hub
looks at the deferred tasks each agent reports in its heartbeat (``carbon`` and
``deferred``, see ``edge_agent/agent/deferral.py``: ``Deferrer.report``) and, for each,
at every other current agent: the lowest intensity that agent forecasts before the task's
latest start, if that agent's load leaves room (mean device utilization at most
``max_load``). A move *pays* when the target's grams are below the origin's planned grams
by more than ``min_saving`` (a fraction), scored like the kernel's carbon objective: the
task's estimated energy x intensity / 3.6e6. The energy is the origin's estimate (the
target's devices may differ: the target's own placer decides there).

This module only evaluates: ``GET /v1/reevaluation`` returns the moves that would pay
with their predicted saving. Executing a move (the origin offloading the task through the
mesh) is not built yet.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from cloud_hub.hub import liveness
from edge_agent.carbon_series import HOUR_S, grams
from edge_agent.errors import InvalidInput

if TYPE_CHECKING:
    from cloud_hub.hub.service import Hub

_log = logging.getLogger(__name__)

INTERVAL_S = 300.0
MAX_FORECAST_H = 72
MAX_DEFERRED = 200


@dataclass(frozen=True)
class Work:
    """One deferred task as its agent reports it."""

    id: str
    task_class: str
    energy_j: float
    deadline_at: float
    not_before: float
    latest_start: float
    g_per_kwh: float  # the origin's forecast for its planned release hour


@dataclass(frozen=True)
class SiteReport:
    """What one agent's latest heartbeat says about its grid, load and deferred work."""

    hour: int  # Unix hour of forecast[0]
    forecast: tuple[float, ...]  # gCO2/kWh per hour from ``hour`` on
    utilization: float  # mean over its devices, 0..1
    deferred: tuple[Work, ...]
    received_at: float

    def best(self, start: float, end: float) -> tuple[float, float] | None:
        """Return (lowest forecast intensity, its hour start) within [start, end], or None."""
        first = max(math.floor(start / HOUR_S), self.hour)
        last = min(math.floor(end / HOUR_S), self.hour + len(self.forecast) - 1)
        if last < first:
            return None
        g, h = min((self.forecast[h - self.hour], h) for h in range(first, last + 1))
        return g, max(start, h * HOUR_S)


@dataclass(frozen=True)
class Move:
    """A move that would pay: task, origin, target, intensities and predicted saving."""

    task_id: str
    task_class: str
    origin: str
    target: str
    origin_g_per_kwh: float
    target_g_per_kwh: float
    start_at: float  # when the target's cleanest hour starts (before the latest start)
    origin_carbon_g: float
    target_carbon_g: float
    saving_g: float
    saving_fraction: float


def _num(doc: Mapping[str, Any], key: str, where: str, low: float = 0.0) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{where}.{key}: expected a finite number, got {value!r}")
    if value < low:
        raise InvalidInput(f"{where}.{key}: expected a number >= {low}, got {value!r}")
    return float(value)


def parse_report(doc: Mapping[str, Any], now: float) -> SiteReport | None:
    """Return a heartbeat's site report (None when it carries no ``carbon``)."""
    carbon = doc.get("carbon")
    if carbon is None:
        return None
    if not isinstance(carbon, Mapping):
        raise InvalidInput("body.carbon: expected an object {hour, forecast}")
    forecast = carbon.get("forecast")
    if not isinstance(forecast, list) or not 1 <= len(forecast) <= MAX_FORECAST_H:
        raise InvalidInput(f"body.carbon.forecast: expected 1..{MAX_FORECAST_H} numbers")
    values = tuple(
        _num({"v": v}, "v", f"body.carbon.forecast[{i}]") for i, v in enumerate(forecast)
    )
    hour = int(_num(carbon, "hour", "body.carbon"))
    utils = [
        float(d["utilization"])
        for d in doc.get("devices") or []
        if isinstance(d, Mapping) and isinstance(d.get("utilization"), int | float)
    ]
    items = doc.get("deferred") or []
    if not isinstance(items, list) or len(items) > MAX_DEFERRED:
        raise InvalidInput(f"body.deferred: expected a list of at most {MAX_DEFERRED} tasks")
    work = []
    for i, item in enumerate(items):
        w = f"body.deferred[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            raise InvalidInput(f"{w}: expected an object with a string id")
        work.append(
            Work(
                item["id"],
                str(item.get("task_class", "default"))[:64],
                _num(item, "energy_j", w),
                _num(item, "deadline_at", w),
                _num(item, "not_before", w),
                _num(item, "latest_start", w),
                _num(item, "g_per_kwh", w),
            )
        )
    util = sum(utils) / len(utils) if utils else 0.0
    return SiteReport(hour, values, min(1.0, max(0.0, util)), tuple(work), now)


class Reevaluator:
    """Keeps each agent's latest site report and evaluates fleet-wide moves."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        interval_s: float = INTERVAL_S,
        min_saving: float = 0.2,
        max_load: float = 0.7,
    ) -> None:
        if not (interval_s > 0 and 0 <= min_saving < 1 and 0 < max_load <= 1):
            raise ValueError("interval_s > 0, min_saving in [0, 1), max_load in (0, 1]")
        self.clock = clock
        self.interval_s = interval_s
        self.min_saving = min_saving
        self.max_load = max_load
        self.sites: dict[str, SiteReport] = {}
        self.latest: dict[str, Any] = {"evaluated_at": None, "moves": [], "sites": 0}

    def observe(self, agent_id: str, doc: Mapping[str, Any]) -> None:
        """Keep the site report of a heartbeat (a bad one raises InvalidInput naming the field)."""
        report = parse_report(doc, self.clock())
        if report is None:
            self.sites.pop(agent_id, None)
        else:
            self.sites[agent_id] = report

    def evaluate(self, current: set[str]) -> dict[str, Any]:
        """Return the moves that would pay among the ``current`` (online, fresh) agents."""
        now = self.clock()
        sites = {a: r for a, r in self.sites.items() if a in current}
        moves: list[Move] = []
        for origin, report in sites.items():
            for w in report.deferred:
                if w.latest_start <= now:
                    continue
                here = grams(w.energy_j, w.g_per_kwh)
                best: Move | None = None
                for target, other in sites.items():
                    if target == origin or other.utilization > self.max_load:
                        continue
                    found = other.best(now, w.latest_start)
                    if found is None:
                        continue
                    g, start = found
                    there = grams(w.energy_j, g)
                    if g >= w.g_per_kwh * (1 - self.min_saving):
                        continue
                    if best is None or there < best.target_carbon_g:
                        saving = here - there
                        fraction = 1 - g / w.g_per_kwh if w.g_per_kwh > 0 else 0.0
                        best = Move(
                            w.id, w.task_class, origin, target, w.g_per_kwh, g, start,
                            here, there, saving, fraction,
                        )  # fmt: skip
                if best is not None:
                    moves.append(best)
        moves.sort(key=lambda m: -m.saving_g)
        self.latest = {
            "evaluated_at": now,
            "interval_s": self.interval_s,
            "sites": len(sites),
            "deferred": sum(len(r.deferred) for r in sites.values()),
            "moves": [asdict(m) for m in moves],
            "saving_g": sum(m.saving_g for m in moves),
            "executed": False,  # moving work between sites is not built yet: evaluation only
        }
        return self.latest

    async def evaluate_hub(self, hub: Hub) -> dict[str, Any]:
        """Evaluate with the hub's liveness: only agents whose data is current count."""
        agents = await hub.store.agents()
        states = liveness.states(agents, self.clock(), hub.config.stale_after_s)
        return self.evaluate({a for a, s in states.items() if s in liveness.CURRENT})

    async def run(self, hub: Hub) -> None:
        """Evaluate every ``interval_s`` (until cancelled)."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                result = await self.evaluate_hub(hub)
                if result["moves"]:
                    _log.info(
                        "re-evaluation: %s moves would save %.3g g CO2",
                        len(result["moves"]),
                        result["saving_g"],
                    )
            except Exception:  # keep evaluating; one bad pass is logged
                _log.exception("fleet re-evaluation failed")
