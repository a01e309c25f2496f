"""Fleet-wide re-evaluation of deferred and queued work, and the moves it issues (issue 8).

Every ``interval_s`` (``[hub] reevaluate_s``, default 300 s: the seed report's 5-minute
global evaluation) the hub looks at the work each agent reports in its heartbeat
(``carbon``, ``deferred`` and ``queued``, see ``edge_agent/agent/core/deferral.py``:
``Deferrer.report``) and, for each task, at every other current agent: the lowest intensity
that agent forecasts before the task's latest start (a queued task: its current hour), if
that agent's load leaves room (mean device utilization at most ``max_load``). A move *pays*
when the target's grams are below the origin's planned grams by more than ``min_saving`` (a
fraction), scored like the kernel's carbon objective: the task's estimated energy x
intensity / 3.6e6. The energy is the origin's estimate (the target's own placer decides
there).

A move that pays is *issued* when the origin can carry it out: both sites are in the mesh
(their heartbeats name their mesh ids) and the target is one of the origin's trusted online
peers. An issued move rides in the origin's next heartbeat answers (``moves``) until the
origin reports its outcome (``move_outcomes``: accepted, then done or failed; or refused,
with the reason). A move is issued once per (task, target): a refused one is never issued
again. ``GET /v1/reevaluation`` lists the moves that would pay and the issued ones with their
outcome (``executed``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from cloud_hub.hub import liveness
from cloud_hub.hub.site_report import SiteReport, parse_outcomes, parse_report
from edge_agent.carbon_series import grams

if TYPE_CHECKING:
    from cloud_hub.hub.service import Hub

_log = logging.getLogger(__name__)

INTERVAL_S = 300.0
#: Move records kept (issued and finished); the oldest finished ones go first.
MAX_RECORDS = 500
#: Move states that never change again (what an origin may report: site_report.OUTCOMES).
FINAL = frozenset({"done", "failed", "refused", "expired"})


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
    queued: bool = False  # the task was queued (not deferred) at the origin
    to: str | None = None  # the target's mesh id: where the origin forwards it
    executable: bool = False  # both in the mesh and the target a trusted peer of the origin


class Reevaluator:
    """Keeps each agent's latest site report, evaluates fleet-wide moves and tracks them."""

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
        #: move id -> record (issued first; insertion order is issue order)
        self.records: dict[str, dict[str, Any]] = {}
        #: (origin, task id, target mesh id) -> move id: a move is issued once, ever
        self._issued: dict[tuple[str, str, str], str] = {}
        self._seq = itertools.count(1)
        self._prefix = secrets.token_hex(3)  # move ids stay unique across hub restarts

    def observe(self, agent_id: str, doc: Mapping[str, Any]) -> None:
        """Keep a heartbeat's site report and apply its move outcomes.

        A bad report raises InvalidInput naming the field, before anything is kept.
        """
        now = self.clock()
        report = parse_report(doc, now)
        outcomes = parse_outcomes(doc)
        if report is None:
            self.sites.pop(agent_id, None)
        else:
            self.sites[agent_id] = report
        for outcome in outcomes:
            record = self.records.get(outcome["id"])
            if record is None or record["origin"] != agent_id or record["state"] in FINAL:
                continue  # unknown (forgotten), another agent's, or settled already
            if record["state"] == outcome["state"]:
                continue
            record.update(
                state=outcome["state"],
                reason=outcome["reason"] or record["reason"],
                ran_on=outcome["ran_on"],
                updated_at=now,
            )
            _log.info(
                "move %s of task %s from %s to %s: %s%s",
                record["id"],
                record["task_id"],
                agent_id,
                record["to"],
                outcome["state"],
                f" ({outcome['reason']})" if outcome["reason"] else "",
            )

    def pending(self, agent_id: str) -> list[dict[str, Any]]:
        """Return the moves ``agent_id`` should carry out (its heartbeat answer's ``moves``)."""
        return [
            {
                "id": r["id"],
                "task_id": r["task_id"],
                "to": r["to"],
                "reason": r["reason"],
                "saving_g": r["saving_g"],
                "start_at": r["start_at"],
            }
            for r in self.records.values()
            if r["origin"] == agent_id and r["state"] == "issued"
        ]

    def issue(self, move: Move) -> dict[str, Any] | None:
        """Issue ``move`` (to ``move.to``); return its record (None: another move of the task
        is under way, or this one was issued before and its record is forgotten)."""
        if move.to is None:
            raise ValueError("a move names the target's mesh id (to)")
        key = (move.origin, move.task_id, move.to)
        if key in self._issued:
            return self.records.get(self._issued[key])
        if any(
            r["origin"] == move.origin and r["task_id"] == move.task_id and r["state"] not in FINAL
            for r in self.records.values()
        ):
            return None
        now = self.clock()
        move_id = f"mv-{self._prefix}-{next(self._seq)}"
        record = {
            "id": move_id,
            "task_id": move.task_id,
            "origin": move.origin,
            "target": move.target,
            "to": move.to,
            "queued": move.queued,
            "start_at": move.start_at,
            "saving_g": move.saving_g,
            "reason": f"moved by hub re-evaluation (saving {move.saving_g:.3g} g)",
            "state": "issued",
            "ran_on": None,
            "issued_at": now,
            "updated_at": now,
        }
        self._issued[key] = move_id
        self.records[move_id] = record
        self._trim()
        return record

    def _trim(self) -> None:
        while len(self.records) > MAX_RECORDS:
            old = next((k for k, r in self.records.items() if r["state"] in FINAL), None)
            if old is None:
                return
            del self.records[old]

    def _expire(self, now: float) -> None:
        """An issued move whose task its origin no longer reports is expired (it ran first)."""
        for r in self.records.values():
            if r["state"] != "issued" or now - r["issued_at"] < self.interval_s:
                continue
            site = self.sites.get(r["origin"])
            if site is None or all(w.id != r["task_id"] for w in site.deferred):
                r.update(
                    state="expired", reason="the origin no longer holds the task", updated_at=now
                )

    def executed(self) -> list[dict[str, Any]]:
        """Return the issued moves with their outcome, newest first."""
        return [dict(r) for r in reversed(self.records.values())]

    def evaluate(self, current: set[str]) -> dict[str, Any]:
        """Return the moves that would pay among the ``current`` agents; issue executable ones."""
        now = self.clock()
        self._expire(now)
        sites = {a: r for a, r in self.sites.items() if a in current}
        moves: list[Move] = []
        for origin, report in sites.items():
            for w in report.deferred:
                if not w.queued and w.latest_start <= now:
                    continue
                here = grams(w.energy_j, w.g_per_kwh)
                best: Move | None = None
                for target, other in sites.items():
                    if target == origin or other.utilization > self.max_load:
                        continue
                    found = other.best(now, now if w.queued else w.latest_start)
                    if found is None:
                        continue
                    g, start = found
                    there = grams(w.energy_j, g)
                    if g >= w.g_per_kwh * (1 - self.min_saving):
                        continue
                    if best is None or there < best.target_carbon_g:
                        saving = here - there
                        fraction = 1 - g / w.g_per_kwh if w.g_per_kwh > 0 else 0.0
                        to = other.mesh_id
                        ok = report.mesh_id is not None and to is not None and to in report.peers
                        best = Move(
                            w.id, w.task_class, origin, target, w.g_per_kwh, g, start,
                            here, there, saving, fraction, w.queued, to, ok,
                        )  # fmt: skip
                if best is not None:
                    moves.append(best)
        moves.sort(key=lambda m: -m.saving_g)
        listed = []
        for m in moves:
            row = asdict(m)
            record = self.issue(m) if m.executable else None
            row["move_id"] = None if record is None else record["id"]
            listed.append(row)
        self.latest = {
            "evaluated_at": now,
            "interval_s": self.interval_s,
            "sites": len(sites),
            "deferred": sum(sum(not w.queued for w in r.deferred) for r in sites.values()),
            "queued": sum(sum(w.queued for w in r.deferred) for r in sites.values()),
            "moves": listed,
            "saving_g": sum(m.saving_g for m in moves),
        }
        return self.view()

    def view(self) -> dict[str, Any]:
        """Return the latest evaluation with the issued moves and their outcomes."""
        return {**self.latest, "executed": self.executed()}

    async def evaluate_hub(self, hub: Hub) -> dict[str, Any]:
        """Evaluate with the hub's liveness: only agents whose data is current count."""
        agents = await hub.store.agents()
        states = liveness.states(agents, self.clock(), hub.stale_after_s())
        return self.evaluate({a for a, s in states.items() if s in liveness.CURRENT})

    async def run(self, hub: Hub) -> None:
        """Evaluate every ``interval_s`` (until cancelled)."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                result = await self.evaluate_hub(hub)
                if result["moves"]:
                    _log.info(
                        "re-evaluation: %s moves would save %.3g g CO2 (%s issued)",
                        len(result["moves"]),
                        result["saving_g"],
                        sum(m["move_id"] is not None for m in result["moves"]),
                    )
            except Exception:  # keep evaluating; one bad pass is logged
                _log.exception("fleet re-evaluation failed")
