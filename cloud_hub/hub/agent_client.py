"""The agent side of the hub protocol: enrol, signed heartbeat, outbox sync (docs/hub-protocol.md).

The edge agent will wire this in; tests, the benchmark and the demo use it as an agent would.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp

from cloud_hub.hub.clock import Clock
from cloud_hub.hub.protocol import signed_headers
from edge_agent.errors import HetmeshError


class HubError(HetmeshError):
    """Talking to the hub failed."""


class HubUnreachable(HubError):
    """No answer from the hub; keep working offline and retry later."""


class HubRejected(HubError):
    """The hub refused the request (4xx); the message says why. 401: re-enrol."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"hub answered {status}: {message}")
        self.status = status


class HubClient:
    """One agent's connection to the hub; the ``aiohttp.ClientSession`` is injected."""

    def __init__(
        self, base_url: str, agent_id: str, session: aiohttp.ClientSession, clock: Clock = time.time
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.agent_id = agent_id
        self.session = session
        self.clock = clock
        self.key: str | None = None
        self.heartbeat_interval_s = 5.0

    async def _call(self, method: str, path: str, doc: Any = None, signed: bool = True) -> Any:
        body = b"" if doc is None else json.dumps(doc).encode()
        headers = {"Content-Type": "application/json"}
        if signed:
            if self.key is None:
                raise HubRejected(401, "not enrolled: call enrol() with the join token first")
            headers = signed_headers(self.agent_id, self.key, method, path, body, self.clock())
        try:
            async with self.session.request(
                method, self.base_url + path, data=body or None, headers=headers
            ) as resp:
                answer = await resp.json(content_type=None)
                if resp.status >= 400:
                    raise HubRejected(resp.status, str(answer.get("error", resp.reason)))
                return answer
        except (aiohttp.ClientConnectionError, TimeoutError) as err:
            raise HubUnreachable(f"no hub at {self.base_url}: {err}") from err

    async def enrol(
        self,
        join_token: str,
        labels: dict[str, str] | None = None,
        board: str | None = None,
    ) -> str:
        """Trade the join token for this agent's fleet credential; return the key."""
        doc: dict[str, Any] = {
            "agent_id": self.agent_id,
            "join_token": join_token,
            "labels": labels or {},
        }
        if board is not None:
            doc["board"] = board
        answer = await self._call("POST", "/v1/enrol", doc, signed=False)
        self.key = str(answer["key"])
        self.heartbeat_interval_s = float(answer["heartbeat_interval_s"])
        return self.key

    async def heartbeat(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Send one heartbeat; return the hub's answer (interval, desired policy)."""
        answer: dict[str, Any] = await self._call(
            "POST", f"/v1/agents/{self.agent_id}/heartbeat", doc
        )
        return answer

    async def sync(self, records: list[dict[str, Any]], dropped_through: int = 0) -> dict[str, Any]:
        """Send outbox records; return acked, applied, duplicates, lost."""
        doc = {"records": records, "dropped_through": dropped_through}
        answer: dict[str, Any] = await self._call("POST", f"/v1/agents/{self.agent_id}/sync", doc)
        return answer

    async def acked(self) -> int:
        """Return the highest seq the hub holds for this agent (resume from the next)."""
        answer = await self._call("GET", f"/v1/agents/{self.agent_id}/sync")
        return int(answer["acked"])
