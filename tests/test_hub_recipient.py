"""Findings 12.2 and 12.3 for the hub protocol, through real hubs (aiohttp, SQLite) on loopback.

The agent side is the edge agent's own ``HubClient`` over a recording ClientSession (the
capture: exact URL, headers and body bytes). A heartbeat captured on its way to hub H and
replayed to a second hub that holds the same agent key (a copy of H's database under another
hub id: a standby, a restored backup) is refused and counted ``wrong_recipient``. The hub's
wall clock stepped 900 s forward, one request accepted, stepped back: a heartbeat captured
before is still refused; and once its nonce has been forgotten (the monotonic clock moved
past the window), stepping the wall clock back to its time does not re-open it either.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from edge_agent.protocol.hub_client import HubClient

pytestmark = pytest.mark.asyncio
Client = TestClient[Any, Any]
#: The conftest fixtures ``recorder`` (a Recorder), ``replay`` and ``metric``.
Replay = Callable[..., Awaitable[tuple[int, Any]]]
Metric = Callable[..., Awaitable[float]]


def failed(reason: str) -> str:
    """Return the hub's sample of refused signed requests for ``reason``."""
    return f'hetmesh_hub_auth_failures_total{{reason="{reason}"}}'


async def test_a_heartbeat_captured_for_one_hub_is_refused_by_another(
    aiohttp_client: Any,
    hub_config: Callable[..., HubConfig],
    tmp_path: Path,
    recorder: Any,
    replay: Replay,
    metric: Metric,
) -> None:
    first = hub_config(hub_id="hub-one")
    h1: Client = await aiohttp_client(make_app(first))
    agent = HubClient(str(h1.make_url("")), "a1", recorder.session)
    await agent.enrol(first.join_token)
    assert agent.hub_id == "hub-one"
    await agent.heartbeat({"status": "ok"})
    captured = recorder.last("/v1/agents/a1/heartbeat")
    # a second hub holding the same agent key: H's database copied under another hub id
    second = hub_config(data_dir=tmp_path / "hub2", hub_id="hub-two")
    second.data_dir.mkdir()
    with sqlite3.connect(first.db_path) as src, sqlite3.connect(second.db_path) as dst:
        src.backup(dst)
    h2: Client = await aiohttp_client(make_app(second))
    status, doc = await replay(captured, h2.port)
    assert status == 401 and "signed for 'hub-one', not 'hub-two'" in doc["error"], doc
    assert await metric(h2, "/metrics", failed("wrong_recipient")) == 1
    fleet = await (await h2.get("/v1/fleet")).json()
    assert [a["heartbeats"] for a in fleet["agents"]] == [1]  # only the one H took, copied


class Clocks:
    """The hub's wall clock (stepped by the test) and monotonic clock (real unless moved)."""

    def __init__(self) -> None:
        self.step = 0.0
        self.mono_step = 0.0

    def wall(self) -> float:
        return time.time() + self.step

    def mono(self) -> float:
        return time.monotonic() + self.mono_step


async def test_a_hub_clock_excursion_does_not_reopen_a_replay(
    aiohttp_client: Any,
    hub_config: Callable[..., HubConfig],
    recorder: Any,
    replay: Replay,
    metric: Metric,
) -> None:
    clocks = Clocks()
    config = hub_config()  # 300 s clock window
    hub: Client = await aiohttp_client(make_app(config, clock=clocks.wall, monotonic=clocks.mono))
    agent = HubClient(str(hub.make_url("")), "a1", recorder.session, clock=clocks.wall)
    await agent.enrol(config.join_token)
    await agent.heartbeat({"status": "ok"})
    captured = recorder.last("/v1/agents/a1/heartbeat")
    clocks.step = 900.0  # the hub's clock (and a faketime'd agent's) stepped forward...
    await agent.heartbeat({"status": "ok"})  # ...one request accepted there...
    clocks.step = 0.0  # ...and stepped back: the capture is inside the window again
    status, doc = await replay(captured, hub.port)
    assert status == 401 and "replayed request" in doc["error"], doc
    assert await metric(hub, "/metrics", failed("replay")) == 1
    # later: two windows pass, so the hub forgets the captured nonce (not the one of the
    # excursion, whose time has not come yet)...
    clocks.step = clocks.mono_step = 2 * config.max_clock_skew_s + 2
    await agent.heartbeat({"status": "ok"})
    clocks.step = 1.0  # ...and the wall clock is stepped back to the capture's time
    status, doc = await replay(captured, hub.port)
    assert status == 401 and "possible replay" in doc["error"], doc
    assert await metric(hub, "/metrics", failed("too_old")) == 1
    await agent.heartbeat({"status": "ok"})  # the agent's own fresh requests still pass
    fleet = await (await hub.get("/v1/fleet")).json()
    assert [a["heartbeats"] for a in fleet["agents"]] == [4]  # the agent's own four only
