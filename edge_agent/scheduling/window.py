"""Peak shifting: choose the hour a deferrable task is released in (agent and simulator).

Time is counted in whole hours (``hour`` = floor(seconds / 3600)) from any origin: Unix
time in the agent, simulated time in the simulator. For a task arriving at ``now`` with
an estimated service ``est_s`` and an absolute ``deadline``, ``WindowPlanner.choose`` looks
at every hour from now to the deadline whose start is a *safe* release: the held work
ahead of it and the task's own, run serially at ``safety`` x the estimates, plus
``margin_s``, end by the deadline, and no task held earlier loses its own guarantee. Among
those it picks the hour with the lowest forecast intensity whose forecast load leaves room
for it (earlier hours win ties, so a flat forecast releases at once); if no safe hour has
room, the lowest-intensity safe hour. A task with no safe hour at all (a deadline shorter
than ``safety`` x its estimate + ``margin_s`` behind the held work) is released at once,
unguaranteed.

The intensity forecast is the caller's (a series, or seasonal-naive in the simulator). The
load forecast is the caller's when given (the load predictor), else seasonal-naive from
the work the planner has seen start: an hour's load is that of the latest already-seen
hour at the same time of day, else the mean of the past hours.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

HOUR_S = 3600.0
DAY_H = 24
#: Hours ahead a release is considered in: a deadline further away plans within this window
#: (no intensity forecast reaches further, and one task's planning stays bounded work).
HORIZON_H = 7 * DAY_H


@dataclass(frozen=True)
class Window:
    """A release decision: when, in which hour, at what forecast intensity, guaranteed?"""

    release_s: float
    hour: int
    forecast_g_per_kwh: float
    guaranteed: bool  # released at a safe time (else: no safe hour, released at once)
    latest_start_s: float  # deadline - safety x (held work ahead + own) - margin


class WindowPlanner:
    """Holds the planned (held) work per hour and picks safe, clean, uncrowded hours."""

    def __init__(self, room_s: float, *, safety: float = 2.0, margin_s: float = 600.0) -> None:
        if not room_s > 0 or safety < 1 or margin_s < 0:
            raise ValueError("room_s must be > 0, safety >= 1 and margin_s >= 0")
        self.room_s = room_s  # work seconds an hour may take (max load x devices x 3600)
        self.safety = safety
        self.margin_s = margin_s
        self.seen: dict[int, float] = {}  # estimated work seconds that started per hour
        self.planned: dict[int, float] = {}  # held work seconds per release hour
        self.slack: dict[int, float] = {}  # least deadline slack of the work held per hour

    def observe(self, hour: int, work_s: float) -> None:
        """Count ``work_s`` seconds of work that started (or arrived to run) in ``hour``."""
        self.seen[hour] = self.seen.get(hour, 0.0) + work_s

    def forecast_load(self, hour: int, now_hour: int) -> float:
        """Return the forecast work seconds of ``hour`` (seasonal-naive, else the mean)."""
        back = hour - DAY_H * max(1, math.ceil((hour - now_hour) / DAY_H))
        if back in self.seen or (self.seen and back >= min(self.seen)):
            return self.seen.get(back, 0.0)
        past = [v for h, v in self.seen.items() if h < now_hour]
        return sum(past) / len(past) if past else 0.0

    def _backlog(self, hour: int) -> float:
        """Return the held work pending at ``hour``'s start if all of it ran serially."""
        backlog, previous = 0.0, None
        for h in sorted(h for h in self.planned if h < hour):  # hours with held work only
            if previous is not None:  # the idle hours between drain it
                backlog = max(0.0, backlog - HOUR_S * (h - previous - 1))
            backlog = max(0.0, backlog + self.planned[h] - HOUR_S)
            previous = h
        if previous is not None:
            backlog = max(0.0, backlog - HOUR_S * (hour - previous - 1))
        return backlog

    def _ahead(self, hour: int) -> float:
        return self._backlog(hour) + self.planned.get(hour, 0.0)

    def _safe(self, hour: int, release: float, est: float, deadline: float) -> bool:
        """Return whether holding ``est`` s into ``hour`` keeps its and later holds' deadlines."""
        ahead = self._ahead(hour)
        if release + self.safety * (ahead + est) + self.margin_s > deadline:
            return False
        # work already held into this hour counts too: released together, the new task may
        # run before it (the scheduler orders a release by priority, not by arrival)
        return all(self.safety * est <= s for h, s in self.slack.items() if h >= hour)

    def _commit(self, hour: int, release: float, est: float, deadline: float) -> None:
        ahead = self._ahead(hour)
        own = deadline - (release + self.safety * (ahead + est) + self.margin_s)
        for h in self.slack:
            if h >= hour:
                self.slack[h] -= self.safety * est
        self.slack[hour] = min(self.slack.get(hour, math.inf), own)
        self.planned[hour] = self.planned.get(hour, 0.0) + est
        self.seen[hour] = self.seen.get(hour, 0.0) + est

    def choose(
        self,
        now: float,
        est: float,
        deadline: float,
        carbon: Callable[[int], float],
        load: Callable[[int], float] | None = None,
    ) -> Window:
        """Pick and commit the release of ``est`` s of work arriving at ``now``.

        ``carbon(hour)`` is the intensity forecast; ``load(hour)``, when given, the forecast
        work seconds of an hour (else the planner's seasonal-naive one).
        """
        hour = math.floor(now / HOUR_S)
        best: tuple[float, int, float] | None = None  # (forecast, hour, release)
        fallback: tuple[float, int, float] | None = None
        last = min(math.floor(deadline / HOUR_S), hour + HORIZON_H)  # a year-long deadline
        for h in range(hour, last + 1):  # must not make one submission plan 8,760 hours
            release = now if h == hour else h * HOUR_S
            if not self._safe(h, release, est, deadline):
                continue
            cand = (carbon(h), h, release)
            fallback = cand if fallback is None or cand < fallback else fallback
            expected = load(h) if load is not None else self.forecast_load(h, hour)
            if expected + self.planned.get(h, 0.0) + est <= self.room_s and (
                best is None or cand < best
            ):
                best = cand
        pick = best or fallback
        forecast, h, release = pick or (carbon(hour), hour, now)
        latest = deadline - self.safety * (self._ahead(h) + est) - self.margin_s
        self._commit(h, release, est, deadline)
        return Window(release, h, forecast, pick is not None, latest)

    def release(self, hour: int, est: float) -> None:
        """Forget ``est`` s of work held into ``hour`` (cancelled before its release)."""
        left = self.planned.get(hour, 0.0) - est
        if left > 1e-9:
            self.planned[hour] = left
        else:
            self.planned.pop(hour, None)
