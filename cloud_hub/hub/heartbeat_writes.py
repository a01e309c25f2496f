"""Heartbeats stored in groups: one transaction for every heartbeat that arrived meanwhile.

A heartbeat handed to ``HeartbeatWriter.add`` waits for the current loop iteration to end,
or, when a group is already being written, for that group to commit; then every heartbeat
waiting is written in one transaction with one statement per table (``record_heartbeats``),
in arrival order.

What an answer promises (docs/hub-protocol.md, "What a heartbeat's answer promises"): the
heartbeat was verified and will be stored in arrival order, visible to every read after the
answer (reads wait for ``settled``). Liveness is soft state, sent again every interval, so
its commit is fsynced at most once a second (``Database.write(durable=False)`` otherwise: it
survives ``kill -9`` of the hub once committed, a power cut once the next fsync is through),
and the answer does not wait for the commit when the policy it names is known without the
database (``HeartbeatWriter``): a hub killed in that window loses those heartbeats' last-seen
times, which the agents' next heartbeats restore.

A group the storage refuses fails every heartbeat in it that is still waiting (as a group
commit does); an error of the data fails only its own heartbeat: the group is then written
again one heartbeat each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import sqlite_utils

from cloud_hub.hub.wire import Heartbeat
from edge_agent.storage.db import Database, StoreError

_log = logging.getLogger(__name__)

#: Seconds a group of heartbeats that were all answered already gathers more before it is
#: written: fewer groups, so fewer writer-thread wake-ups, GIL hand-offs and commits per
#: heartbeat. A heartbeat that waits for its commit (or a read that waits for ``settled``)
#: cuts the gathering short.
GATHER_S = 0.05
#: Most seconds between two fsynced heartbeat groups: a group after that long is written
#: durably (one fsync a second at most), so a power cut loses about the last second too.
DURABLE_EVERY_S = 1.0
#: Decoded policy documents a writer keeps (a fleet runs a few policy versions at a time).
DOCS_KEPT = 64

#: (agent id, heartbeat, the hub's receive time).
Beat = tuple[str, Heartbeat, float]
#: a heartbeat and its answer's future (None: answered already, before its commit)
_Waiting = tuple[Beat, "asyncio.Future[dict[str, Any] | None] | None"]

# Each statement reads the whole group from one JSON array bound as ``?``, so a group costs
# a handful of sqlite3_step calls, not one per heartbeat per table: the sqlite3 module
# releases the GIL around every step and must win it back from a busy event loop for the
# next row (up to the 5 ms switch interval each), which made a group of 1,000 take seconds.


def _columns(names: tuple[str, ...]) -> str:
    """``json_extract(value, '$[i]') AS name, …``: the fields of a row bound as a JSON array
    (``json_extract``, not ``->>``: SQLite 3.33 is enough, as ``UPDATE … FROM`` needs)."""
    return ", ".join(f"json_extract(value, '$[{i}]') AS {name}" for i, name in enumerate(names))


_BEAT = "id now status problem version peers policy queue_depth outbox_pending outbox_dropped"
_BEAT += " slo_misses"  # in the order record_heartbeats binds them
_BEATS = f"SELECT {_columns(tuple(_BEAT.split()))} FROM json_each(?)"
_DEVICE = ("agent_id", "device_id", "kind", "name", "utilization", "queued_s", "health", "at")
_AGENT = (
    "UPDATE agents SET last_seen = b.now, status = b.status, problem = b.problem, "
    "version = b.version, peers = b.peers, policy = b.policy, queue_depth = b.queue_depth, "
    "outbox_pending = b.outbox_pending, outbox_dropped = b.outbox_dropped, "
    f"slo_misses = b.slo_misses, heartbeats = heartbeats + 1 FROM ({_BEATS}) AS b "
    "WHERE agents.id = b.id"
)
_DEVICES_OUT = (
    "DELETE FROM devices WHERE agent_id IN (SELECT json_extract(value, '$[0]') FROM json_each(?))"
)
_DEVICES_IN = f"INSERT INTO devices SELECT {_columns(_DEVICE)} FROM json_each(?)"
# until the agent reports its assigned version, the health gate's count restarts
_GATE = (
    "UPDATE assignments SET hb_base = (SELECT heartbeats FROM agents a WHERE a.id = b.id), "
    f"slo_base = b.slo_misses FROM ({_BEATS}) AS b WHERE assignments.agent_id = b.id "
    "AND assignments.name || '@' || assignments.version IS NOT b.policy"
)
_DESIRED = (  # one row: every assigned agent's (id, document) of the group
    "SELECT json_group_array(json_array(a.agent_id, p.document)) FROM assignments a "
    "JOIN policies p ON p.name = a.name AND p.version = a.version "
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


def record_heartbeats(
    db: sqlite_utils.Database, beats: list[Beat], docs: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any] | None]:
    """Store ``beats`` in order (health, peers, policy, devices, the gate's base); return each
    agent's assigned policy document (None: none assigned), read-only: one decoded document
    per policy text, kept in ``docs`` across calls when given."""
    conn = db.conn
    for run in _rounds(beats):  # exactly as one by one: an agent twice in a group is in two runs
        rows = json.dumps(
            [
                (
                    agent_id,
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
                )
                for agent_id, hb, now in run
            ]
        )
        devices = json.dumps(
            [
                (agent_id, d.id, d.kind, d.name, d.utilization, d.queued_s, d.health, now)
                for agent_id, hb, now in run
                for d in hb.devices
            ]
        )
        conn.execute(_AGENT, (rows,))
        conn.execute(_DEVICES_OUT, (rows,))
        conn.execute(_DEVICES_IN, (devices,))
        conn.execute(_GATE, (rows,))
    ids = json.dumps(sorted({b[0] for b in beats}))
    (found,) = conn.execute(_DESIRED, (ids,)).fetchone()
    if docs is None:
        docs = {}
    elif len(docs) > DOCS_KEPT:
        docs.clear()
    desired: dict[str, dict[str, Any]] = {}
    for agent, text in json.loads(found):
        if text not in docs:
            docs[text] = dict(json.loads(text))
        desired[str(agent)] = docs[text]
    return [desired.get(agent_id) for agent_id, _, _ in beats]


class HeartbeatWriter:
    """Collects heartbeats and writes each group in one transaction through ``db``.

    A heartbeat is soft state that its agent sends again every interval, so it is answered
    before its group commits when the answer can be given without the database: its
    agent's assigned policy is known from that agent's previous heartbeat and no assignment
    has changed since (``assignments_changed``), and the storage is not failing. Otherwise
    (an agent's first heartbeat since the hub started, a rollout or rollback in between, a
    failing disk) it is answered after its group commits, as before. Reads that show
    heartbeat data wait for ``settled`` first, so what an answer acknowledged is what any
    later read sees.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._waiting: list[_Waiting] = []
        self._task: asyncio.Task[None] | None = None
        self._buffered: asyncio.Future[None] | None = None  # done: the waiting ones written
        self._flying: asyncio.Future[None] | None = None  # done: the group in flight written
        #: each agent's assigned policy as its last written heartbeat read it, with the
        #: ``assignments`` count the read was queued under (valid while that is current)
        self._desired: dict[str, tuple[int, dict[str, Any] | None]] = {}
        self._urgent = asyncio.Event()  # set: someone waits for the buffered group
        self._docs: dict[str, dict[str, Any]] = {}  # decoded policies (the writer thread's)
        self._synced_at = -DURABLE_EVERY_S  # monotonic time of the last fsynced group
        self.assignments = 0  # committed changes of assignments (rollout, promotion, rollback)
        self.groups = 0  # transactions written
        self.largest = 0  # most heartbeats in one
        self.early = 0  # heartbeats answered before their group committed
        self.lost = 0  # of those, heartbeats whose group the storage then refused

    def add(self, beat: Beat) -> asyncio.Future[dict[str, Any] | None]:
        """Queue ``beat``; the future resolves with its agent's policy (or None): at once when
        that is known (see the class), else after the heartbeat commits."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        known = self._desired.get(beat[0])
        if known is not None and known[0] == self.assignments and self._db.trouble is None:
            answer.set_result(known[1])
            self.early += 1
            self._waiting.append((beat, None))
        else:
            self._waiting.append((beat, answer))
            self._urgent.set()
        if self._buffered is None:
            self._buffered = loop.create_future()
        if self._task is None:
            self._task = loop.create_task(self._drain())
        return answer

    def assignments_changed(self) -> None:
        """Note that a committed write changed which policy some agent is assigned: no
        heartbeat is answered from what an earlier group read until a later group read it."""
        self.assignments += 1

    async def settled(self) -> None:
        """Return once every heartbeat added so far is written (or its group failed)."""
        pending = self._buffered if self._waiting else self._flying
        if pending is not None and not pending.done():
            self._urgent.set()
            await asyncio.shield(pending)

    async def _drain(self) -> None:
        try:
            while self._waiting:
                if self._urgent.is_set():
                    await asyncio.sleep(0)  # this loop iteration's other heartbeats join
                else:  # all answered already: gather more, unless someone comes to wait
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._urgent.wait(), GATHER_S)
                self._urgent.clear()
                group, self._waiting = self._waiting, []
                self._flying, self._buffered = self._buffered, None
                try:
                    await self._write(group, self.assignments)
                finally:
                    if self._flying is not None and not self._flying.done():
                        self._flying.set_result(None)
        finally:
            self._task = None

    async def _write(self, group: list[_Waiting], assignments: int) -> None:
        beats = [beat for beat, _ in group]
        self.groups += 1
        durable = time.monotonic() - self._synced_at >= DURABLE_EVERY_S
        self.largest = max(self.largest, len(group))
        try:
            results = await self._db.write(
                lambda db: record_heartbeats(db, beats, self._docs), durable=durable
            )
        except StoreError as err:  # the storage (or a closed store) fails the whole group
            self._refused(group, err)
            return
        except Exception as err:  # one heartbeat's data: find it, keep the others
            if len(group) == 1:
                self._refused(group, err)
                return
            _log.warning("a group of %s heartbeats failed (%s): each alone", len(group), err)
            for one in group:
                await self._write([one], assignments)
            return
        if durable:
            self._synced_at = time.monotonic()
        for ((agent_id, _, _), answer), desired in zip(group, results, strict=True):
            self._desired[agent_id] = (assignments, desired)
            if answer is not None:
                _settle(answer, desired)

    def _refused(self, group: list[_Waiting], err: Exception) -> None:
        early = 0
        for (agent_id, _, _), answer in group:
            self._desired.pop(agent_id, None)  # its next heartbeat waits for its commit
            if answer is None:
                early += 1
            else:
                _settle(answer, err)
        if early:
            self.lost += early
            _log.warning(
                "%s heartbeats answered before their commit were not stored: %s", early, err
            )


def _settle(future: asyncio.Future[dict[str, Any] | None], value: Any) -> None:
    with contextlib.suppress(asyncio.InvalidStateError):  # its caller gave up (cancelled)
        if isinstance(value, BaseException):
            future.set_exception(value)
        else:
            future.set_result(value)
