"""The agent's browser for hub announcements (``_hetmesh-hub._tcp.local.``): hints, not hubs.

``HubFinder`` keeps the announcements heard now (at most ``MAX_HINTS``, on ``mdns_interfaces``
only); the hub link makes each prove the join token before it is used. The record format
and the proof are the protocol's (``edge_agent.protocol.hub_discovery``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from zeroconf import IPVersion
from zeroconf.asyncio import AsyncZeroconf

from edge_agent.mesh.advertise import ServiceBrowser, new_zeroconf
from edge_agent.mesh.mdns_scope import Scope, confine
from edge_agent.protocol.hub_discovery import HUB_SERVICE_TYPE, HubHint, parse_hub_txt

_log = logging.getLogger(__name__)

#: Most hub announcements kept at once (a flood of fakes cannot grow memory without bound).
MAX_HINTS = 32


def open_zeroconf(interfaces: Sequence[str]) -> AsyncZeroconf:
    """Return an IPv4 AsyncZeroconf on ``interfaces`` (empty: every interface)."""
    if interfaces:
        return new_zeroconf(list(interfaces))
    return AsyncZeroconf(ip_version=IPVersion.V4Only)


class HubFinder:
    """Browses for ``_hetmesh-hub._tcp`` and keeps the announcements currently heard."""

    def __init__(self, interfaces: Sequence[str]) -> None:
        self.interfaces = tuple(interfaces)
        self.announced = 0  # announcements resolved (each may be false)
        self.malformed = 0
        self.foreign = 0  # announcements at addresses off mdns_interfaces (ignored)
        self._hints: dict[str, HubHint] = {}
        self._zc: AsyncZeroconf | None = None
        self._browser: ServiceBrowser[HubHint] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start browsing (in the running event loop)."""
        self._zc = open_zeroconf(self.interfaces)
        scope = None
        if self.interfaces:  # hear the hub only there, and only at addresses reachable there
            scope = Scope.of(self.interfaces)
            self._spawn(self._confine(self._zc, scope), "mdns-confine")
        self._browser = ServiceBrowser(
            self._zc,
            HUB_SERVICE_TYPE,
            parse_hub_txt,
            self._heard,
            self._gone,
            self._malformed,
            self._spawn,
            scope,
            self._foreign,
        )
        self._browser.start()

    @staticmethod
    async def _confine(aiozc: AsyncZeroconf, scope: Scope) -> None:
        await aiozc.zeroconf.async_wait_for_start()
        confine(aiozc, scope)

    def _foreign(self, name: str, addresses: list[str]) -> None:
        self.foreign += 1
        _log.warning("mDNS: ignoring hub %s at %s: not on mdns_interfaces", name, addresses)

    async def stop(self) -> None:
        """Stop browsing and close the mDNS sockets."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._browser is not None:
            await self._browser.stop()
        if self._zc is not None:
            await self._zc.async_close()
        self._browser = self._zc = None

    def hints(self) -> list[HubHint]:
        """Return the hubs announced now, by instance name."""
        return [self._hints[name] for name in sorted(self._hints)]

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _gone(self, name: str) -> None:
        self._hints.pop(name, None)

    def _malformed(self, name: str, why: str) -> None:
        self.malformed += 1
        _log.warning("mDNS: ignoring malformed hub announcement %s: %s", name, why)

    def _heard(self, hint: HubHint) -> None:
        self.announced += 1
        if hint.name not in self._hints and len(self._hints) >= MAX_HINTS:
            _log.warning(
                "mDNS: ignoring hub announcement %s: %s already heard", hint.name, MAX_HINTS
            )
            return
        self._hints[hint.name] = hint
