"""The agent's link to the cloud hub: enrol, heartbeat, apply policies, sync the outbox.

Optional and never in the way: with no ``[hub] url`` the agent never creates a link, and a
hub that is down only makes the link retry; placement and execution do not wait on it. The
fleet credential lives in ``<data_dir>/hub_credential.json`` (mode 0600). Sync is exactly
once: the hub keys records by (agent, seq) and the agent forgets only what the hub acked.
With ``[hub] url = "mdns"`` the hub is found over mDNS and must prove it holds the join token
before it hears anything from this agent (``hub_discovery``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.outbox import Outbox
from edge_agent.agent.hub.finder import HubFinder
from edge_agent.errors import HetmeshError, InvalidInput
from edge_agent.protocol.hub_client import HubClient, HubClockSkew, HubRejected, HubUnreachable
from edge_agent.protocol.hub_discovery import (
    DISCOVER,
    HUB_SERVICE_TYPE,
    HubHint,
    HubUnverified,
    check_proof,
)

_log = logging.getLogger(__name__)

CREDENTIAL_FILE = "hub_credential.json"
#: Most records one sync request carries.
SYNC_BATCH = 500
#: Seconds a graceful stop spends on a last sync.
FINAL_FLUSH_S = 2.0
#: Seconds before a discovered server that failed its proof is asked again.
REFUSED_BACKOFF_S = 30.0
#: Longest wait between tries while the hub refuses our clock (doubling from hub_retry_s).
CLOCK_BACKOFF_MAX_S = 300.0


def default_agent_id(profile: str | None) -> str:
    """Return ``<hostname>[-<profile>]`` reduced to the hub's agent-id alphabet."""
    host = socket.gethostname().split(".")[0] or "agent"
    raw = f"{host}-{profile}" if profile else host
    return re.sub(r"[^A-Za-z0-9._-]", "-", raw)[:64]


def load_credential(path: Path, url: str, agent_id: str) -> dict[str, Any] | None:
    """Return the stored credential if it is for this hub and agent id, else None (blocking)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("url") != url or doc.get("agent_id") != agent_id:
        return None
    return doc if isinstance(doc.get("key"), str) else None


def save_credential(path: Path, doc: dict[str, Any]) -> None:
    """Write the credential atomically, readable by the owner only (blocking)."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        json.dump(doc, f)
    os.replace(tmp, path)


def _interval(answer: dict[str, Any], current: float) -> float:
    """Return the heartbeat interval the hub asks for, kept within 0.05 s .. 1 h."""
    value = answer.get("heartbeat_interval_s", current)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return current
    return min(3600.0, max(0.05, float(value)))


