"""A hub on a loopback test server with one enrolled agent, for the hub's fuzz tests.

``fuzzed_hub`` starts it, enrols the agent and has the hub accept ``sent`` records before any
fuzzing (they must survive it); ``Hub`` sends raw or agent-signed requests to it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from edge_agent.protocol.hub_auth import (
    NONCE_HEADER,
    RESPONSE_HEADER,
    signed_headers,
    verify_answer,
)
from edge_agent.protocol.hub_client import HubClient
from tests.support.fuzz import Served, routes


@dataclass
class Hub(Served):
    agent: HubClient
    db: Path
    routes: list[tuple[str, str]]
    sent: dict[int, dict[str, Any]]  # seq -> the record the hub accepted before fuzzing

    def request(
        self, method: str, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes, str]:
        status, raw, content_type, _ = self.send(method, path, body, headers)
        return status, raw, content_type

    def signed(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """Send a request signed as the agent; check the hub signed its answer, errors too."""
        key, hub_id, agent_id = self.agent.key, self.agent.hub_id, self.agent.agent_id
        assert key is not None and hub_id is not None
        headers = signed_headers(agent_id, key, hub_id, method, path, body, time.time())

        async def go() -> tuple[int, bytes, str | None]:
            async with self.client.request(method, path, data=body, headers=headers) as resp:
                return resp.status, await resp.read(), resp.headers.get(RESPONSE_HEADER)

        status, raw, signature = self.run(go())
        if status != 405:  # the router refuses a wrong method before the request is verified
            verify_answer(key, hub_id, agent_id, headers[NONCE_HEADER], status, raw, signature)
        return status, json.loads(raw)


def fuzzed_hub(
    tmp: Path, join: str, admin: str, agent_id: str, sent: dict[int, dict[str, Any]]
) -> Iterator[Hub]:
    """Yield a started hub (tokens ``join``, ``admin``) that accepted ``sent`` from
    ``agent_id``; close it after."""
    config = HubConfig(data_dir=tmp / "hub", port=0, join_token=join, admin_token=admin)
    app = make_app(config)
    loop = asyncio.new_event_loop()

    async def start() -> tuple[TestClient[Any, Any], HubClient]:
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        agent = HubClient(str(client.make_url("")), agent_id, client.session)
        await agent.enrol(join, {"site": "lab"}, board="rk3588")
        answer = await agent.sync(list(sent.values()))
        assert answer["acked"] == len(sent) and answer["applied"] == len(sent)
        return client, agent

    try:
        client, agent = loop.run_until_complete(start())
        yield Hub(loop, client, agent, config.data_dir / "hub.db", routes(app), sent)
        loop.run_until_complete(client.close())
    finally:
        loop.close()
