"""Finding the hub over mDNS (``_hetmesh-hub._tcp.local.``) and checking that it is the fleet's.

An announcement is a hint, never an identity: anyone on the link can announce a hub. Before
an agent sends a discovered hub its join token or any telemetry, the hub must answer a fresh
nonce with ``proof`` = hex HMAC-SHA256(join token, ``hetmesh-hub-proof\\nHUB_ID\\nENDPOINT\\n
NONCE``), where ENDPOINT is the ``address:port`` the hub saw the question arrive on. A server
that does not hold the join token cannot answer; one that relays the question to the real hub
gets back the real hub's endpoint, not its own, and is refused too (docs/hub-protocol.md §8).

The hub side (``cloud_hub/hub/advertise.py``) builds its TXT record with this module and its
proofs with ``hub_auth.hub_proof``, so each format is defined once. The mDNS sockets, the TXT
helpers and the browser are the mesh's (``edge_agent.mesh.advertise``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zeroconf import IPVersion
from zeroconf.asyncio import AsyncZeroconf

from edge_agent.agent.hub_auth import hub_proof
from edge_agent.errors import HetmeshError, InvalidInput
from edge_agent.mesh.advertise import ServiceBrowser, fit_txt, new_zeroconf, read_txt
from edge_agent.mesh.mdns_scope import Scope, confine

_log = logging.getLogger(__name__)

HUB_SERVICE_TYPE = "_hetmesh-hub._tcp.local."
#: ``[hub] url`` value that means "find the hub over mDNS".
DISCOVER = "mdns"
#: The hub's unauthenticated endpoint that answers a nonce with a proof.
PROOF_PATH = "/v1/hub/proof"
SCHEMES = ("http", "https")
#: Most hub announcements kept at once (a flood of fakes cannot grow memory without bound).
MAX_HINTS = 32
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")
_NONCE = re.compile(r"^[0-9a-f]{32,128}$")


class HubUnverified(HetmeshError):
    """A discovered server did not prove it holds the fleet's join token; never used."""


@dataclass(frozen=True, slots=True)
class HubHint:
    """What a ``_hetmesh-hub._tcp`` announcement claims: unverified until it proves the secret."""

    hub_id: str
    version: str
    address: str
    port: int
    scheme: str
    name: str  # the mDNS instance name

    @property
    def endpoint(self) -> str:
        """Return ``address:port`` (what the hub's proof must name)."""
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        """Return the hub's base URL."""
        return f"{self.scheme}://{self.endpoint}"


def check_hub_id(hub_id: str) -> str:
    """Return ``hub_id`` if it is a DNS label (letters, digits, '-', at most 63)."""
    if not _HUB_ID.match(hub_id):
        raise InvalidInput(
            f"hub id {hub_id!r}: use 1-63 letters, digits or '-', starting with a letter or digit"
        )
    return hub_id


def check_nonce(nonce: Any) -> str:
    """Return ``nonce`` if it is 32-128 lowercase hex characters."""
    if not isinstance(nonce, str) or not _NONCE.match(nonce):
        raise InvalidInput("body.nonce: expected 32-128 lowercase hex characters")
    return nonce


def hub_txt(hub_id: str, version: str, port: int, scheme: str) -> dict[str, str]:
    """Return the hub's TXT properties: non-secret hints only (id, version, port, scheme)."""
    if scheme not in SCHEMES:
        raise InvalidInput(f"scheme: expected one of {', '.join(SCHEMES)}, got {scheme!r}")
    props = {"id": check_hub_id(hub_id), "v": version[:32], "port": str(port), "scheme": scheme}
    return fit_txt(props)


def parse_hub_txt(name: str, address: str, props: Mapping[bytes, bytes | None]) -> HubHint:
    """Return the hint a hub announcement makes; InvalidInput says what is malformed."""
    text, port = read_txt(name, props)
    scheme = text.get("scheme", "http")
    if scheme not in SCHEMES:
        raise InvalidInput(f"{name}: TXT 'scheme' {scheme!r} is not http or https")
    return HubHint(
        hub_id=check_hub_id(text.get("id", "")),
        version=text.get("v", "?")[:32],
        address=address,
        port=port,
        scheme=scheme,
        name=name,
    )


def check_proof(hint: HubHint, join_token: str, nonce: str, answer: Mapping[str, Any]) -> None:
    """Raise HubUnverified unless ``answer`` proves ``hint``'s hub holds the join token."""
    if answer.get("hub_id") != hint.hub_id:
        raise HubUnverified(
            f"{hint.url} answered as hub {answer.get('hub_id')!r}, announced {hint.hub_id!r}"
        )
    if answer.get("endpoint") != hint.endpoint:
        raise HubUnverified(
            f"{hint.url} answered for endpoint {answer.get('endpoint')!r}: a relay, not the hub"
        )
    expected = hub_proof(join_token, hint.hub_id, hint.endpoint, nonce)
    if not hmac.compare_digest(expected, str(answer.get("proof", ""))):
        raise HubUnverified(f"{hint.url} does not know the fleet's join token (wrong proof)")


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
