"""mDNS advertisement of ``_hetmesh._tcp.local.``: small TXT hints, never secrets.

The TXT helpers and ``ServiceBrowser`` also serve the hub's ``_hetmesh-hub._tcp``
(``edge_agent.protocol.hub_discovery``, ``edge_agent.agent.hub.finder``).
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from zeroconf import IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from edge_agent.errors import InvalidInput
from edge_agent.mesh.errors import AdvertError
from edge_agent.mesh.mdns_scope import Scope

_log = logging.getLogger(__name__)

SERVICE_TYPE = "_hetmesh._tcp.local."
#: Largest TXT record we publish (all strings with their length bytes).
TXT_MAX_BYTES = 400
#: Milliseconds a TXT/SRV lookup may take after a browse event.
RESOLVE_TIMEOUT_MS = 1500
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")
H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class Hint:
    """What an announcement claims about a peer: unverified until its challenge succeeds."""

    agent_id: str
    version: str
    api_port: int
    fingerprint: str | None  # fleet key fingerprint; None when the service shows none
    kinds: str  # device-kind summary, e.g. "cpu_arm:1,npu:1"
    address: str
    name: str  # the mDNS instance name

    @property
    def endpoint(self) -> tuple[str, int]:
        """Return (address, API port)."""
        return (self.address, self.api_port)


def check_agent_id(agent_id: str) -> str:
    """Return ``agent_id`` if it is a valid DNS label (letters, digits, '-', ≤ 63)."""
    if not _ID.match(agent_id):
        raise AdvertError(
            f"agent id {agent_id!r}: use 1-63 letters, digits or '-', starting with one alnum"
        )
    return agent_id


def fit_txt(props: dict[str, str], fix: str = "") -> dict[str, str]:
    """Return ``props`` if they fit in TXT_MAX_BYTES, else AdvertError (``fix`` says how)."""
    size = sum(1 + len(k.encode()) + 1 + len(v.encode()) for k, v in props.items())
    if size > TXT_MAX_BYTES:
        raise AdvertError(f"TXT record is {size} bytes, over {TXT_MAX_BYTES}{fix}")
    return props


def read_txt(name: str, props: Mapping[bytes, bytes | None]) -> tuple[dict[str, str], int]:
    """Return an announcement's TXT properties as text and its 'port'; AdvertError if bad."""
    text = {
        k.decode("ascii", "replace"): (v or b"").decode("utf-8", "replace")
        for k, v in props.items()
    }
    port = text.get("port", "")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise AdvertError(f"{name}: TXT 'port' {port!r} is not a TCP port")
    return text, int(port)


def build_txt(
    agent_id: str, version: str, api_port: int, fingerprint: str, kinds: str
) -> dict[str, str]:
    """Return the TXT properties, raising AdvertError if they exceed TXT_MAX_BYTES."""
    props = {
        "id": check_agent_id(agent_id),
        "v": version,
        "port": str(api_port),
        "fp": fingerprint,
        "kinds": kinds,
    }
    return fit_txt(props, ": shorten 'kinds'")


def parse_txt(name: str, address: str, props: Mapping[bytes, bytes | None]) -> Hint:
    """Return the hint an announcement makes, raising AdvertError if it is malformed."""
    text, port = read_txt(name, props)
    fingerprint = text.get("fp") or None
    if fingerprint is not None and not re.fullmatch(r"[0-9a-f]{16}", fingerprint):
        raise AdvertError(f"{name}: TXT 'fp' {fingerprint!r} is not a key fingerprint")
    return Hint(
        agent_id=check_agent_id(text.get("id", "")),
        version=text.get("v", "?")[:32],
        api_port=port,
        fingerprint=fingerprint,
        kinds=text.get("kinds", "")[:200],
        address=address,
        name=name,
    )


def kinds_summary(kinds: list[str]) -> str:
    """Return "kind:count,..." sorted by kind, e.g. "cpu_arm:1,npu:1"."""
    counts: dict[str, int] = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    return ",".join(f"{k}:{n}" for k, n in sorted(counts.items()))


