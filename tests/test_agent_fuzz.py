"""Fuzz the submit endpoints with hypothesis: any JSON body gets a 2xx or a 4xx, never a 5xx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.web.api import make_app
from tests.support.fuzz import json_values
from tests.support.fuzzed_agent import TASK_KEYS

KEYS = (
    *TASK_KEYS,
    "max_latency_s",
    "deadline_s",
    "operator_histogram",
    "param_bytes",
    "model_format",
    "config_id",
)
WORDS = ["tiny_cnn_int8", "int8", "cpu", "npu", "../x"]
VALUES = json_values(KEYS, WORDS, nan=False, huge=None, width=3, max_leaves=10)
BODIES = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=5) | VALUES

Fixture = tuple[asyncio.AbstractEventLoop, TestClient[Any, Any]]


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    tmp = tmp_path_factory.mktemp("fuzz")
    config = AgentConfig(data_dir=tmp / "data", port=0, profile="rk3588", shutdown_grace_s=0.0)
    loop = asyncio.new_event_loop()

    async def make() -> TestClient[Any, Any]:
        client: TestClient[Any, Any] = TestClient(TestServer(make_app(config)))
        await client.start_server()
        return client

    try:
        client = loop.run_until_complete(make())
        yield loop, client
        loop.run_until_complete(client.close())
    finally:
        loop.close()


def post(agent: Fixture, path: str, body: bytes) -> tuple[int, Any]:
    loop, client = agent

    async def go() -> tuple[int, Any]:
        resp = await client.post(path, data=body, headers={"Content-Type": "application/json"})
        return resp.status, await resp.json()

    return loop.run_until_complete(go())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=BODIES, batch=st.booleans())
def test_no_body_makes_a_5xx(agent: Fixture, body: Any, batch: bool) -> None:
    path, doc = ("/v1/tasks:batch", {"tasks": [body]}) if batch else ("/v1/tasks", body)
    status, answer = post(agent, path, json.dumps(doc).encode())
    assert status in (202, 400, 409, 413), answer
    if status != 202:
        assert answer["ok"] is False and answer["error"]


@settings(max_examples=60, deadline=None)
@given(raw=st.binary(max_size=64))
def test_no_bytes_make_a_5xx(agent: Fixture, raw: bytes) -> None:
    status, answer = post(agent, "/v1/tasks", raw)
    assert status in (202, 400), answer
