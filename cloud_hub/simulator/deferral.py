"""Peak shifting: hold deferrable tasks, release them into forecast low-carbon, low-load hours.

At a deferrable task's arrival the shifter picks, among the hours whose start is a safe
release (see ``_safe``: the held work ahead of it and its own, run serially at ``safety``
x the agents' estimates, plus ``margin_s``, end by its deadline, and no task held
earlier loses its own guarantee), the hour with the
lowest forecast intensity at the site the agent would place it on now (a preview by
the origin's Placer) whose forecast load leaves room for
it; earlier hours win ties, so a flat forecast releases at once. Forecasts are
seasonal-naive: an hour's intensity and load are taken to be those of the latest
already-seen hour at the same time of day (hours before the run come from the series'
own history). Nothing after ``now`` is read. Released work is placed by the chooser
(the agents' Placers), like any arrival. A task with no safe hour (a deadline shorter
than ``safety`` x its estimate + ``margin_s`` behind the held work) is released at once,
unguaranteed: it may queue behind work held earlier.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from cloud_hub.simulator.carbon import HOUR_S
from cloud_hub.simulator.engine import FleetState
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.workload import Task

DAY_H = 24


@dataclass(frozen=True)
class Hold:
    """One deferral decision: when the task arrived, when it is released, its deadline."""

    task: int
    arrived_s: float
    release_s: float
    deadline_s: float  # absolute
    forecast_g_per_kwh: float
    guaranteed: bool  # released at a safe time (else: no safe hour, released at once)


class PeakShifter:
    """A ``Holder`` for the engine: defers deferrable tasks, passes the others through."""

    def __init__(
        self,
        fleet: Fleet,
        estimate: Callable[[Task], tuple[float, int]],
        *,
        max_load: float = 0.7,
        safety: float = 2.0,
        margin_s: float = 600.0,
    ) -> None:
        if not 0 < max_load <= 1 or safety < 1 or margin_s < 0:
            raise ValueError("max_load must be in (0, 1], safety >= 1 and margin_s >= 0")
        self.fleet = fleet
        self.estimate = estimate  # the agents' (service s, box) estimate, never the truth
        self.max_load = max_load
        self.safety = safety
        self.margin_s = margin_s
        self.seen: dict[int, float] = {}  # estimated work seconds that started per hour
        self.planned: dict[int, float] = {}  # held work seconds per release hour
        self.slack: dict[int, float] = {}  # least deadline slack of the work held per hour
        self.holds: list[Hold] = []

    def forecast_carbon(self, box: int, hour: int, now_hour: int) -> float:
        """Return the seasonal-naive intensity forecast for ``hour`` made during ``now_hour``."""
        site = self.fleet.site(box)
        if hour <= now_hour:
            return site.at_hour(hour)
        return site.at_hour(hour - DAY_H * math.ceil((hour - now_hour) / DAY_H))

    def forecast_load(self, hour: int, now_hour: int) -> float:
        """Return the forecast work seconds of ``hour`` (seasonal-naive, else the mean)."""
        back = hour - DAY_H * max(1, math.ceil((hour - now_hour) / DAY_H))
        if back in self.seen or (self.seen and back >= min(self.seen)):
            return self.seen.get(back, 0.0)
        past = [v for h, v in self.seen.items() if h < now_hour]
        return sum(past) / len(past) if past else 0.0

    def _backlog(self, hour: int) -> float:
        """Return the held work pending at ``hour``'s start if all of it ran serially."""
        backlog = 0.0
        for h in range(min(self.planned, default=hour), hour):
            backlog = max(0.0, backlog + self.planned.get(h, 0.0) - HOUR_S)
        return backlog

    def _safe(self, hour: int, release: float, est: float, deadline: float) -> bool:
        """Return whether holding ``est`` s into ``hour`` keeps its and later holds' deadlines."""
        ahead = self._backlog(hour) + self.planned.get(hour, 0.0)
        if release + self.safety * (ahead + est) + self.margin_s > deadline:
            return False
        return all(self.safety * est <= s for h, s in self.slack.items() if h > hour)

    def _commit(self, hour: int, release: float, est: float, deadline: float) -> None:
        ahead = self._backlog(hour) + self.planned.get(hour, 0.0)
        own = deadline - (release + self.safety * (ahead + est) + self.margin_s)
        for h in self.slack:
            if h > hour:
                self.slack[h] -= self.safety * est
        self.slack[hour] = min(self.slack.get(hour, math.inf), own)
        self.planned[hour] = self.planned.get(hour, 0.0) + est
        self.seen[hour] = self.seen.get(hour, 0.0) + est

    def hold(self, task: Task, now: float, state: FleetState) -> float:
        """Return the release time of ``task`` (``now`` for work that is not deferrable)."""
        hour = math.floor(now / HOUR_S)
        est, box = self.estimate(task)
        if not task.deferrable or not math.isfinite(est):
            self.seen[hour] = self.seen.get(hour, 0.0) + (est if math.isfinite(est) else 0.0)
            return now
        deadline = task.t + task.deadline_s
        room = self.max_load * HOUR_S * len(self.fleet.devices)
        best: tuple[float, int, float] | None = None  # (forecast, hour, release)
        fallback: tuple[float, int, float] | None = None
        for h in range(hour, math.floor(deadline / HOUR_S) + 1):
            release = now if h == hour else h * HOUR_S
            if not self._safe(h, release, est, deadline):
                continue
            cand = (self.forecast_carbon(box, h, hour), h, release)
            fallback = cand if fallback is None or cand < fallback else fallback
            load = self.forecast_load(h, hour) + self.planned.get(h, 0.0) + est
            if load <= room and (best is None or cand < best):
                best = cand
        pick = best or fallback
        forecast, h, release = pick or (self.forecast_carbon(box, hour, hour), hour, now)
        self._commit(h, release, est, deadline)
        self.holds.append(Hold(task.index, now, release, deadline, forecast, pick is not None))
        return release


def deadline_misses(tasks: list[Task], finish_s: list[float], device: list[int]) -> list[int]:
    """Return the deferrable tasks that finished after their deadline or were rejected."""
    return [
        t.index
        for t in tasks
        if t.deferrable and (device[t.index] < 0 or finish_s[t.index] > t.t + t.deadline_s)
    ]