def new_zeroconf(interfaces: list[str]) -> AsyncZeroconf:
    """Return an AsyncZeroconf bound to ``interfaces`` (IPv4 addresses)."""
    return AsyncZeroconf(interfaces=list(interfaces), ip_version=IPVersion.V4Only)


def service_info(address: str, props: dict[str, str]) -> AsyncServiceInfo:
    """Return the service record set for an agent reachable at ``address``."""
    agent_id = props["id"]
    return AsyncServiceInfo(
        SERVICE_TYPE,
        f"{agent_id}.{SERVICE_TYPE}",
        addresses=[socket.inet_aton(address)],
        port=int(props["port"]),
        properties=dict(props),
        server=f"{agent_id}.local.",
    )


class ServiceBrowser(Generic[H]):
    """Browses for one mDNS service type; ``parse`` turns each resolved announcement's
    (instance name, IPv4 address, TXT) into a hint for ``on_hint``, raising InvalidInput
    (reported to ``on_malformed``) when it is malformed; ``on_gone`` hears removals. With a
    ``scope``, only addresses on the interfaces it names count; an announcement with none of
    those goes to ``on_foreign`` (name, addresses) instead.
    """

    def __init__(
        self,
        aiozc: AsyncZeroconf,
        service_type: str,
        parse: Callable[[str, str, Mapping[bytes, bytes | None]], H],
        on_hint: Callable[[H], None],
        on_gone: Callable[[str], None],
        on_malformed: Callable[[str, str], None],
        spawn: Callable[..., object],
        scope: Scope | None = None,
        on_foreign: Callable[[str, list[str]], None] | None = None,
    ) -> None:
        self._zc = aiozc
        self._scope = scope  # None: any address; else only those on the interfaces we serve
        self._on_foreign = on_foreign
        self.service_type = service_type
        self._parse = parse
        self._on_hint = on_hint
        self._on_gone = on_gone
        self._on_malformed = on_malformed
        self._spawn = spawn
        self._browser: AsyncServiceBrowser | None = None

    def start(self) -> None:
        """Start browsing."""
        self._browser = AsyncServiceBrowser(
            self._zc.zeroconf,
            self.service_type,
            handlers=[self._changed],
        )

    async def stop(self) -> None:
        """Stop browsing."""
        if self._browser is not None:
            await self._browser.async_cancel()
            self._browser = None

    def _changed(
        self,
        zeroconf: Zeroconf,
        service_type: str,
        name: str,
        state_change: ServiceStateChange,
    ) -> None:
        if state_change is ServiceStateChange.Removed:
            self._on_gone(name)
        else:
            self._spawn(self._resolve(name), f"mdns-resolve-{name}")

    async def _resolve(self, name: str) -> None:
        info = AsyncServiceInfo(self.service_type, name)
        if not await info.async_request(self._zc.zeroconf, RESOLVE_TIMEOUT_MS):
            _log.debug("mDNS: %s did not resolve", name)
            return
        heard = info.parsed_addresses(IPVersion.V4Only)
        addresses = [a for a in heard if self._scope is None or self._scope.allows(a)]
        if heard and not addresses:
            _log.debug("mDNS: %s announces %s, none on our interfaces", name, heard)
            if self._on_foreign is not None:
                self._on_foreign(name, heard)
            return
        if not addresses or not info.properties:
            self._on_malformed(name, "no IPv4 address or TXT")
            return
        try:
            hint = self._parse(name, addresses[0], info.properties)
        except InvalidInput as err:
            self._on_malformed(name, str(err))
            return
        self._on_hint(hint)


class Browser(ServiceBrowser[Hint]):
    """Browses for agents (``_hetmesh._tcp``); calls ``on_hint`` for each announcement."""

    def __init__(
        self,
        aiozc: AsyncZeroconf,
        on_hint: Callable[[Hint], None],
        on_gone: Callable[[str], None],
        on_malformed: Callable[[str, str], None],
        spawn: Callable[..., object],
        scope: Scope | None = None,
        on_foreign: Callable[[str, list[str]], None] | None = None,
    ) -> None:
        super().__init__(
            aiozc,
            SERVICE_TYPE,
            parse_txt,
            on_hint,
            on_gone,
            on_malformed,
            spawn,
            scope,
            on_foreign,
        )
