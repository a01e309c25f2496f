"""A cheap load generator for the hub's heartbeat: one keep-alive connection per agent.

Each simulated agent speaks HTTP/1.1 over a raw asyncio stream, so the generator costs tens
of microseconds of CPU per heartbeat rather than aiohttp's client path. Every heartbeat is
still a real request the hub must accept: signed with the agent's own key from enrolment,
for the hub's id, with a fresh nonce and timestamp (``edge_agent.mesh.credential``), and the
hub's answer is checked as an agent checks it (status, the hub's signature over our nonce,
``ok``). The agent then waits the interval the hub's answer names, as the daemon does
(``edge_agent.agent.hub.link._interval``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from edge_agent.agent.hub.link import _interval
from edge_agent.mesh.credential import H_NONCE, FleetKey, sign_request, verify_response

#: Seconds one heartbeat may take before it counts as an error (the agent's own limit).
TIMEOUT_S = 10.0


class HubRefused(Exception):
    """The hub answered a heartbeat with something an agent would not accept."""


class RawAgent:
    """One agent: its key, its connection, its heartbeat body; ``beat`` sends one heartbeat."""

    def __init__(self, agent_id: str, key: str, hub_id: str, host: str, port: int) -> None:
        self.agent_id, self.hub_id, self.host, self.port = agent_id, hub_id, host, port
        self.key = FleetKey(key)
        self.path = f"/v1/agents/{agent_id}/heartbeat"
        doc = {
            "status": "ok",
            "queue_depth": 0,
            "devices": [
                {"id": "cpu0", "kind": "cpu", "utilization": random.random(), "health": "online"},
                {"id": "npu0", "kind": "npu", "utilization": random.random(), "health": "online"},
            ],
        }
        self.body = json.dumps(doc).encode()
        self.head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(self.body)}\r\n"
        ).encode()
        self.interval_s = 0.0  # until the hub names one
        self.connects = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    @property
    def idle(self) -> bool:
        """Whether the agent holds no open connection: none, or one the hub has closed (an
        idle keep-alive connection past its timeout), which a client drops, as aiohttp's
        pool does, rather than send on it."""
        if self._writer is not None and self._reader is not None and self._reader.at_eof():
            self.close()
        return self._writer is None

    async def connect(self) -> None:
        """Open the keep-alive connection (again, after the hub closed it)."""
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self.connects += 1

    def close(self) -> None:
        """Close the connection."""
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def beat(self) -> dict[str, Any]:
        """Send one freshly signed heartbeat; return the hub's checked answer."""
        if self._writer is None:
            await self.connect()
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        signed = sign_request(self.key, self.agent_id, "POST", self.path, self.body, to=self.hub_id)
        fields = "".join(f"{k}: {v}\r\n" for k, v in signed.items())
        try:
            async with asyncio.timeout(TIMEOUT_S):
                writer.write(self.head + fields.encode() + b"\r\n" + self.body)
                head = await reader.readuntil(b"\r\n\r\n")
                status, headers = _parse_head(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
        except BaseException:
            self.close()  # a half-read answer leaves the connection unusable
            raise
        if headers.get("connection", "").lower() == "close":
            self.close()
        verify_response(
            self.key,
            self.hub_id,
            signed[H_NONCE],
            status,
            body,
            headers.get("x-hetmesh-response-signature"),
            to=self.agent_id,
        )
        answer = json.loads(body)
        if status != 200 or not isinstance(answer, dict) or answer.get("ok") is not True:
            raise HubRefused(f"{status}: {body[:200]!r}")
        self.interval_s = _interval(answer, self.interval_s or 5.0)
        return answer


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def heartbeat_loop(
    agent: RawAgent, until: float, latencies: list[float], errors: list[str]
) -> None:
    """Heartbeat at the interval the hub names, from a random phase, until ``until``.

    The connection is opened just before the first heartbeat (the hub closes one that sends
    no request head within its ``header_timeout_s``), and again when the hub has closed it
    (idle past its keep-alive while a large fleet enrols), and is not part of its round trip.
    """
    await asyncio.sleep(random.uniform(0, agent.interval_s))
    while (started := time.perf_counter()) < until:
        try:
            if agent.idle:
                await agent.connect()
                started = time.perf_counter()
            await agent.beat()
            latencies.append(time.perf_counter() - started)
        except Exception as err:  # counted and reported; a benchmark keeps going
            errors.append(f"{type(err).__name__}: {err}")
        await asyncio.sleep(max(0.0, started + agent.interval_s - time.perf_counter()))
