"""MeshNode: discovery, trust, liveness and offload around one Placer.

The node needs a Placer and a ``run_task(contract, decision, payload)`` coroutine that runs
a placed task on this box; it serves the signed endpoints through ``app()`` (mounted by
whoever owns the HTTP server at ``/mesh/v1``) and is started with the port they listen on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from edge_agent.loops import Supervisor
from edge_agent.mesh.accept import Acceptor
from edge_agent.mesh.advertise import Browser, Hint, build_txt, kinds_summary
from edge_agent.mesh.advertise import service_info as make_info
from edge_agent.mesh.client import MeshClient, PeerRefused
from edge_agent.mesh.config import MeshConfig
from edge_agent.mesh.credential import FleetKey
from edge_agent.mesh.errors import AuthError, PeerUnavailable
from edge_agent.mesh.ledger import Ledger
from edge_agent.mesh.mdns_scope import confined_zeroconf
from edge_agent.mesh.offload import Offloader, RunPlaced
from edge_agent.mesh.peers import OFFLINE, ONLINE, PeerTable
from edge_agent.mesh.reconcile import OnDuplicate, Reconciler
from edge_agent.mesh.replay import Verifier
from edge_agent.mesh.routes import make_mesh_app
from edge_agent.mesh.summary import RecentContracts, SummaryError, build_summary, parse_summary
from edge_agent.placement import Decision, Placer, TaskContract

_log = logging.getLogger(__name__)

#: Every this many heartbeat rounds, offline peers are asked too.
OFFLINE_RECHECK = 5


class MeshNode:
    """One agent's membership in the mesh; ``start(api_port)`` then ``stop()``, once each."""

    def __init__(
        self,
        config: MeshConfig,
        key: FleetKey,
        placer: Placer,
        run_task: RunPlaced,
        ledger_path: Path,
        *,
        session: aiohttp.ClientSession | None = None,
        run_task_settles: bool = False,
        verifier: Verifier | None = None,
        loops: Supervisor | None = None,
        on_duplicate: OnDuplicate | None = None,
    ) -> None:
        """``verifier``: one shared with the host's other signed routes (its replay cache);
        ``loops``: the host's supervisor, where the heartbeat loop shows; ``on_duplicate``:
        see ``OnDuplicate``."""
        self.cfg = config
        self.agent_id = config.agent_id
        self.key = key
        self.verifier = Verifier(key, config.agent_id) if verifier is None else verifier
        self.placer = placer
        self.peers = PeerTable(
            config.agent_id,
            key.fingerprint,
            cap=config.peer_cap,
            rate_per_s=config.announce_rate_per_s,
            burst=config.announce_burst,
            offline_after=config.offline_after,
            reject_backoff_s=config.reject_backoff_s,
        )
        self.counters: Counter[str] = self.peers.counters
        self.ledger = Ledger(ledger_path)
        #: task classes seen here (bids asked, attempts forwarded, the agent's own tasks)
        self.recent = RecentContracts()
        self._summary: tuple[float, dict[str, Any]] | None = None  # (built at, document)
        self.acceptor = Acceptor(
            config.agent_id, placer, self.ledger, self.run_placed, self.recent.note
        )
        self.kinds = kinds_summary([d.kind.name.lower() for d in placer.devices])
        self.api_port = 0
        self.own_endpoint = ("", 0)  # the (address, port) we advertise, once started
        self._run_task = run_task
        # True: run_task itself gives the placer its feedback or releases the decision
        self._run_task_settles = run_task_settles
        self.on_duplicate = on_duplicate  # OnDuplicate: a lost attempt that completed there
        self._session = session
        self._own_session = session is None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: restarts the heartbeat loop after an error (an agent hands in its own supervisor)
        self.loops = Supervisor() if loops is None else loops
        #: endpoint -> (claimed id, mDNS instance name heard for that claim, "" when none):
        #: a hint arriving while its endpoint is challenged lends the challenge its name
        self._challenging: dict[tuple[str, int], tuple[str, str]] = {}
        self._changed = asyncio.Event()
        self.leaving = False  # heartbeats answer "leaving" once stop() has begun
        self._zc: Any = None
        self._browser: Browser | None = None
        self.client: MeshClient
        self.offloader: Offloader

    def app(self) -> web.Application:
        """Return the signed peer endpoints as a sub-application for ``/mesh/v1``."""
        return make_mesh_app(self)

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self, api_port: int) -> None:
        """Open the ledger, advertise ``api_port`` over mDNS, browse, start heartbeats."""
        self.api_port = api_port
        self.own_endpoint = self.peers.own_endpoint = (self.cfg.address, api_port)
        await self.ledger.open()
        if self._session is None:
            self._session = aiohttp.ClientSession()
        self.client = MeshClient(self._session, self.key, self.agent_id)
        self.offloader = Offloader(
            self.cfg, self.placer, self.peers, self.client, self.ledger, self.run_placed
        )
        self.reconciler = Reconciler(
            self.cfg, self.peers, self.client, self.ledger, self.offloader.lost, self.counters
        )
        for peer, key, attempt in await self.ledger.lost():  # from before a restart too
            self.offloader.lost.setdefault(peer, set()).add((key, attempt))
        # mDNS hears and answers only on our interfaces; peers only at addresses there
        self._zc, scope = await confined_zeroconf(self.cfg.interfaces)
        self._browser = Browser(
            self._zc,
            self._on_hint,
            self._on_gone,
            self._malformed,
            self.spawn,
            scope,
            self._foreign,
        )
        self._browser.start()
        self.spawn(self._advertise(), "mesh-advertise")
        beat = self.loops.spawn("mesh-heartbeat", self._heartbeats)
        self._tasks.add(beat)
        beat.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """Say goodbye over mDNS, abandon forwarded work, close everything."""
        self.leaving = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.acceptor.stop()
        if self._browser is not None:
            await self._browser.stop()
        if self._zc is not None:
            await self._zc.async_close()  # sends the goodbye packets
        if self._own_session and self._session is not None:
            await self._session.close()
        await self.ledger.close()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a background task the node owns."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _advertise(self) -> None:
        props = build_txt(
            self.agent_id, self.cfg.version, self.api_port, self.key.fingerprint, self.kinds
        )
        await self._zc.async_register_service(
            make_info(self.cfg.address, props),
            allow_name_change=self.cfg.probe_name,
            cooperating_responders=not self.cfg.probe_name,  # zeroconf: skip probing
        )
        self.counters["advertised"] += 1
        self._notify()
        _log.info("mesh: advertising %s on %s:%s", self.agent_id, self.cfg.address, self.api_port)

    # --- work ----------------------------------------------------------------------------
    async def submit(
        self,
        contract: TaskContract,
        payload: dict[str, Any] | None = None,
        key: str | None = None,
        *,
        to: str | None = None,
        reason: str = "",
    ) -> dict[str, Any]:
        """Run a task once, here or on a trusted peer (``to``: that one first); return the
        result and decision chain."""
        return await self.offloader.submit(contract, payload, key, to=to, reason=reason)

    async def run_placed(
        self, contract: TaskContract, decision: Decision, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """Run a task placed on this node's devices; feed back its time or release them."""
        if self._run_task_settles:
            return await self._run_task(contract, decision, payload)
        start = time.perf_counter()
        try:
            result = await self._run_task(contract, decision, payload)
        except BaseException:
            self.placer.release(decision)
            raise
        self.placer.feedback(decision, latency_s=max(time.perf_counter() - start, 1e-9))
        return result

    # --- discovery and trust --------------------------------------------------------------
    def count(self, name: str) -> None:
        """Add one to a mesh counter."""
        self.counters[name] += 1

    def _malformed(self, name: str, problem: str) -> None:
        self.counters["malformed_announcements"] += 1
        _log.debug("mesh: ignoring %s: %s", name, problem)

    def _foreign(self, name: str, addresses: list[str]) -> None:
        self.counters["foreign_interface"] += 1
        _log.debug("mesh: ignoring %s at %s: not on the interfaces we serve", name, addresses)

    def _on_hint(self, hint: Hint) -> None:
        if self.peers.admit(hint):
            self._start_challenge(hint)
        self._notify()

    def _start_challenge(self, hint: Hint, counter: str | None = None) -> None:
        busy = self._challenging.get(hint.endpoint)
        if busy is not None:
            # e.g. a peer's signed hello (no name) is being checked when its announcement
            # arrives: one challenge, and the name is kept for it
            if busy[0] == hint.agent_id and hint.name:
                self._challenging[hint.endpoint] = (hint.agent_id, hint.name)
            return
        self._challenging[hint.endpoint] = (hint.agent_id, hint.name)
        self.spawn(self._challenge(hint, counter), f"mesh-challenge-{hint.agent_id}")

    async def _challenge(self, hint: Hint, counter: str | None = None) -> None:
        try:
            reply = await self.client.call(
                hint.agent_id,
                hint.endpoint,
                "hello",
                {**self._hello(), "to": f"{hint.address}:{hint.api_port}"},
                self.cfg.challenge_timeout_s,
            )
            if hint.agent_id == self.agent_id:  # a fleet member misconfigured with our id
                self.counters["duplicate_agent_id"] += 1
                return
            self.peers.trust(
                hint.agent_id,
                hint.address,
                hint.api_port,
                hint.version,
                hint.kinds,
                self._challenging[hint.endpoint][1] or None,
                reply.rtt_s,
            )
            self._take_summary(hint.agent_id, reply.doc.get("summary"))
            if counter is not None:
                self.counters[counter] += 1
        except (AuthError, PeerRefused) as err:
            _log.debug("mesh: challenge of %s failed: %s", hint.agent_id, err)
            self.peers.challenge_failed(hint, "bad_key")
        except PeerUnavailable:
            self.peers.challenge_failed(hint, "unreachable")
        except OverflowError:
            pass
        finally:
            self._challenging.pop(hint.endpoint, None)
            self._notify()

    def _hello(self) -> dict[str, Any]:
        ours = {"agent_id": self.agent_id, "api_port": self.api_port}
        return {**ours, "version": self.cfg.version, "kinds": self.kinds}

    def summary(self) -> dict[str, Any]:
        """Return this node's capability summary (summary.py), as peers receive it: built at
        most once a quarter heartbeat, however many peers ask."""
        now = time.monotonic()
        if self._summary is None or now - self._summary[0] > self.cfg.heartbeat_s / 4:
            self._summary = (now, build_summary(self.placer, self.recent))
        return self._summary[1]

    def _take_summary(self, agent_id: str, doc: Any) -> None:
        """Keep a trusted peer's signed summary; refuse a bad one, keeping the last good one."""
        peer = self.peers.peers.get(agent_id)
        if peer is None or doc is None:
            return
        try:
            peer.summary = parse_summary(doc, time.monotonic())
        except SummaryError as err:
            self.counters["summary_rejected"] += 1
            _log.warning("mesh: summary from %s refused: %s", agent_id, err)
            return
        self.counters["summaries_received"] += 1

    def _on_gone(self, name: str) -> None:
        agent_id = self.peers.goodbye(name)
        if agent_id is not None:
            self._notify()
            self.spawn(self._check(agent_id, gone=True), f"mesh-goodbye-{agent_id}")

    async def _check(self, agent_id: str, *, gone: bool = False) -> None:
        peer = self.peers.peers.get(agent_id)
        if peer is None:
            return
        try:
            reply = await self.client.call(
                agent_id, peer.endpoint, "heartbeat", {}, self.cfg.challenge_timeout_s
            )
            if reply.doc.get("leaving"):  # a signed confirmation of its goodbye
                peer.state = OFFLINE
            else:
                self.peers.seen(agent_id, reply.rtt_s)
                peer.load = dict(reply.doc.get("load", {}))
                self._take_summary(agent_id, reply.doc.get("summary"))
                self.reconciler.start(agent_id, self.spawn, self.on_duplicate)
        except (AuthError, PeerRefused, PeerUnavailable):
            self.peers.missed(agent_id)
            if gone:  # a goodbye plus a failed check: it left
                peer.state = OFFLINE
        self._notify()

    async def _heartbeats(self) -> None:
        rounds = 0
        while True:
            await asyncio.sleep(self.cfg.heartbeat_s)
            rounds += 1
            # offline peers are asked too, less often: a healed link brings them back (and
            # lets lost attempts be reconciled) without waiting for a new mDNS announcement
            ids = [
                a
                for a, p in self.peers.peers.items()
                if p.state != OFFLINE or rounds % OFFLINE_RECHECK == 0
            ]
            await asyncio.gather(*(self._check(a) for a in ids))

    # --- endpoint handlers -----------------------------------------------------------------
    async def on_hello(self, sender: str, remote: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Answer a signed hello with ours; trust its sender once its address proves the key."""
        if sender == self.agent_id:
            self.counters["spoof_same_id"] += 1
            return {"_status": 409, "ok": False, "error": f"agent id {sender} is ours"}
        port = doc.get("api_port")
        if isinstance(port, int) and 0 < port < 65536 and remote:
            known = self.peers.peers.get(sender)
            if known is not None and known.endpoint == (remote, port):
                self.peers.seen(sender)
            else:
                # where a signed hello came from is not signed: that address must answer us
                version, kinds = str(doc.get("version", "?"))[:32], str(doc.get("kinds", ""))
                hint = Hint(sender, version, port, self.key.fingerprint, kinds[:200], remote, "")
                self._start_challenge(hint, "trusted_via_hello")
            self._notify()
        return {**self._hello(), "summary": self.summary()}

    async def on_heartbeat(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Answer a heartbeat with a load summary."""
        self.peers.seen(sender)
        busy = sum(live["queued_s"] for live in self.placer.lives().values())
        return {
            "agent_id": self.agent_id,
            "leaving": self.leaving,
            "load": {"queued_s": busy, "forwarded_running": len(self.acceptor.running)},
            "summary": self.summary(),
        }

    async def on_bid(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Return this node's estimate for a contract."""
        self.counters["bids_received"] += 1
        return self.acceptor.bid(doc)

    async def on_forward(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Run a forwarded attempt once."""
        self.counters["forwards_received"] += 1
        return await self.acceptor.forward(sender, doc)

    async def on_cancel(self, sender: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Cancel or fence a forwarded attempt."""
        return await self.acceptor.cancel(doc)

    # --- views -------------------------------------------------------------------------------
    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Return once ``predicate()`` holds after a peer-table change; TimeoutError if not."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await self._changed.wait()

    def trusts(self, agent_id: str) -> bool:
        """Return True when ``agent_id`` is an online, trusted peer."""
        peer = self.peers.peers.get(agent_id)
        return peer is not None and peer.state == ONLINE

    def status(self) -> dict[str, Any]:
        """Return the node's view: identity, peers and counters (no secrets)."""
        return {
            "agent_id": self.agent_id,
            "fingerprint": self.key.fingerprint,
            "api_port": self.api_port,
            "kinds": self.kinds,
            "peers": self.peers.rows(),
            "counters": dict(self.counters),
        }
