"""The agent's HTTP client for the hub protocol: enrol, signed heartbeat, outbox sync.

Third-party errors are translated here once: no answer (or a 5xx) is ``HubUnreachable`` (keep
working offline, retry later); a 4xx is ``HubRejected`` (401: re-enrol), except a refusal of
our timestamp, ``HubClockSkew`` (fix the clock; the credential is fine). Requests are signed
for the hub's id, learnt at enrolment. An answer to a signed request must carry the hub's
signature over our nonce, for us (docs/hub-protocol.md §2); one that does not is ``HubForged``
(someone else answered, or a proxy altered it): never acted on.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from edge_agent.errors import HetmeshError
from edge_agent.mesh.errors import AuthError
from edge_agent.protocol.hub_auth import (
    NONCE_HEADER,
    RESPONSE_HEADER,
    signed_headers,
    verify_answer,
)

#: Seconds one request to the hub may take before it counts as unreachable.
REQUEST_TIMEOUT_S = 10.0


class HubError(HetmeshError):
    """Talking to the hub failed."""


class HubUnreachable(HubError, ConnectionError):
    """No usable answer from the hub; keep working offline and retry later."""


class HubForged(HubUnreachable):
    """An answer to a signed request is not signed by the hub that holds our key; ignored."""


class HubClockSkew(HubError):
    """The hub refused our timestamp (``stale``): our clock and the hub's disagree.

    Not a credential problem: re-enrolling cannot fix it. ``skew_s`` is our clock minus the
    hub's (NaN when the hub did not say its time); ``signed``: the hub signed the refusal.
    """

    def __init__(self, skew_s: float, signed: bool) -> None:
        said = f"{skew_s:+.0f} s" if math.isfinite(skew_s) else "by an unknown amount"
        super().__init__(
            f"the hub refused our timestamp: this agent's clock is {said} off the hub's"
            f"{'' if signed else ' (unsigned answer)'}; fix the clock (NTP)"
        )
        self.skew_s = skew_s
        self.signed = signed


class HubRejected(HubError):
    """The hub refused the request (4xx); the message says why. 401: re-enrol."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(f"hub answered {status}: {message}")
        self.status = status
        self.reason = reason  # the answer's ``reason`` field, if any (e.g. "enrolled")


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
        self.hub_id: str | None = None  # whom requests are signed for; from the enrolment
        self.heartbeat_interval_s = 5.0  # until the hub says otherwise at enrolment

    async def _call(self, method: str, path: str, doc: Any = None, signed: bool = True) -> Any:
        body = b"" if doc is None else json.dumps(doc).encode()
        headers = {"Content-Type": "application/json"}
        key, hub_id, sent = self.key, self.hub_id, self.clock()
        if signed:
            if key is None or hub_id is None:
                raise HubRejected(401, "not enrolled: enrol with the join token first")
            headers = signed_headers(self.agent_id, key, hub_id, method, path, body, sent)
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
        # the hub signs every answer to a request it verified (a refusal of our timestamp
        # included); it cannot sign a refusal of one it could not verify (an unsigned 401),
        # and a 5xx is retried whoever sent it
        checked = key is not None and hub_id is not None and signed and status < 500
        if checked and (status != 401 or answer_signature is not None):
            assert key is not None and hub_id is not None
            nonce = headers[NONCE_HEADER]
            try:
                verify_answer(key, hub_id, self.agent_id, nonce, status, raw, answer_signature)
            except AuthError as err:
                raise HubForged(f"{self.base_url} {path}: {err}; answer ignored") from err
        text = raw.decode("utf-8", "replace")
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {"error": text[:200]}
        if status >= 500 or not isinstance(answer, dict):
            raise HubUnreachable(f"hub at {self.base_url} answered {status}: {text[:200]}")
        if status == 401 and answer.get("reason") == "stale":
            hub_time = answer.get("hub_time")
            skew = math.nan
            if isinstance(hub_time, int | float) and not isinstance(hub_time, bool):
                skew = sent - float(hub_time)
            raise HubClockSkew(skew, signed=answer_signature is not None)
        if status >= 400:
            raise HubRejected(status, str(answer.get("error", "")), str(answer.get("reason", "")))
        return answer

    async def enrol(
        self,
        join_token: str,
        labels: dict[str, str] | None = None,
        board: str | None = None,
        hostname: str = "",
    ) -> dict[str, Any]:
        """Trade the join token for this agent's key; return the hub's answer.

        An id the hub holds enrolled is enrolled again only by a request signed with its
        current key (this one's, if the hub still has it); otherwise the hub refuses until
        its operator releases the id (``cloud-hub agents release``).
        """
        doc: dict[str, Any] = {
            "agent_id": self.agent_id,
            "join_token": join_token,
            "labels": labels or {},
        }
        if hostname:
            doc["hostname"] = hostname[:200]
        if board is not None:
            doc["board"] = board
        try:
            answer: dict[str, Any] = await self._call("POST", "/v1/enrol", doc, signed=False)
        except HubRejected as err:
            # the id is enrolled: only the holder of its current key may enrol it again
            if err.reason != "enrolled" or self.key is None or self.hub_id is None:
                raise
            answer = await self._call("POST", "/v1/enrol", doc, signed=True)
        hub_id = answer.get("hub_id")
        if not isinstance(hub_id, str) or not hub_id:
            raise HubRejected(
                426,
                "the hub's enrolment answer names no hub_id: it predates recipient-bound"
                " signatures (docs/security.md); upgrade the hub",
            )
        self.key, self.hub_id = str(answer["key"]), hub_id
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
