"""Finding the hub over mDNS (``_hetmesh-hub._tcp.local.``) and checking that it is the fleet's.

An announcement is a hint, never an identity: anyone on the link can announce a hub. Before
an agent sends a discovered hub its join token or any telemetry, the hub must answer a fresh
nonce with ``proof`` = hex HMAC-SHA256(join token, ``hetmesh-hub-proof\\nHUB_ID\\nENDPOINT\\n
NONCE``), where ENDPOINT is the ``address:port`` the hub saw the question arrive on. A server
that does not hold the join token cannot answer; one that relays the question to the real hub
gets back the real hub's endpoint, not its own, and is refused too (docs/hub-protocol.md §8).

The hub side (``cloud_hub/hub/advertise.py``) builds its TXT record with this module and its
proofs with ``hub_auth.hub_proof``, so each format is defined once; the agent's browser is
``edge_agent.agent.hub.finder``. The TXT helpers are the mesh's (``edge_agent.mesh.advertise``).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edge_agent.errors import HetmeshError, InvalidInput
from edge_agent.mesh.advertise import fit_txt, read_txt
from edge_agent.protocol.hub_auth import hub_proof

HUB_SERVICE_TYPE = "_hetmesh-hub._tcp.local."
#: ``[hub] url`` value that means "find the hub over mDNS".
DISCOVER = "mdns"
#: The hub's unauthenticated endpoint that answers a nonce with a proof.
PROOF_PATH = "/v1/hub/proof"
SCHEMES = ("http", "https")
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
