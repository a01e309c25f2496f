"""Peer side of offload: bid with our own kernel, run forwarded tasks once per key.

A forwarded attempt runs under its lease: past it, the work is abandoned and recorded as
``expired``, never ``done``. A cancel for an attempt not seen yet leaves a fence, so a
forward that arrives late is refused instead of run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any

from edge_agent.errors import InvalidInput
from edge_agent.mesh.ledger import Ledger
from edge_agent.mesh.offload import RunPlaced, step
from edge_agent.placement import Placer, TaskContract

_log = logging.getLogger(__name__)
MAX_KEY = 128
#: Payload key under which ``run`` gets a forwarded attempt's key, attempt and origin.
MESH_META = "_mesh"


#: Largest attempt number (the ledger stores it as an SQLite integer).
MAX_ATTEMPT = 2**31 - 1


def _key(doc: dict[str, Any]) -> tuple[str, int]:
    key, attempt = doc.get("key"), doc.get("attempt")
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY:
        raise InvalidInput(f"key: expected a string of 1..{MAX_KEY} characters")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 1 <= attempt <= MAX_ATTEMPT:
        raise InvalidInput(f"attempt: expected an integer 1..{MAX_ATTEMPT}, got {attempt!r:.40}")
    return key, attempt


def _contract(doc: dict[str, Any]) -> TaskContract:
    if "contract" not in doc:
        raise InvalidInput("contract: required (the task contract to place)")
    return TaskContract.from_dict(doc["contract"])


class Acceptor:
    """Answers bids and runs forwarded attempts on this node's devices."""

    def __init__(
        self,
        agent_id: str,
        placer: Placer,
        ledger: Ledger,
        run: RunPlaced,
        seen: Callable[[TaskContract], None] | None = None,
    ) -> None:
        self.agent_id = agent_id
        #: told each contract bid for or forwarded here (its class then shows in our summary)
        self.seen = seen or (lambda _contract: None)
        self.placer = placer
        self.ledger = ledger
        self.run = run
        self.running: dict[str, tuple[int, asyncio.Task[dict[str, Any]]]] = {}

    def bid(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Return our estimate for a contract without committing any device."""
        contract = _contract(doc)
        self.seen(contract)
        decision = self.placer.place_one(contract)
        if decision.placed:
            self.placer.release(decision)
        return {
            "agent_id": self.agent_id,
            "placed": decision.placed,
            "latency_s": decision.latency_s if decision.placed else None,
            "device": decision.device_id,
            "summary": decision.summary(),
        }

    async def forward(self, origin: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Run a forwarded attempt (or join the one running, or return the stored result)."""
        key, attempt = _key(doc)
        contract = _contract(doc)
        self.seen(contract)
        lease = doc.get("lease_s")
        if (
            isinstance(lease, bool)
            or not isinstance(lease, (int, float))
            or not (math.isfinite(lease) and lease > 0)
        ):
            raise InvalidInput("lease_s: expected a number > 0")
        payload = doc.get("payload") or {}
        if not isinstance(payload, dict):
            raise InvalidInput(f"payload: expected an object, got {type(payload).__name__}")
        current = self.running.get(key)
        if current is not None and current[0] != attempt:
            return {
                "_status": 409,
                "state": "busy",
                "error": f"task {key}: attempt {current[0]} still runs here",
            }
        if current is None:
            task = asyncio.create_task(
                self._serve(origin, key, attempt, contract, payload, float(lease)),
                name=f"mesh-forward-{key}",
            )
            self.running[key] = (attempt, task)
            task.add_done_callback(lambda t: self._forget(key, t))
            current = (attempt, task)
        try:
            return await asyncio.shield(current[1])
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise
            return {"state": "cancelled", "error": f"attempt {attempt} was cancelled"}

    def _forget(self, key: str, task: asyncio.Task[dict[str, Any]]) -> None:
        if self.running.get(key, (0, None))[1] is task:
            del self.running[key]

    async def _serve(
        self,
        origin: str,
        key: str,
        attempt: int,
        contract: TaskContract,
        payload: dict[str, Any],
        lease: float,
    ) -> dict[str, Any]:
        rows = await self.ledger.attempts(key, "peer")
        done = next((r for r in rows if r["state"] == "done"), None)
        if done is not None:  # a retry of finished work: answer, never rerun
            return {**done["result"], "state": "done", "duplicate": True}
        seen = next((r for r in rows if r["attempt"] == attempt), None)
        if seen is not None:
            return {"state": seen["state"], "error": f"attempt {attempt} already {seen['state']}"}
        await self.ledger.begin(key, "peer", attempt, origin)
        decision = self.placer.place_one(contract)
        if not decision.placed:
            await self.ledger.finish(key, "peer", attempt, "unplaced")
            return {"state": "unplaced", "error": decision.summary()}
        try:
            meta = {"key": key, "attempt": attempt, "origin": origin}
            async with asyncio.timeout(lease):
                result = await self.run(contract, decision, {**payload, MESH_META: meta})
        except TimeoutError:
            await self.ledger.finish(key, "peer", attempt, "expired")
            return {"state": "expired", "error": f"lease of {lease:g}s ran out"}
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.ledger.finish(key, "peer", attempt, "cancelled"))
            raise
        except Exception as err:  # the task itself failed: report it, the origin decides
            _log.warning("mesh: forwarded task %s failed: %s", key, err)
            await self.ledger.finish(key, "peer", attempt, "failed", {"error": str(err)})
            return {"state": "failed", "error": str(err)}
        link = step(self.agent_id, attempt, decision, f"ran for {origin}")
        out = {"state": "done", "result": result, "step": link}
        await self.ledger.finish(key, "peer", attempt, "done", {"result": result, "step": link})
        return out

    async def cancel(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Stop an attempt, or fence it if it has not arrived; return its final state."""
        key, attempt = _key(doc)
        current = self.running.get(key)
        if current is not None and current[0] == attempt:
            current[1].cancel()
            await asyncio.wait([current[1]])
        rows = [r for r in await self.ledger.attempts(key, "peer") if r["attempt"] == attempt]
        if not rows:
            await self.ledger.begin(key, "peer", attempt, "fence")
            await self.ledger.finish(key, "peer", attempt, "fenced")
            return {"state": "fenced"}
        row = rows[0]
        if row["state"] == "done":
            return {**row["result"], "state": "done"}
        return {"state": row["state"]}

    async def stop(self) -> None:
        """Abandon running attempts (recorded as cancelled)."""
        tasks = [t for _, t in self.running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
