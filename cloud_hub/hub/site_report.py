"""What an agent's heartbeat says about its site, parsed for the fleet-wide re-evaluation.

``parse_report``: the agent's carbon forecast, its mean load and the work it could move
(``deferred`` and ``queued``, see ``edge_agent/agent/core/deferral.py``: ``Deferrer.report``) as a
``SiteReport``; ``parse_outcomes``: what it says about moves it was issued. Bad fields raise
InvalidInput naming the field. The re-evaluation itself is ``reevaluate.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edge_agent.carbon_series import HOUR_S
from edge_agent.errors import InvalidInput

MAX_FORECAST_H = 72
MAX_DEFERRED = 200
MAX_QUEUED = 50
#: Outcomes one heartbeat may report.
MAX_OUTCOMES = 200
#: What an origin may report about a move; the final ones never change again.
OUTCOMES = ("accepted", "done", "failed", "refused")
_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class Work:
    """One deferred task as its agent reports it."""

    id: str
    task_class: str
    energy_j: float
    deadline_at: float
    not_before: float
    latest_start: float
    g_per_kwh: float  # the origin's forecast for its planned release hour (queued: now)
    queued: bool = False  # queued to run now (not deferred): only the target's hour now counts


@dataclass(frozen=True)
class SiteReport:
    """What one agent's latest heartbeat says about its grid, load and deferred work."""

    hour: int  # Unix hour of forecast[0]
    forecast: tuple[float, ...]  # gCO2/kWh per hour from ``hour`` on
    utilization: float  # mean over its devices, 0..1
    deferred: tuple[Work, ...]
    received_at: float
    mesh_id: str | None = None  # its id in the mesh (None: no mesh, no moves from or to it)
    peers: frozenset[str] = frozenset()  # the mesh peers it trusts and sees online

    def best(self, start: float, end: float) -> tuple[float, float] | None:
        """Return (lowest forecast intensity, its hour start) within [start, end], or None."""
        first = max(math.floor(start / HOUR_S), self.hour)
        last = min(math.floor(end / HOUR_S), self.hour + len(self.forecast) - 1)
        if last < first:
            return None
        g, h = min((self.forecast[h - self.hour], h) for h in range(first, last + 1))
        return g, max(start, h * HOUR_S)


def _num(doc: Mapping[str, Any], key: str, where: str, low: float = 0.0) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{where}.{key}: expected a finite number, got {value!r}")
    if value < low:
        raise InvalidInput(f"{where}.{key}: expected a number >= {low}, got {value!r}")
    return float(value)


def _work(items: Any, where: str, most: int, now: float, queued: bool) -> list[Work]:
    if items is None:
        return []
    if not isinstance(items, list) or len(items) > most:
        raise InvalidInput(f"{where}: expected a list of at most {most} tasks")
    work = []
    for i, item in enumerate(items):
        w = f"{where}[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            raise InvalidInput(f"{w}: expected an object with a string id")
        given = item.get("deadline_at")
        deadline = math.inf if queued and given is None else _num(item, "deadline_at", w)
        work.append(
            Work(
                item["id"],
                str(item.get("task_class", "default"))[:64],
                _num(item, "energy_j", w),
                deadline,
                now if queued else _num(item, "not_before", w),
                now if queued else _num(item, "latest_start", w),
                _num(item, "g_per_kwh", w),
                queued,
            )
        )
    return work


def mesh_ids(doc: Mapping[str, Any]) -> tuple[str | None, frozenset[str]]:
    """Return a heartbeat's (``mesh_id``, trusted online ``peers``); a bad id raises."""
    mesh_id = doc.get("mesh_id")
    if mesh_id is not None and (not isinstance(mesh_id, str) or not _ID.match(mesh_id)):
        raise InvalidInput(f"body.mesh_id: expected 1-64 of A-Z a-z 0-9 . _ -, got {mesh_id!r}")
    peers = doc.get("peers") or []
    ids = frozenset(p for p in peers if isinstance(p, str)) if isinstance(peers, list) else set()
    return mesh_id, frozenset(ids)


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
    work = _work(doc.get("deferred"), "body.deferred", MAX_DEFERRED, now, False)
    work += _work(doc.get("queued"), "body.queued", MAX_QUEUED, now, True)
    util = sum(utils) / len(utils) if utils else 0.0
    mesh_id, peers = mesh_ids(doc)
    return SiteReport(hour, values, min(1.0, max(0.0, util)), tuple(work), now, mesh_id, peers)


def parse_outcomes(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return a heartbeat's ``move_outcomes`` (InvalidInput names the bad field)."""
    items = doc.get("move_outcomes") or []
    if not isinstance(items, list) or len(items) > MAX_OUTCOMES:
        raise InvalidInput(f"body.move_outcomes: expected a list of at most {MAX_OUTCOMES}")
    out = []
    for i, item in enumerate(items):
        w = f"body.move_outcomes[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            raise InvalidInput(f"{w}: expected an object with the move's string id")
        state = item.get("state")
        if state not in OUTCOMES:
            raise InvalidInput(f"{w}.state: expected one of {', '.join(OUTCOMES)}, got {state!r}")
        reason, ran_on = item.get("reason"), item.get("ran_on")
        out.append(
            {
                "id": item["id"][:64],
                "state": state,
                "reason": None if reason is None else str(reason)[:300],
                "ran_on": None if ran_on is None else str(ran_on)[:64],
            }
        )
    return out
