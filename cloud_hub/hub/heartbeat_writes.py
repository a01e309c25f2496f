"""Heartbeats stored in groups: one transaction for every heartbeat that arrived meanwhile.

A heartbeat handed to ``HeartbeatWriter.add`` waits for the current loop iteration to end,
or, when a group is already being written, for that group to commit; then every heartbeat
waiting is written in one transaction with one statement per table (``record_heartbeats``),
and each caller's future resolves after that commit, with the policy assigned to its agent.
The promise is the one a heartbeat written alone had: answered only once durable
(synchronous=FULL), in arrival order, each visible to every read after its answer.

A group the storage refuses fails every heartbeat in it (as a group commit does); an error of
the data fails only its own heartbeat: the group is then written again one heartbeat each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import sqlite_utils

from cloud_hub.hub.wire import Heartbeat
from edge_agent.storage.db import Database, StoreError

_log = logging.getLogger(__name__)

#: (agent id, heartbeat, the hub's receive time).
Beat = tuple[str, Heartbeat, float]
_Waiting = tuple[Beat, "asyncio.Future[dict[str, Any] | None]"]

_AGENT = (
    "UPDATE agents SET last_seen = ?, status = ?, problem = ?, version = ?, peers = ?, "
    "policy = ?, queue_depth = ?, outbox_pending = ?, outbox_dropped = ?, "
    "slo_misses = ?, heartbeats = heartbeats + 1 WHERE id = ?"
)
# until the agent reports its assigned version, the health gate's count restarts
_GATE = (
    "UPDATE assignments SET hb_base = (SELECT heartbeats FROM agents WHERE id = ?), "
    "slo_base = ? WHERE agent_id = ? AND name || '@' || version IS NOT ?"
)
_DESIRED = (
    "SELECT a.agent_id, p.document FROM assignments a JOIN policies p "
    "ON p.name = a.name AND p.version = a.version "
    "WHERE a.agent_id IN (SELECT value FROM json_each(?))"
)


def _policy(hb: Heartbeat) -> str | None:
    return None if hb.policy is None else f"{hb.policy[0]}@{hb.policy[1]}"


def _rounds(beats: list[Beat]) -> Iterator[list[Beat]]:
    """Split ``beats`` into runs in which each agent appears once, arrival order kept."""
    run: list[Beat] = []
    seen: set[str] = set()
    for beat in beats:
        if beat[0] in seen:
            yield run
            run, seen = [], set()
        run.append(beat)
        seen.add(beat[0])
    if run:
        yield run


def record_heartbeats(db: sqlite_utils.Database, beats: list[Beat]) -> list[dict[str, Any] | None]:
    """Store ``beats`` in order (health, peers, policy, devices, the gate's base); return each
    agent's assigned policy document (None: none assigned)."""
    conn = db.conn
    for run in _rounds(beats):  # exactly as one by one: an agent twice in a group is in two runs
        conn.executemany(
            _AGENT,
            [
                (
                    now,
                    hb.status,
                    hb.problem,
                    hb.version,
                    json.dumps(hb.peers),
                    _policy(hb),
                    hb.queue_depth,
                    hb.outbox_pending,
                    hb.outbox_dropped,
                    hb.slo_misses,
                    agent_id,
                )
                for agent_id, hb, now in run
            ],
        )
        conn.executemany("DELETE FROM devices WHERE agent_id = ?", [(b[0],) for b in run])
        conn.executemany(
            "INSERT INTO devices VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (agent_id, d.id, d.kind, d.name, d.utilization, d.queued_s, d.health, now)
                for agent_id, hb, now in run
                for d in hb.devices
            ],
        )
        conn.executemany(_GATE, [(a, hb.slo_misses, a, _policy(hb)) for a, hb, _ in run])
    ids = json.dumps(sorted({b[0] for b in beats}))
    docs: dict[str, dict[str, Any]] = {}  # one decoded document per policy text
    desired: dict[str, dict[str, Any]] = {}
    for agent, text in conn.execute(_DESIRED, (ids,)):
        if text not in docs:
            docs[text] = dict(json.loads(text))
        desired[str(agent)] = docs[text]
    return [desired.get(agent_id) for agent_id, _, _ in beats]


class HeartbeatWriter:
    """Collects heartbeats and writes each group in one transaction through ``db``."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._waiting: list[_Waiting] = []
        self._task: asyncio.Task[None] | None = None
        self.groups = 0  # transactions written
        self.largest = 0  # most heartbeats in one

    def add(self, beat: Beat) -> asyncio.Future[dict[str, Any] | None]:
        """Queue ``beat``; the future resolves after it commits (its agent's policy or None)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        self._waiting.append((beat, future))
        if self._task is None:
            self._task = loop.create_task(self._drain())
        return future

    async def _drain(self) -> None:
        try:
            while self._waiting:
                await asyncio.sleep(0)  # this loop iteration's other heartbeats join the group
                group, self._waiting = self._waiting, []
                await self._write(group)
        finally:
            self._task = None

    async def _write(self, group: list[_Waiting]) -> None:
        beats = [beat for beat, _ in group]
        self.groups += 1
        self.largest = max(self.largest, len(group))
        try:
            results = await self._db.write(lambda db: record_heartbeats(db, beats))
        except StoreError as err:  # the storage (or a closed store) fails the whole group
            for _, future in group:
                _settle(future, err)
            return
        except Exception as err:  # one heartbeat's data: find it, keep the others
            if len(group) == 1:
                _settle(group[0][1], err)
                return
            _log.warning("a group of %s heartbeats failed (%s): each alone", len(group), err)
            for one in group:
                await self._write([one])
            return
        for (_, future), desired in zip(group, results, strict=True):
            _settle(future, desired)


def _settle(future: asyncio.Future[dict[str, Any] | None], value: Any) -> None:
    with contextlib.suppress(asyncio.InvalidStateError):  # its caller gave up (cancelled)
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)
