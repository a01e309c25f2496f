"""The agent's HTTP client for the hub protocol: enrol, signed heartbeat, outbox sync.

Third-party errors are translated here once: no answer (or a 5xx) is ``HubUnreachable`` (keep
working offline, retry later); a 4xx is ``HubRejected`` (401: re-enrol). An answer to a signed
request must carry the hub's signature over our nonce (docs/hub-protocol.md §2); one that does
not is ``HubForged`` (someone else answered, or a proxy altered it): never acted on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from edge_agent.agent.hub_auth import NONCE_HEADER, RESPONSE_HEADER, signed_headers, verify_answer
from edge_agent.errors import HetmeshError
from edge_agent.mesh.errors import AuthError

#: Seconds one request to the hub may take before it counts as unreachable.
REQUEST_TIMEOUT_S = 10.0


class HubError(HetmeshError):
    """Talking to the hub failed."""


class HubUnreachable(HubError, ConnectionError):
    """No usable answer from the hub; keep working offline and retry later."""


class HubForged(HubUnreachable):
    """An answer to a signed request is not signed by the hub that holds our key; ignored."""


class HubRejected(HubError):
    """The hub refused the request (4xx); the message says why. 401: re-enrol."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"hub answered {status}: {message}")
        self.status = status


class HubClient:
    """One agent's requests to the hub over an injected ``aiohttp.ClientSession``."""

    def __init__(
        self,
        base_url: str,
        agent_id: str,
        session: aiohttp.ClientSession,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.agent_id = agent_id
        self.session = session
        self.clock = clock
        self.key: str | None = None
        self.heartbeat_interval_s = 5.0  # until the hub says otherwise at enrolment

    async def _call(self, method: str, path: str, doc: Any = None, signed: bool = True) -> Any:
        body = b"" if doc is None else json.dumps(doc).encode()
        headers = {"Content-Type": "application/json"}
        key = self.key
        if signed:
            if key is None:
                raise HubRejected(401, "not enrolled: enrol with the join token first")
            headers = signed_headers(self.agent_id, key, method, path, body, self.clock())
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        try:
            async with self.session.request(
                method, self.base_url + path, data=body or None, headers=headers, timeout=timeout
            ) as resp:
                raw = await resp.read()
                status, answer_signature = resp.status, resp.headers.get(RESPONSE_HEADER)
        except (aiohttp.ClientError, TimeoutError) as err:
            reason = getattr(err, "os_error", None) or err or type(err).__name__
            raise HubUnreachable(f"no answer from {self.base_url}: {reason}") from err
        # the hub signs every answer to a request it verified; it cannot sign a refusal of one
        # it could not verify (401), and a 5xx is retried whoever sent it
        if key is not None and signed and status < 500 and status != 401:
            try:
                verify_answer(key, headers[NONCE_HEADER], status, raw, answer_signature)
            except AuthError as err:
                raise HubForged(f"{self.base_url} {path}: {err}; answer ignored") from err
        text = raw.decode("utf-8", "replace")
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {"error": text[:200]}
        if status >= 500 or not isinstance(answer, dict):
            raise HubUnreachable(f"hub at {self.base_url} answered {status}: {text[:200]}")
        if status >= 400:
            raise HubRejected(status, str(answer.get("error", "")))
        return answer

    async def enrol(
        self,
        join_token: str,
        labels: dict[str, str] | None = None,
        board: str | None = None,
        hostname: str = "",
    ) -> dict[str, Any]:
        """Trade the join token for this agent's key; return the hub's answer."""
        doc: dict[str, Any] = {
            "agent_id": self.agent_id,
            "join_token": join_token,
            "labels": labels or {},
        }
        if hostname:
            doc["hostname"] = hostname[:200]
        if board is not None:
            doc["board"] = board
        answer: dict[str, Any] = await self._call("POST", "/v1/enrol", doc, signed=False)
        self.key = str(answer["key"])
        self.heartbeat_interval_s = float(answer["heartbeat_interval_s"])
        return answer

    async def heartbeat(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Send one heartbeat; return the hub's answer (interval, policy to apply)."""
        answer: dict[str, Any] = await self._call(
            "POST", f"/v1/agents/{self.agent_id}/heartbeat", doc
        )
        return answer

    async def sync(self, records: list[dict[str, Any]], dropped_through: int = 0) -> dict[str, Any]:
        """Send outbox records; return acked, applied, duplicates, lost."""
        doc = {"records": records, "dropped_through": dropped_through}
        answer: dict[str, Any] = await self._call("POST", f"/v1/agents/{self.agent_id}/sync", doc)
        return answer

    async def learning(self, report: dict[str, Any]) -> dict[str, Any]:
        """Send the predictor report; return the latest model and the run instruction."""
        path = f"/v1/agents/{self.agent_id}/learning"
        answer: dict[str, Any] = await self._call("POST", path, report)
        return answer

    async def prove(self, nonce: str) -> dict[str, Any]:
        """Ask the hub to prove it holds the join token (``hub_discovery.check_proof``)."""
        answer: dict[str, Any] = await self._call(
            "POST", "/v1/hub/proof", {"nonce": nonce}, signed=False
        )
        return answer

    async def acked(self) -> int:
        """Return the highest seq the hub holds for this agent (resume after it)."""
        answer = await self._call("GET", f"/v1/agents/{self.agent_id}/sync")
        return int(answer["acked"])
