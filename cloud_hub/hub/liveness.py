"""Liveness that does not lie: an agent's state from its last-seen time, its health and its peers.

- ``unknown``: enrolled, never heard from.
- ``online``: heard within ``stale_after_s`` and reporting itself healthy.
- ``degraded``: heard within ``stale_after_s`` but reporting a problem.
- ``partitioned``: not heard within ``stale_after_s``, but an agent that is itself current
  lists it among the peers it sees: alive, cut off from the hub.
- ``offline``: not heard within ``stale_after_s`` and no current peer sees it.

Nothing older than ``stale_after_s`` (three heartbeat intervals by default) counts as healthy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

STATES = ("online", "degraded", "partitioned", "offline", "unknown")
#: States whose live data (devices, utilization) is current.
CURRENT = ("online", "degraded")


def fresh(last_seen: float | None, now: float, stale_after_s: float) -> bool:
    """Return whether data stamped ``last_seen`` is still current at ``now``."""
    return last_seen is not None and now - last_seen <= stale_after_s


#: ``counts(states(...))`` over the hub's ``agents`` table, by SQLite in one query: the same
#: rules, for a metrics scrape at thousands of agents, which must not hold the event loop
#: (or the GIL) decoding every row. Parameters: now, stale_after_s. Peers that are not valid
#: JSON count as none. ``tests/test_hub_liveness.py`` holds the two to the same answers.
COUNT_SQL = """
WITH current AS (
  SELECT peers FROM agents WHERE last_seen IS NOT NULL AND :now - last_seen <= :stale
), seen AS (
  SELECT DISTINCT j.value AS id FROM current,
  json_each(CASE WHEN json_valid(current.peers) THEN current.peers ELSE '[]' END) AS j
)
SELECT CASE
  WHEN last_seen IS NULL THEN 'unknown'
  WHEN :now - last_seen <= :stale THEN CASE WHEN status = 'ok' THEN 'online' ELSE 'degraded' END
  WHEN id IN (SELECT id FROM seen) THEN 'partitioned'
  ELSE 'offline' END AS state, count(*)
FROM agents GROUP BY state
"""


def counts(states: Iterable[str]) -> dict[str, int]:
    """Return how many of ``states`` are each state (every state present, zero or more)."""
    out = dict.fromkeys(STATES, 0)
    for state in states:
        out[state] += 1
    return out


def states(agents: Iterable[Mapping[str, Any]], now: float, stale_after_s: float) -> dict[str, str]:
    """Return each agent's liveness state; rows need id, last_seen, status, peers."""
    rows = list(agents)
    seen_by_current: set[str] = set()
    for row in rows:
        if fresh(row.get("last_seen"), now, stale_after_s):
            seen_by_current.update(row.get("peers") or ())
    out: dict[str, str] = {}
    for row in rows:
        last_seen = row.get("last_seen")
        if last_seen is None:
            out[row["id"]] = "unknown"
        elif fresh(last_seen, now, stale_after_s):
            healthy = row.get("status") == "ok"
            out[row["id"]] = "online" if healthy else "degraded"
        elif row["id"] in seen_by_current:
            out[row["id"]] = "partitioned"
        else:
            out[row["id"]] = "offline"
    return out