class HubLink:
    """Talks to the hub for one agent; ``start``, then ``run`` in a task, then ``close``."""

    def __init__(
        self,
        config: AgentConfig,
        outbox: Outbox,
        report: Callable[[], dict[str, Any]],
        apply_policy: Callable[[dict[str, Any]], Awaitable[None]],
        labels: dict[str, str],
        on_moves: Callable[[list[Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.config = config
        self.outbox = outbox
        self.report = report
        self.apply_policy = apply_policy
        self.labels = labels
        self.configured = config.hub_url.rstrip("/")
        discover = self.configured == DISCOVER
        self.finder = HubFinder(config.hub_mdns_interfaces) if discover else None
        self.url = "" if discover else self.configured  # "": not found yet (mDNS)
        self.hub_id: str | None = None  # a discovered hub's proven id
        self.refused = 0  # discovered servers that failed to prove the join token
        self.last_refused: str | None = None
        self._refused_at: dict[tuple[str, str], float] = {}
        self._stored_hub: str | None = None
        self.agent_id = config.hub_agent_id or default_agent_id(config.profile)
        self.path = config.data_dir / CREDENTIAL_FILE
        self.interval_s = config.hub_retry_s
        self.connected = False
        self.last_contact: float | None = None
        self.hub_acked = 0
        self.pending = 0
        self.dropped = 0
        self.heartbeats = 0
        self._resume = True
        self._refused: str | None = None
        self._quiet = False
        self.clock_skew_s: float | None = None  # ours minus the hub's, while it refuses us
        self._clock_wait_s = 0.0
        self._session: aiohttp.ClientSession | None = None
        self.client: HubClient
        #: carries out the hub's ``moves`` (its re-evaluation's; the mesh link), if given
        self.on_moves = on_moves

    async def start(self) -> None:
        """Open the HTTP session and load the stored credential."""
        self._session = aiohttp.ClientSession()
        self.client = HubClient(self.url, self.agent_id, self._session)
        stored = await asyncio.to_thread(load_credential, self.path, self.configured, self.agent_id)
        if stored is not None and not stored.get("hub_id"):
            _log.info("hub credential predates recipient-bound signatures; enrolling again")
        elif stored is not None:
            self.client.key, self.client.hub_id = str(stored["key"]), str(stored["hub_id"])
            self.interval_s = float(stored.get("heartbeat_interval_s", self.interval_s))
            self._stored_hub = stored["hub_id"]
        if self.finder is not None:
            self.finder.start()

    async def run(self) -> None:
        """Heartbeat and sync every interval until cancelled; ride out hub outages."""
        while True:
            try:
                await self.round()
            except HubClockSkew as err:  # a clock problem: back off, keep the credential
                self._skewed(err)
            except HubUnreachable as err:
                searching = self.finder is not None and not self.url and not self.finder.hints()
                if self.finder is not None:
                    self.url = ""  # a discovered hub may have moved: find it again
                self._lost(str(err), level=logging.INFO if searching else logging.WARNING)
            except (HetmeshError, KeyError, ValueError, TypeError) as err:
                # refused (4xx), an answer we cannot read, or our own store failed: retry later
                self._lost(f"{type(err).__name__}: {err}", level=logging.ERROR)
            if not self.connected:  # keep the outbox figures current while offline
                with contextlib.suppress(HetmeshError):
                    await self._count()
            if self.clock_skew_s is not None:
                await asyncio.sleep(self._clock_wait_s)
            else:
                await asyncio.sleep(self.interval_s if self.connected else self.config.hub_retry_s)

    async def round(self) -> None:
        """One exchange: enrol if needed, resume point, heartbeat (and policy), sync."""
        if not self.url:
            await self._locate()
        fresh = self.client.key is None
        if fresh:
            await self._enrol()
        try:
            await self._exchange()
        except HubRejected as err:
            if err.status != 401 or fresh:
                raise
            _log.warning("hub refused our credential (%s); enrolling again", err)
            await self._enrol()
            await self._exchange()
        if not self.connected:
            _log.info("hub %s reachable; agent %s in sync", self.url, self.agent_id)
        if self.clock_skew_s is not None:
            _log.warning("hub: our clock agrees with the hub's again")
            self.clock_skew_s = None
        self.connected, self.last_contact, self._quiet = True, time.time(), False

    def _skewed(self, err: HubClockSkew) -> None:
        """Note a refusal of our timestamp: logged once, then back off (doubling)."""
        if self.clock_skew_s is None:
            _log.warning("hub: %s; backing off, the credential is kept", err)
            self._clock_wait_s = self.config.hub_retry_s
        else:
            _log.debug("hub: %s", err)
            self._clock_wait_s = min(CLOCK_BACKOFF_MAX_S, 2 * self._clock_wait_s)
        self.clock_skew_s = err.skew_s
        self.connected, self._resume = False, True

    def problem(self) -> str | None:
        """Return what is wrong with the link that the operator must fix, or None."""
        if self.clock_skew_s is None:
            return None
        skew = self.clock_skew_s
        if skew != skew:  # NaN: the hub did not say its time
            return "clock skew vs hub (the hub refuses our timestamps)"
        side = "ahead of" if skew > 0 else "behind"
        return f"clock skew {abs(skew):.0f} s vs hub (this agent's clock is {side} the hub's)"

    async def _locate(self) -> None:
        """Use the first announced hub that proves it holds the join token; count the others."""
        assert self.finder is not None
        now, hints = time.monotonic(), self.finder.hints()
        self._refused_at = {
            k: t for k, t in self._refused_at.items() if now - t < REFUSED_BACKOFF_S
        }
        for hint in hints:
            seen = (hint.name, hint.endpoint)
            if now - self._refused_at.get(seen, -REFUSED_BACKOFF_S) < REFUSED_BACKOFF_S:
                continue
            try:
                await self._verify(hint)
            except (HubUnverified, HubRejected) as err:
                self.refused += 1
                self.last_refused = f"{hint.name} at {hint.url}: {err}"
                self._refused_at[seen] = now
                _log.warning("hub discovery: not using %s", self.last_refused)
                continue
            except HubUnreachable as err:
                _log.info("hub discovery: %s announced but unreachable: %s", hint.name, err)
                continue
            if hint.hub_id != self._stored_hub:
                self.client.key = self.client.hub_id = None  # another hub's: no use here
            self.url, self.hub_id, self.client.base_url = hint.url, hint.hub_id, hint.url
            _log.info(
                "found hub %s at %s over mDNS (it proved the join token)", hint.hub_id, hint.url
            )
            return
        raise HubUnreachable(
            f"no verified hub announced as {HUB_SERVICE_TYPE} ({len(hints)} announced, "
            f"{self.refused} refused so far)"
        )

    async def _verify(self, hint: HubHint) -> None:
        """Raise HubUnverified unless ``hint``'s server proves the join token for a fresh nonce."""
        assert self._session is not None
        probe = HubClient(hint.url, self.agent_id, self._session)
        nonce = secrets.token_hex(16)
        check_proof(hint, self.config.hub_join_token, nonce, await probe.prove(nonce))

    async def _enrol(self) -> None:
        answer = await self.client.enrol(
            self.config.hub_join_token, self.labels, self.config.profile, socket.gethostname()
        )
        if self.hub_id is not None and self.client.hub_id != self.hub_id:
            proven, self.client.key = self.hub_id, None
            raise HubRejected(
                409, f"enrolled as {self.client.hub_id!r}, but the hub proved {proven!r}"
            )
        self.interval_s = _interval(answer, self.interval_s)
        doc = {
            "url": self.configured,
            "hub_id": self.client.hub_id,
            "agent_id": self.agent_id,
            "key": self.client.key,
            "heartbeat_interval_s": self.interval_s,
        }
        await asyncio.to_thread(save_credential, self.path, doc)
        self._stored_hub = self.client.hub_id
        self._resume = True
        _log.info("enrolled with hub %s as %s", self.url, self.agent_id)

    async def _exchange(self) -> None:
        if self._resume:  # the hub may hold records we never heard it acknowledge
            await self._resume_point()
        answer = await self.beat()
        if answer.get("policy") is not None and await self._apply(answer["policy"]):
            await self.beat()  # reporting the applied version is the acknowledgement
        moves = answer.get("moves")
        if moves and self.on_moves is not None:
            await self.on_moves(moves)  # outcomes go back with the next heartbeat
        await self.flush()

    async def _resume_point(self) -> None:
        """Ask the hub how far it holds our records, and forget those here."""
        self.hub_acked = await self.client.acked()
        await self.outbox.acknowledge(self.hub_acked)
        self._resume = False

    async def beat(self) -> dict[str, Any]:
        """Send one heartbeat with the agent's live state; return the hub's answer."""
        doc = self.report()
        doc["outbox"] = {"pending": self.pending, "dropped": self.dropped}
        answer = await self.client.heartbeat(doc)
        self.interval_s = _interval(answer, self.interval_s)
        self.heartbeats += 1
        return answer

    async def _apply(self, doc: Any) -> bool:
        label = f"{doc.get('name')}@{doc.get('version')}" if isinstance(doc, dict) else "?"
        try:
            if not isinstance(doc, dict):
                raise InvalidInput("the hub's policy is not a JSON object")
            await self.apply_policy(doc)
        except InvalidInput as err:
            level = logging.DEBUG if self._refused == label else logging.WARNING
            _log.log(level, "policy %s from the hub refused: %s", label, err)
            self._refused = label
            return False
        _log.info("applied policy %s from the hub", label)
        return True

    async def flush(self) -> None:
        """Send every record the hub lacks, in batches, and forget what it acknowledged."""
        while True:
            state = await self.outbox.state()
            floor = max(state["dropped_through"], state["acked"])
            batch = await self.outbox.after(self.hub_acked, SYNC_BATCH)
            if not batch and floor <= self.hub_acked:
                break
            answer = await self.client.sync(batch, floor)
            acked = int(answer["acked"])
            if answer.get("lost"):
                _log.warning("hub counted %s records lost (dropped unsent)", answer["lost"])
            await self.outbox.acknowledge(acked)
            progress, self.hub_acked = acked > self.hub_acked, acked
            if not progress or len(batch) < SYNC_BATCH:
                break
        await self._count()

    async def _count(self) -> None:
        state = await self.outbox.state()
        self.pending, self.dropped = state["pending"], state["dropped"]

    def _lost(self, why: str, level: int = logging.WARNING) -> None:
        """Note a failed exchange: logged once at ``level``, then at DEBUG until it recovers."""
        _log.log(logging.DEBUG if self._quiet else level, "hub: %s; working offline", why)
        self.connected, self._resume, self._quiet = False, True, True

    async def close(self) -> None:
        """Try one last sync (bounded), then close the HTTP session."""
        try:
            if self.connected and self.client.key is not None:
                async with asyncio.timeout(FINAL_FLUSH_S):
                    # a sync cancelled by the stop may have landed without our hearing it
                    await self._resume_point()
                    await self.flush()
        except (HetmeshError, TimeoutError) as err:
            _log.info("last sync before stopping did not finish: %s", err)
        finally:
            if self.finder is not None:
                await self.finder.stop()
            if self._session is not None:
                await self._session.close()

    def status(self) -> dict[str, Any]:
        """Return the link's state for the agent's health document (no secrets)."""
        discovery = None
        if self.finder is not None:
            discovery = {
                "hub_id": self.hub_id,
                "announced": len(self.finder.hints()),
                "refused": self.refused,
                "last_refused": self.last_refused,
            }
        skew = self.clock_skew_s
        return {
            "url": self.url or self.configured,
            "agent_id": self.agent_id,
            "enrolled": self.client.key is not None,
            "connected": self.connected,
            "last_contact": self.last_contact,
            "acked": self.hub_acked,
            "pending": self.pending,
            "dropped": self.dropped,
            "heartbeats": self.heartbeats,
            "hub_id": self.client.hub_id,
            "clock_skew_s": None if skew is None or skew != skew else round(skew, 1),
            "discovery": discovery,  # None: the hub's URL is configured
        }
