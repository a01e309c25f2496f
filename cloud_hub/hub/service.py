"""The hub service: store, secrets, liveness, and the snapshot the dashboard stream pushes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import time
from typing import Any

from cloud_hub.hub import liveness
from cloud_hub.hub.clock import Clock
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.fleet_views import MeshLinks, carbon_view, deferred_view
from cloud_hub.hub.metrics import HubMetrics
from cloud_hub.hub.policies import PolicyBook
from cloud_hub.hub.reevaluate import Reevaluator
from cloud_hub.hub.store import HubStore
from cloud_hub.hub.stream import Broadcaster
from cloud_hub.hub.throughput import WINDOW_S, summarize
from edge_agent.loops import Supervisor
from edge_agent.mesh.replay import KeyedVerifier

_log = logging.getLogger(__name__)

#: Recent decisions the snapshot carries.
RECENT_DECISIONS = 25
#: Moves the fleet snapshot lists (newest first; ``GET /v1/reevaluation`` has them all).
RECENT_MOVES = 25
#: Most seconds between two passes of record retention.
RETENTION_EVERY_S = 60.0


def load_secrets(config: HubConfig) -> tuple[str, str, str]:
    """Return (join token, admin token, hub id): configured, else generated once into secrets.json.

    The hub id is no secret (it is announced over mDNS); it lives beside the tokens so it stays
    the same across restarts.
    """
    stored: dict[str, str] = {}
    with contextlib.suppress(FileNotFoundError):
        stored = json.loads(config.secrets_path.read_text(encoding="utf-8"))
    join = config.join_token or stored.get("join_token") or secrets.token_urlsafe(24)
    admin = config.admin_token or stored.get("admin_token") or secrets.token_urlsafe(24)
    hub_id = config.hub_id or stored.get("hub_id") or f"hub-{secrets.token_hex(6)}"
    doc = {"join_token": join, "admin_token": admin, "hub_id": hub_id}
    if any(not getattr(config, k) and stored.get(k) != v for k, v in doc.items()):
        config.data_dir.mkdir(parents=True, exist_ok=True)
        tmp = config.secrets_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({k: v for k, v in doc.items() if not getattr(config, k)}, f)
        os.replace(tmp, config.secrets_path)
    return join, admin, hub_id


class Hub:
    """The running hub: owns the store and the background task that watches liveness."""

    def __init__(
        self, config: HubConfig, clock: Clock = time.time, monotonic: Clock = time.monotonic
    ) -> None:
        self.config = config
        self.clock = clock
        self.store = HubStore(config.db_path)
        self.policies = PolicyBook(self.store.db, clock, self.store.heartbeats)
        self.metrics = HubMetrics()
        # signed agent requests: each agent's key, a nonce cache per agent kept on the
        # monotonic clock, the wall-clock window; signed for our hub id (set at start)
        self.verifier = KeyedVerifier(
            self.store.key,
            "",
            window_s=config.max_clock_skew_s,
            clock=clock,
            monotonic=monotonic,
        )
        self.stream = Broadcaster()
        self.join_token = ""
        self.admin_token = ""
        self.hub_id = ""
        self.last_snapshot = ""
        self.loops = Supervisor()  # liveness and re-evaluation, restarted after an error
        self._retained_at = -math.inf
        self.forgotten = 0  # synced records deleted by retention since start
        # deferred and queued work across sites, every [hub] reevaluate_s (5 min)
        self.reevaluator = Reevaluator(clock, interval_s=config.reevaluate_s)
        self.mesh_links = MeshLinks()  # who trusts whom, with state and RTT (heartbeats)

    async def start(self) -> None:
        """Open the store, load secrets, start watching liveness."""
        await asyncio.to_thread(self.store.open)
        self.join_token, self.admin_token, self.hub_id = await asyncio.to_thread(
            load_secrets, self.config
        )
        self.verifier.me = self.hub_id
        self.loops.spawn("hub-liveness", self._watch)
        self.loops.spawn("hub-reevaluate", lambda: self.reevaluator.run(self))

    async def stop(self) -> None:
        """Stop the loops and close the store."""
        await self.loops.stop()
        await asyncio.to_thread(self.store.close)

    def heartbeat_interval_s(self) -> float:
        """Return the interval agents are asked to heartbeat at (longer for a large fleet:
        ``[liveness] max_heartbeats_per_s``)."""
        return self.config.interval_for(self.store.agent_count())

    def stale_after_s(self) -> float:
        """Return the age after which an agent's data is stale, at the interval in force."""
        return self.config.stale_after_for(self.store.agent_count())

    def health(self) -> dict[str, Any]:
        """Return the hub's health: ``degraded`` with its problems (storage, loops), else ``ok``."""
        db = self.store.db
        problems = [f"storage: {db.trouble}"] if db.trouble is not None else []
        if db.damaged is not None:
            problems.append(f"storage: database {db.damaged}; run `{db.repair}` once stopped")
        if self.store.bad_rows:
            problems.append(f"storage: {self.store.bad_rows} damaged rows skipped (see the log)")
        problems += self.loops.problems()
        return {
            "status": "degraded" if problems else "ok",
            "problems": problems,
            "agents": self.store.agent_count(),
            "storage": {
                "path": str(db.path),
                "writable": db.trouble is None,
                "trouble": db.trouble,
                "failed_commits": db.failed_commits,
                "bad_rows": self.store.bad_rows,
                "damaged": db.damaged,
            },
            "loops": self.loops.status(),
        }

    async def snapshot(self) -> dict[str, Any]:
        """Return the fleet as the dashboard shows it; stale data is never marked current."""
        now = self.clock()
        stale = self.stale_after_s()
        agents = await self.store.agents()
        states = liveness.states(agents, now, stale)
        for row in agents:
            row["state"] = states[row["id"]]
        counts = liveness.counts(states.values())
        self.metrics.set_states(counts)
        devices = await self.store.devices()
        for d in devices:
            d["current"] = states.get(d["agent_id"]) in liveness.CURRENT and liveness.fresh(
                d["updated_at"], now, stale
            )
        decisions = [
            {"agent_id": r["agent_id"], "seq": r["seq"], "received_at": r["received_at"]}
            | r["payload"]
            for r in await self.store.records("decision", RECENT_DECISIONS)
        ]
        moves = self.reevaluator.executed()
        return {
            "ok": True,
            "now": now,
            "heartbeat_interval_s": self.heartbeat_interval_s(),
            "stale_after_s": stale,
            "counts": counts,
            "agents": agents,
            "devices": devices,
            "decisions": decisions,
            "policies": await self.policies.heads(),
            "throughput": summarize(await self.store.task_outcomes(now - WINDOW_S), WINDOW_S),
            "mesh": self.mesh_links.view(states),
            "carbon": carbon_view(self.reevaluator.sites, now),
            "deferred": deferred_view(self.reevaluator.sites, moves),
            "moves": moves[:RECENT_MOVES],
        }

    async def refresh_state_gauge(self) -> None:
        """Set the agents-by-state gauge from the store (for ``/metrics``: a scrape reads four
        columns, not the whole snapshot, which held the loop for seconds at 8,000 agents)."""
        counts = await self.store.state_counts(self.clock(), self.stale_after_s())
        self.metrics.set_states(counts)

    async def retain(self) -> int:
        """Delete synced records older than ``record_retention_s``; return how many went."""
        self._retained_at = time.monotonic()
        gone = await self.store.forget_before(self.clock() - self.config.record_retention_s)
        if gone:
            self.forgotten += gone
            _log.info(
                "retention: forgot %s synced records older than %.0f s",
                gone,
                self.config.record_retention_s,
            )
        return gone

    async def _watch(self) -> None:
        """Every ``push_interval_s``, while anyone watches, push the snapshot if it changed."""
        while True:
            await asyncio.sleep(self.config.push_interval_s)
            try:
                for rollout in await self.policies.evaluate():
                    _log.warning(
                        "rollout %s of %s@%s: %s %s",
                        rollout["id"],
                        rollout["name"],
                        rollout["version"],
                        rollout["state"],
                        rollout.get("reason") or "",
                    )
            except Exception:  # a failing gate must not stop liveness tracking
                _log.exception("cannot evaluate policy rollouts")
            every = min(RETENTION_EVERY_S, self.config.record_retention_s / 10)
            if time.monotonic() - self._retained_at >= every:
                try:
                    await self.retain()
                except Exception:  # a failing delete must not stop liveness tracking
                    _log.exception("cannot apply record retention")
            if not len(self.stream):
                continue
            try:
                snap = await self.snapshot()
            except Exception:  # a failing read must not stop the stream
                _log.exception("cannot build the fleet snapshot")
                continue
            text = json.dumps({k: v for k, v in snap.items() if k != "now"}, sort_keys=True)
            if text != self.last_snapshot:
                self.last_snapshot = text
                self.stream.publish(json.dumps(snap))
