"""Deferrable tasks in the agent: held (state ``deferred``) until a low-carbon, low-load hour.

A task submitted with ``deferrable: true`` and a deadline is not queued at once. The
``Deferrer`` asks the Placer what the task would cost now (a preview: its estimated
service time) and lets the shared ``WindowPlanner`` (``edge_agent.scheduling.window``, the
simulator's peak shifter uses the same one) pick its release hour: the hour before the
deadline with the lowest forecast intensity (the ``[carbon]`` series; a constant or no
carbon config makes every hour alike, so the task is released at once unless the load
forecast is full) whose forecast load leaves room, such that the task still starts by
``deadline - safety x (held work ahead + its estimate) - margin_s``. The load forecast is
``load_forecast`` when set (any work-seconds-per-hour forecast; the load predictor is not
one: it forecasts a device's utilization minutes ahead), else seasonal-naive from the work the
agent has seen (its telemetry history, then its own submissions).

The release time is stored with the task (``not_before``, and the ``deferral`` document
that ``explain`` shows), so holding survives a restart: ``restore`` takes the stored
deferred tasks back, and any whose time has passed are released at once.

The hub's fleet re-evaluation may move a held task to a cleaner site (``moved``): the plan
then names the peer (``moved_to``) and the target's clean hour as its release time, never
later than the task's own latest start, so the deadline guarantee holds wherever it runs.
When that time comes the task goes to ``forward`` (the mesh link forwards it to that peer,
where it runs at once: its window there has come) instead of the local queue; with no mesh
it is queued here as any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.store import Store
from edge_agent.agent.sensing.carbon import CarbonSource
from edge_agent.placement import Placer, TaskContract
from edge_agent.scheduling.window import HOUR_S, WindowPlanner

_log = logging.getLogger(__name__)
#: How far back the telemetry history seeds the load forecast.
HISTORY_S = 7 * 86400.0
#: Hours of intensity forecast, most deferred and most queued tasks a heartbeat carries.
FORECAST_H = 24
REPORT_MAX = 100
QUEUED_MAX = 50

#: Forwards a moved task to its peer once its release time comes (the mesh link).
Forward = Callable[[str, "Deferral"], Awaitable[None]]


@dataclass(frozen=True)
class Deferral:
    """Why and until when a task is held (stored as the task's ``deferral`` JSON)."""

    not_before: float  # Unix seconds: released (queued) at this time
    latest_start: float  # Unix seconds: the planner keeps the release before this
    estimate_s: float  # the Placer's service estimate the plan was made with
    forecast_g_per_kwh: float | None  # intensity forecast for the release hour
    now_g_per_kwh: float | None  # intensity when deferred
    guaranteed: bool  # False: no safe hour existed; released at once
    energy_j: float = 0.0  # the Placer's energy estimate (for the hub's re-evaluation)
    deadline_at: float = 0.0  # Unix seconds: the task must finish by then
    moved_to: str | None = None  # a mesh peer the hub's re-evaluation moved the task to
    move_id: str | None = None  # the hub's id of that move
    move_reason: str | None = None  # e.g. "moved by hub re-evaluation (saving 3.2 g)"

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready document, with its one-line explanation."""
        return {
            "not_before": self.not_before,
            "latest_start": self.latest_start,
            "estimate_s": self.estimate_s,
            "forecast_g_per_kwh": self.forecast_g_per_kwh,
            "now_g_per_kwh": self.now_g_per_kwh,
            "guaranteed": self.guaranteed,
            "energy_j": self.energy_j,
            "deadline_at": self.deadline_at,
            "moved_to": self.moved_to,
            "move_id": self.move_id,
            "move_reason": self.move_reason,
            "why": self.explain(),
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Deferral:
        """Return the deferral stored by ``to_dict``."""
        return cls(
            float(doc["not_before"]),
            float(doc["latest_start"]),
            float(doc["estimate_s"]),
            doc.get("forecast_g_per_kwh"),
            doc.get("now_g_per_kwh"),
            bool(doc["guaranteed"]),
            float(doc.get("energy_j", 0.0)),
            float(doc.get("deadline_at", 0.0)),
            doc.get("moved_to"),
            doc.get("move_id"),
            doc.get("move_reason"),
        )

    def explain(self) -> str:
        """Return e.g. "deferred until 14:00 UTC, carbon 212 vs 388 g/kWh now"."""
        when = datetime.fromtimestamp(self.not_before, UTC).strftime("%Y-%m-%d %H:%M UTC")
        text = f"deferred until {when}"
        if self.forecast_g_per_kwh is not None and self.now_g_per_kwh is not None:
            text += f", carbon {self.forecast_g_per_kwh:.0f} vs {self.now_g_per_kwh:.0f} g/kWh now"
        if not self.guaranteed:
            text += " (no safe later hour: released at once)"
        if self.moved_to is not None:
            text += f"; then forwarded to {self.moved_to}: {self.move_reason or 'moved'}"
        return text


class Deferrer:
    """Plans deferrable tasks' release and releases them when their hour comes."""

    def __init__(
        self,
        placer: Placer,
        carbon: CarbonSource | None,
        release: Callable[[str], Awaitable[None]],
        *,
        max_load: float = 0.7,
        safety: float = 2.0,
        margin_s: float = 600.0,
        clock: Callable[[], float] = time.time,
        forward: Forward | None = None,
    ) -> None:
        if not 0 < max_load <= 1:
            raise ValueError("max_load must be in (0, 1]")
        room = max_load * HOUR_S * max(1, len(placer.device_ids))
        self.planner = WindowPlanner(room, safety=safety, margin_s=margin_s)
        self.placer = placer
        self.carbon = carbon
        self._release = release
        self.clock = clock
        #: forecast work seconds of a Unix hour; None: seasonal-naive from history
        self.load_forecast: Callable[[int], float] | None = None
        #: takes a moved task at its release time (None: no mesh; it is queued here)
        self.forward = forward
        self._held: dict[str, tuple[float, int, float]] = {}  # id -> (not_before, hour, est)
        self._plans: dict[str, Deferral] = {}
        self._heap: list[tuple[float, str]] = []
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return len(self._held)

    def held(self) -> dict[str, float]:
        """Return {task id: not_before} of the tasks held now."""
        return {task_id: entry[0] for task_id, entry in self._held.items()}

    def seed(self, history: Iterable[tuple[float, float]]) -> None:
        """Count past work, (Unix time, estimated seconds) pairs, for the load forecast."""
        for ts, work_s in history:
            if math.isfinite(ts) and math.isfinite(work_s) and work_s >= 0:
                self.planner.observe(math.floor(ts / HOUR_S), work_s)

    def observe(self, contract: TaskContract, now: float | None = None) -> None:
        """Count a task that runs now (not deferred) in the load forecast."""
        est = self._estimate(contract)
        if math.isfinite(est):
            self.planner.observe(math.floor((now or self.clock()) / HOUR_S), est)

    def _estimate(self, contract: TaskContract) -> float:
        return self._preview(contract)[0]

    def _preview(self, contract: TaskContract) -> tuple[float, float]:
        """Return the (service s, energy J) the Placer estimates now (NaN: not placeable)."""
        decision = self.placer.preview(contract)
        if not decision.placed:
            return math.nan, math.nan
        return decision.service_s, decision.energy_j

    def plan(self, contract: TaskContract, deadline_at: float) -> Deferral | None:
        """Return when to release a deferrable task (None: it cannot be placed; queue it now).

        Commits the plan: call ``hold`` with it once the task is stored.
        """
        now = self.clock()
        est, energy = self._preview(contract)
        if not math.isfinite(est):
            return None
        source = self.carbon
        carbon = (lambda h: 0.0) if source is None else source.hour
        window = self.planner.choose(now, est, deadline_at, carbon, self.load_forecast)
        return Deferral(
            window.release_s,
            window.latest_start_s,
            est,
            None if source is None else window.forecast_g_per_kwh,
            None if source is None else source.at(now),
            window.guaranteed,
            energy,
            deadline_at,
        )

    async def load(self, store: Store) -> None:
        """Seed the load forecast from telemetry and hold the tasks stored as deferred."""
        self.seed(await store.work_history(self.clock() - HISTORY_S))
        for row in await store.deferred():
            self.restore(row["id"], Deferral.from_dict(row["deferral"]))

    def stored(self, row: dict[str, Any], created: bool, planned: dict[str, Any]) -> None:
        """Hold a deferred task once stored; a retried submission gives its plan back."""
        plan = Deferral.from_dict(planned)
        if created:
            self.hold(row["id"], plan)
        else:  # the task existed (Idempotency-Key): its own plan stands, this one is void
            self.planner.release(math.floor(plan.not_before / HOUR_S), plan.estimate_s)

    def ran(self, service_s: float) -> None:
        """Count work that ran now in the load forecast."""
        if math.isfinite(service_s) and service_s >= 0:
            self.planner.observe(math.floor(self.clock() / HOUR_S), service_s)

    def poke(self) -> None:
        """Wake the release loop (the clock or the held set changed)."""
        self._wake.set()

    def hold(self, task_id: str, deferral: Deferral) -> None:
        """Hold ``task_id`` until ``deferral.not_before``."""
        hour = math.floor(deferral.not_before / HOUR_S)
        self._held[task_id] = (deferral.not_before, hour, deferral.estimate_s)
        self._plans[task_id] = deferral
        heapq.heappush(self._heap, (deferral.not_before, task_id))
        self._wake.set()

    def restore(self, task_id: str, deferral: Deferral) -> None:
        """Hold a task stored as deferred (after a restart); its work counts as planned here
        unless it was moved to a peer."""
        hour = math.floor(deferral.not_before / HOUR_S)
        if deferral.moved_to is None:
            self.planner.planned[hour] = self.planner.planned.get(hour, 0.0) + deferral.estimate_s
        self.hold(task_id, deferral)

    def plan_of(self, task_id: str) -> Deferral | None:
        """Return the plan of a held task (None: not held)."""
        return self._plans.get(task_id)

    def moved(self, task_id: str, to: str, start_at: float, move_id: str, reason: str) -> Deferral:
        """Return the held task's plan moved to peer ``to`` from ``start_at`` on (not held yet).

        Raises ValueError saying why when the task is not held, moved already, or the
        target's hour comes after the task's latest safe start (its deadline would be at risk).
        """
        plan = self._plans.get(task_id)
        if plan is None:
            raise ValueError("it is no longer deferred here")
        if plan.moved_to is not None:
            raise ValueError(f"it was moved to {plan.moved_to} already")
        if not start_at <= plan.latest_start:
            raise ValueError("the target's hour comes after the task's latest safe start")
        release = max(self.clock(), start_at)
        return dataclasses.replace(
            plan, not_before=release, moved_to=to, move_id=move_id, move_reason=reason
        )

    def move(self, task_id: str, plan: Deferral) -> None:
        """Hold ``task_id`` with its moved ``plan`` (from ``moved``): its room here is freed."""
        self.cancel(task_id)
        self.hold(task_id, plan)

    def cancel(self, task_id: str) -> bool:
        """Stop holding ``task_id`` (cancelled); False if it was not held."""
        entry = self._held.pop(task_id, None)
        self._plans.pop(task_id, None)
        if entry is None:
            return False
        self.planner.release(entry[1], entry[2])
        return True

    def due(self) -> list[str]:
        """Pop and return the held tasks whose release time has come."""
        return [task_id for task_id, _ in self._take_due()]

    def _take_due(self) -> list[tuple[str, Deferral | None]]:
        now, out = self.clock(), []
        while self._heap and self._heap[0][0] <= now:
            _, task_id = heapq.heappop(self._heap)
            entry = self._held.get(task_id)
            if entry is not None and entry[0] <= now:
                del self._held[task_id]
                out.append((task_id, self._plans.pop(task_id, None)))
        return out

    def next_due(self) -> float:
        """Return the earliest release time held (inf when none)."""
        while self._heap and self._heap[0][1] not in self._held:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else math.inf

    def report(self, queued: Iterable[tuple[str, TaskContract, float]] = ()) -> dict[str, Any]:
        """Return the heartbeat's ``carbon`` forecast and compact ``deferred`` and ``queued``
        task lists (``queued``: (task id, contract, deadline_at) of tasks waiting here now).

        The hub's re-evaluation (cloud_hub/hub/reevaluate.py) reads them; without a
        ``[carbon]`` config there is nothing to compare, so ``carbon`` is None. A task moved
        to a peer already is not offered again.
        """
        if self.carbon is None:
            return {"carbon": None, "deferred": [], "queued": []}
        now = self.clock()
        hour = math.floor(now / HOUR_S)
        forecast = [self.carbon.hour(hour + i) for i in range(FORECAST_H)]
        g_now = self.carbon.at(now)
        waiting: list[dict[str, Any]] = []
        for task_id, contract, deadline_at in queued:
            if len(waiting) >= QUEUED_MAX:
                break
            energy = self._preview(contract)[1]
            if math.isfinite(energy):
                waiting.append(
                    {
                        "id": task_id,
                        "task_class": contract.task_class,
                        "energy_j": energy,
                        "deadline_at": deadline_at if math.isfinite(deadline_at) else None,
                        "g_per_kwh": g_now,
                    }
                )
        deferred = [
            {
                "id": task_id,
                "energy_j": plan.energy_j,
                "deadline_at": plan.deadline_at,
                "not_before": plan.not_before,
                "latest_start": plan.latest_start,
                "g_per_kwh": plan.forecast_g_per_kwh,
            }
            for task_id, plan in list(self._plans.items())[:REPORT_MAX]
            if math.isfinite(plan.energy_j)
            and plan.forecast_g_per_kwh is not None
            and plan.moved_to is None
        ]
        return {
            "carbon": {"hour": hour, "forecast": forecast},
            "deferred": deferred,
            "queued": waiting,
        }

    async def run(self, poll_s: float = 30.0) -> None:
        """Release held tasks when due (until cancelled); wakes at least every ``poll_s``."""
        while True:
            self._wake.clear()
            for task_id, plan in self._take_due():
                try:
                    if plan is not None and plan.moved_to is not None and self.forward:
                        await self.forward(task_id, plan)
                    else:
                        await self._release(task_id)
                except Exception:  # the task stays deferred in the store; retried at restart
                    _log.exception("releasing deferred task %s failed", task_id)
            wait = min(poll_s, max(0.0, self.next_due() - self.clock()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)


#: A plan released within this many seconds of submission did not hold the task.
HELD_AFTER_S = 1.0


def held_until(row: dict[str, Any]) -> str | None:
    """Return when a stored task is (or was) held until, ISO 8601 UTC; None if never held."""
    plan = row.get("deferral")
    if not isinstance(plan, dict) or "not_before" not in plan:
        return None
    not_before = float(plan["not_before"])
    if not_before - float(row.get("submitted_at") or 0.0) < HELD_AFTER_S:
        return None
    return datetime.fromtimestamp(not_before, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def deferred_submission(deferrer: Deferrer, task: NewTask) -> NewTask:
    """Return ``task`` with its deferral plan, or as is when it should be queued now."""
    now = deferrer.clock()
    plan = deferrer.plan(task.contract, now + task.contract.requirements.deadline_s)
    if plan is None or plan.not_before <= now:
        return task
    return dataclasses.replace(task, deferral=plan.to_dict())
