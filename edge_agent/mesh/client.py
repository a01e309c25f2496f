"""Signed agent-to-agent HTTP calls: sign the request for that peer only, verify the answer
is that peer's to us, time the trip."""

from __future__ import annotations

import asyncio
import errno
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from edge_agent.mesh.credential import H_NONCE, H_RESPONSE, FleetKey, sign_request, verify_response
from edge_agent.mesh.errors import MeshError, PeerUnavailable

PREFIX = "/mesh/v1"


@dataclass(frozen=True, slots=True)
class Reply:
    """A verified answer from a peer."""

    status: int
    doc: dict[str, Any]
    rtt_s: float


class PeerRefused(MeshError):
    """The peer answered, signed, with an error status; the message is the peer's."""

    def __init__(self, peer: str, status: int, message: str) -> None:
        super().__init__(f"peer {peer} answered {status}: {message}")
        self.status = status


class MeshClient:
    """Calls peers' mesh endpoints with signed requests over one shared ClientSession."""

    def __init__(self, session: aiohttp.ClientSession, key: FleetKey, agent_id: str) -> None:
        self.session = session
        self.key = key
        self.agent_id = agent_id

    async def call(
        self,
        peer_id: str,
        endpoint: tuple[str, int],
        name: str,
        doc: dict[str, Any],
        timeout_s: float,
    ) -> Reply:
        """POST ``doc`` to the peer's ``name`` endpoint; raise AuthError / PeerUnavailable."""
        path = f"{PREFIX}/{name}"
        body = json.dumps(doc, separators=(",", ":")).encode()
        headers = sign_request(self.key, self.agent_id, "POST", path, body, to=peer_id)
        headers["Content-Type"] = "application/json"
        url = f"http://{endpoint[0]}:{endpoint[1]}{path}"
        start = time.perf_counter()
        try:
            async with (
                asyncio.timeout(timeout_s),
                self.session.post(url, data=body, headers=headers) as resp,
            ):
                raw = await resp.read()
                status, signature = resp.status, resp.headers.get(H_RESPONSE)
        except TimeoutError:
            raise PeerUnavailable(peer_id, f"no answer to {name} within {timeout_s:g}s") from None
        except aiohttp.ClientConnectorError as err:
            refused = err.os_error.errno == errno.ECONNREFUSED
            raise PeerUnavailable(peer_id, f"{name}: {err.strerror}", refused=refused) from err
        except aiohttp.ClientError as err:
            raise PeerUnavailable(peer_id, f"{name}: connection lost ({err!r})") from err
        rtt = time.perf_counter() - start
        if status == 503 and signature is None:
            # a member whose mesh is not up yet (or is going down) cannot sign: unavailable,
            # never taken as proof of anything, nor counted as a forgery
            raise PeerUnavailable(peer_id, f"{name}: not ready (503)")
        nonce = headers[H_NONCE]
        verify_response(self.key, peer_id, nonce, status, raw, signature, to=self.agent_id)
        try:
            answer = json.loads(raw)
        except ValueError:
            raise PeerRefused(peer_id, status, "answer is not JSON") from None
        if not isinstance(answer, dict):
            raise PeerRefused(peer_id, status, "answer is not a JSON object")
        if status >= 400:
            raise PeerRefused(peer_id, status, str(answer.get("error", "?")))
        return Reply(status, answer, rtt)
