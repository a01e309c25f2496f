"""Finding the hub over mDNS (``_hetmesh-hub._tcp.local.``) and checking that it is the fleet's.

An announcement is a hint, never an identity: anyone on the link can announce a hub. Before
an agent sends a discovered hub its join token or any telemetry, the hub must answer a fresh
nonce with ``proof`` = hex HMAC-SHA256(join token, ``hetmesh-hub-proof\\nHUB_ID\\nENDPOINT\\n
NONCE``), where ENDPOINT is the ``address:port`` the hub saw the question arrive on. A server
that does not hold the join token cannot answer; one that relays the question to the real hub
gets back the real hub's endpoint, not its own, and is refused too (docs/hub-protocol.md §8).

The hub side (``cloud_hub/hub/advertise.py``) builds its TXT record and proofs with this
module, so the format is defined once. The mDNS socket setup is the mesh's (``new_zeroconf``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zeroconf import IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from edge_agent.errors import HetmeshError, InvalidInput
from edge_agent.mesh.advertise import RESOLVE_TIMEOUT_MS, TXT_MAX_BYTES, new_zeroconf

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
    size = sum(1 + len(k.encode()) + 1 + len(v.encode()) for k, v in props.items())
    if size > TXT_MAX_BYTES:
        raise InvalidInput(f"hub TXT record is {size} bytes, over {TXT_MAX_BYTES}")
    return props


def parse_hub_txt(name: str, address: str, props: Mapping[bytes, bytes | None]) -> HubHint:
    """Return the hint a hub announcement makes; InvalidInput says what is malformed."""
    text = {
        k.decode("ascii", "replace"): (v or b"").decode("utf-8", "replace")
        for k, v in props.items()
    }
    port = text.get("port", "")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput(f"{name}: TXT 'port' {port!r} is not a TCP port")
    scheme = text.get("scheme", "http")
    if scheme not in SCHEMES:
        raise InvalidInput(f"{name}: TXT 'scheme' {scheme!r} is not http or https")
    return HubHint(
        hub_id=check_hub_id(text.get("id", "")),
        version=text.get("v", "?")[:32],
        address=address,
        port=int(port),
        scheme=scheme,
        name=name,
    )


def hub_proof(join_token: str, hub_id: str, endpoint: str, nonce: str) -> str:
    """Return the hub's answer to ``nonce``: hex HMAC-SHA256 keyed with the join token."""
    message = f"hetmesh-hub-proof\n{hub_id}\n{endpoint}\n{nonce}".encode()
    return hmac.new(join_token.encode(), message, hashlib.sha256).hexdigest()


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
        self._hints: dict[str, HubHint] = {}
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start browsing (in the running event loop)."""
        self._zc = open_zeroconf(self.interfaces)
        self._browser = AsyncServiceBrowser(
            self._zc.zeroconf, HUB_SERVICE_TYPE, handlers=[self._changed]
        )

    async def stop(self) -> None:
        """Stop browsing and close the mDNS sockets."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._browser is not None:
            await self._browser.async_cancel()
        if self._zc is not None:
            await self._zc.async_close()
        self._browser = self._zc = None

    def hints(self) -> list[HubHint]:
        """Return the hubs announced now, by instance name."""
        return [self._hints[name] for name in sorted(self._hints)]

    def _changed(
        self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        if state_change is ServiceStateChange.Removed:
            self._hints.pop(name, None)
            return
        task = asyncio.get_running_loop().create_task(self._resolve(name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve(self, name: str) -> None:
        if self._zc is None:
            return
        info = AsyncServiceInfo(HUB_SERVICE_TYPE, name)
        if not await info.async_request(self._zc.zeroconf, RESOLVE_TIMEOUT_MS):
            _log.debug("mDNS: hub %s did not resolve", name)
            return
        addresses = info.parsed_addresses(IPVersion.V4Only)
        try:
            if not addresses or not info.properties:
                raise InvalidInput(f"{name}: no IPv4 address or TXT record")
            hint = parse_hub_txt(name, addresses[0], info.properties)
        except InvalidInput as err:
            self.malformed += 1
            _log.warning("mDNS: ignoring malformed hub announcement: %s", err)
            return
        self.announced += 1
        if name not in self._hints and len(self._hints) >= MAX_HINTS:
            _log.warning("mDNS: ignoring hub announcement %s: %s already heard", name, MAX_HINTS)
            return
        self._hints[name] = hint
