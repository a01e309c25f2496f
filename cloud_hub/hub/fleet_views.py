"""What the dashboard shows of the system beyond each agent: the mesh, the grid, the work.

* **Mesh**: who trusts whom. Each heartbeat may carry ``peer_links`` (docs/hub-protocol.md
  §12): every peer in the agent's mesh table by mesh id, with its state and heartbeat
  round-trip time. ``MeshLinks`` keeps the latest per agent (in memory: the next heartbeat
  after a hub restart refills it) and names both ends by their hub agent ids, through the
  ``mesh_id`` each heartbeat states.
* **Carbon**: each site's intensity now and its next clean window (the cleanest hour of its
  forecast from now on), from the re-evaluator's site reports.
* **Deferred**: the tasks each site holds for a later hour, from the same reports, and those
  held until a move to a cleaner site (accepted moves).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cloud_hub.hub.site_report import SiteReport, mesh_ids
from edge_agent.carbon_series import HOUR_S
from edge_agent.errors import InvalidInput

#: Links one heartbeat may report (the agent's peer table is smaller).
MAX_LINKS = 1024
_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_STATES = ("online", "suspect", "offline")


@dataclass(frozen=True)
class Link:
    """One peer in an agent's mesh table, as its heartbeat reports it."""

    mesh_id: str
    state: str
    rtt_ms: float | None


def parse_links(doc: Mapping[str, Any]) -> tuple[str | None, tuple[Link, ...]]:
    """Return a heartbeat's (``mesh_id``, ``peer_links``); InvalidInput names a bad field."""
    mesh_id = mesh_ids(doc)[0]
    items = doc.get("peer_links") or []
    if not isinstance(items, list) or len(items) > MAX_LINKS:
        raise InvalidInput(f"body.peer_links: expected a list of at most {MAX_LINKS} objects")
    links = []
    for i, item in enumerate(items):
        w = f"body.peer_links[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidInput(f"{w}: expected {{id, state, rtt_ms}}")
        peer, state, rtt = item.get("id"), item.get("state"), item.get("rtt_ms")
        if not isinstance(peer, str) or not _ID.match(peer):
            raise InvalidInput(f"{w}.id: expected the peer's mesh id, got {peer!r}")
        if state not in _STATES:
            raise InvalidInput(f"{w}.state: expected one of {', '.join(_STATES)}, got {state!r}")
        if rtt is not None and (
            isinstance(rtt, bool)
            or not isinstance(rtt, int | float)
            or not math.isfinite(rtt)
            or rtt < 0
        ):
            raise InvalidInput(f"{w}.rtt_ms: expected milliseconds (>= 0) or null, got {rtt!r}")
        links.append(Link(peer, state, None if rtt is None else float(rtt)))
    return mesh_id, tuple(links)


class MeshLinks:
    """The latest mesh table each agent reported, named by hub agent ids."""

    def __init__(self) -> None:
        self._reports: dict[str, tuple[str | None, tuple[Link, ...], float]] = {}

    def observe(self, agent_id: str, doc: Mapping[str, Any], now: float) -> None:
        """Keep a heartbeat's mesh table (checked first: a bad one raises, keeping nothing)."""
        mesh_id, links = parse_links(doc)
        self._reports[agent_id] = (mesh_id, links, now)

    def view(self, names: Mapping[str, str]) -> list[dict[str, Any]]:
        """Return every link ``from`` → ``to`` (hub agent ids; a peer the hub does not know
        keeps its mesh id, ``to_agent`` None) with its state and RTT, for the agents in
        ``names`` (agent id -> its state at the hub)."""
        by_mesh = {m: a for a, (m, _, _) in self._reports.items() if m is not None and a in names}
        out = []
        for agent_id in sorted(self._reports):
            if agent_id not in names:
                continue
            mesh_id, links, at = self._reports[agent_id]
            for link in links:
                target = by_mesh.get(link.mesh_id)
                out.append(
                    {
                        "from": agent_id,
                        "from_mesh_id": mesh_id,
                        "from_state": names[agent_id],
                        "to": target or link.mesh_id,
                        "to_agent": target,
                        "to_mesh_id": link.mesh_id,
                        "state": link.state,
                        "rtt_ms": link.rtt_ms,
                        "reported_at": at,
                    }
                )
        return out


def carbon_view(sites: Mapping[str, SiteReport], now: float) -> list[dict[str, Any]]:
    """Return each site's grid: intensity this hour and its next clean window."""
    out = []
    hour = math.floor(now / HOUR_S)
    for agent_id in sorted(sites):
        site = sites[agent_id]
        ahead = [(g, site.hour + i) for i, g in enumerate(site.forecast) if site.hour + i >= hour]
        now_g = ahead[0][0] if ahead and ahead[0][1] == hour else None
        clean = min(ahead) if ahead else None  # the earliest of the cleanest hours
        out.append(
            {
                "agent_id": agent_id,
                "g_per_kwh_now": now_g,
                "clean_g_per_kwh": None if clean is None else clean[0],
                "clean_at": None if clean is None else max(now, clean[1] * HOUR_S),
                "forecast_hours": len(ahead),
                "reported_at": site.received_at,
            }
        )
    return out


def deferred_view(
    sites: Mapping[str, SiteReport], moves: Iterable[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """Return the tasks each site holds for a later hour, earliest release first.

    A deferred task whose move its origin accepted is no longer in the origin's report (it
    is never offered twice) but is still held there until the target's clean hour: it is
    listed from the move (``moving_to`` the target, ``held_until`` the move's ``start_at``).
    """
    out = [
        {
            "agent_id": agent_id,
            "task_id": w.id,
            "held_until": w.not_before,
            "latest_start": w.latest_start,
            "deadline_at": w.deadline_at,
            "g_per_kwh": w.g_per_kwh,
            "moving_to": None,
        }
        for agent_id, site in sites.items()
        for w in site.deferred
        if not w.queued
    ]
    listed = {(d["agent_id"], d["task_id"]) for d in out}
    for m in moves:
        if m["state"] != "accepted" or m["queued"] or (m["origin"], m["task_id"]) in listed:
            continue
        out.append(
            {
                "agent_id": m["origin"],
                "task_id": m["task_id"],
                "held_until": m["start_at"],
                "latest_start": None,
                "deadline_at": None,
                "g_per_kwh": None,
                "moving_to": m["target"],
            }
        )
    return sorted(out, key=lambda d: (d["held_until"], d["agent_id"], d["task_id"]))
