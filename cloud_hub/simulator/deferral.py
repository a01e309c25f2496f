"""Peak shifting: hold deferrable tasks, release them into forecast low-carbon, low-load hours.

At a deferrable task's arrival the shifter picks its release hour with the agent's own
planner (``edge_agent.scheduling.window``: the safe hour with the lowest forecast
intensity, at the site the agent would place it on now — a preview by the origin's
Placer — whose forecast load leaves room for it). Forecasts are seasonal-naive: an hour's
intensity and load are taken to be those of the latest already-seen hour at the same
time of day (hours before the run come from the series' own history). Nothing after
``now`` is read. Released work is placed by the chooser (the agents' Placers), like any
arrival. A task with no safe hour is released at once, unguaranteed: it may queue
behind work held earlier.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from cloud_hub.simulator.engine import FleetState
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.workload import Task
from edge_agent.scheduling.window import DAY_H, HOUR_S, WindowPlanner


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
    """A ``Holder`` for the engine: defers deferrable tasks, passes the others through.

    The hour choice is the agent's own (``edge_agent.scheduling.window.WindowPlanner``);
    this class adds the simulator's seasonal-naive intensity forecast per site.
    """

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
        room = max_load * HOUR_S * len(fleet.devices)
        self.planner = WindowPlanner(room, safety=safety, margin_s=margin_s)
        self.holds: list[Hold] = []

    def forecast_carbon(self, box: int, hour: int, now_hour: int) -> float:
        """Return the seasonal-naive intensity forecast for ``hour`` made during ``now_hour``."""
        site = self.fleet.site(box)
        if hour <= now_hour:
            return site.at_hour(hour)
        return site.at_hour(hour - DAY_H * math.ceil((hour - now_hour) / DAY_H))

    def hold(self, task: Task, now: float, state: FleetState) -> float:
        """Return the release time of ``task`` (``now`` for work that is not deferrable)."""
        hour = math.floor(now / HOUR_S)
        est, box = self.estimate(task)
        if not task.deferrable or not math.isfinite(est):
            self.planner.observe(hour, est if math.isfinite(est) else 0.0)
            return now
        deadline = task.t + task.deadline_s
        window = self.planner.choose(
            now, est, deadline, lambda h: self.forecast_carbon(box, h, hour)
        )
        self.holds.append(
            Hold(
                task.index,
                now,
                window.release_s,
                deadline,
                window.forecast_g_per_kwh,
                window.guaranteed,
            )
        )
        return window.release_s


def deadline_misses(tasks: list[Task], finish_s: list[float], device: list[int]) -> list[int]:
    """Return the deferrable tasks that finished after their deadline or were rejected."""
    return [
        t.index
        for t in tasks
        if t.deferrable and (device[t.index] < 0 or finish_s[t.index] > t.t + t.deadline_s)
    ]
