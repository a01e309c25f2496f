"""A mesh-enabled agent on a loopback test server, for the agent's route fuzz tests.

``fuzzed_agent`` starts it (emulated rk3588, fleet key ``KEY``) and, before any fuzzing,
has it finish one task of its own and one forwarded attempt (``before-1``) signed by ``PEER``:
both must survive the fuzz. ``Agent`` sends raw or fleet-signed requests to it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.mesh.link import MESH, PREFIX
from edge_agent.agent.web.api import make_app
from edge_agent.mesh import FleetKey, sign_request
from edge_agent.mesh.credential import H_NONCE, H_RESPONSE, verify_response
from tests.support.fuzz import Served, routes

KEY = "agent-fuzz-routes-fleet-key-0000"
PEER = "fuzz-peer"
#: Keys of a task submission and its contract (``POST /v1/tasks``), for hostile documents.
TASK_KEYS = (
    "semantics",
    "requirements",
    "model",
    "priority",
    "tenant",
    "task_class",
    "policy",
    "command",
    "deferrable",
    "gflops",
    "kinds",
    "precision",
    "device_count",
)
#: A contract any emulated board runs at once: opaque (no model), a tenth of a GFLOP.
CONTRACT = {"semantics": {"gflops": 0.1}, "requirements": {"model_format": None}}


@dataclass
class Agent(Served):
    app: web.Application
    key: FleetKey
    peer: str  # the agent id requests are signed as
    routes: list[tuple[str, str]]
    task_id: str  # a task done before the fuzz
    task: dict[str, Any]  # ... and its document then

    request = Served.send

    def signed(self, route: str, body: bytes, method: str = "POST") -> tuple[int, Any]:
        """Send a request signed with the fleet key; check the agent signed its answer."""
        path = f"{PREFIX}/{route}"
        headers = sign_request(self.key, self.peer, method, path, body, to=self.mesh.agent_id)
        status, raw, _, answer_headers = self.request(method, path, body, headers)
        verify_response(
            self.key,
            self.mesh.agent_id,
            headers[H_NONCE],
            status,
            raw,
            answer_headers.get(H_RESPONSE),
            to=self.peer,
        )
        return status, json.loads(raw)

    @property
    def mesh(self) -> Any:
        return self.app[MESH]

    @property
    def endpoint(self) -> str:
        """Return the address:port a hello to this agent is sent to."""
        return f"{self.client.host}:{self.client.port}"

    def counters(self) -> dict[str, int]:
        return dict(self.mesh.node.counters)


async def final_state(client: TestClient[Any, Any], task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        resp = await client.get(f"/v1/tasks/{task_id}")
        task: dict[str, Any] = (await resp.json())["task"]
        if task["state"] in ("done", "failed", "cancelled"):
            return task
        assert time.monotonic() < deadline, task
        await asyncio.sleep(0.02)


def fuzzed_agent(tmp: Path) -> Iterator[Agent]:
    """Yield a started mesh-enabled agent (emulated rk3588) with a task done and a forwarded
    attempt accepted before any fuzzing; close it after."""
    config = AgentConfig(
        data_dir=tmp / "data",
        port=0,
        profile="rk3588",
        emulation_jitter=0.0,
        shutdown_grace_s=0.0,
        telemetry_interval_s=0.0,
        mesh_fleet_key=KEY,
    )
    app = make_app(config)
    loop = asyncio.new_event_loop()

    async def start() -> tuple[TestClient[Any, Any], str, dict[str, Any]]:
        client: TestClient[Any, Any] = TestClient(TestServer(app))
        await client.start_server()
        assert client.server.port is not None
        await app[MESH].start(client.server.port)  # what daemon.serve does once it listens
        resp = await client.post("/v1/tasks", json={"semantics": {"gflops": 0.1}})
        assert resp.status == 202, await resp.text()
        task_id = (await resp.json())["task"]["id"]
        task = await final_state(client, task_id)
        assert task["state"] == "done", task
        return client, task_id, task

    try:
        client, task_id, task = loop.run_until_complete(start())
        a = Agent(loop, client, app, FleetKey(KEY), PEER, routes(app), task_id, task)
        # a forwarded attempt accepted before the fuzz: it must stay done, exactly once
        body = {"contract": CONTRACT, "key": "before-1", "attempt": 1, "lease_s": 30}
        status, answer = a.signed("tasks", json.dumps(body).encode())
        assert status == 200 and answer["state"] == "done", answer
        yield a
        loop.run_until_complete(client.close())
    finally:
        loop.close()
