"""Finding 12.4: an agent whose clock is 600 s ahead of the hub's, through the real hub and
agent applications on loopback (aiohttp, SQLite).

The hub refuses its timestamps (``stale``) and signs that refusal with its own time; the agent
logs the measured skew once, backs off, shows ``degraded: clock skew 600 s vs hub`` in
``/v1/health`` and ``edge-agent status``, and never re-enrols or rotates its key for it; with
its clock corrected it is ``ok`` again on the same credential.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from cloud_hub.hub.api import make_app as hub_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.request_auth import HUB
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.hub import link as hub_link
from edge_agent.agent.web.api import AGENT
from edge_agent.agent.web.api import make_app as agent_app
from edge_agent.cli import main as cli_main

pytestmark = pytest.mark.asyncio
#: The conftest fixture ``until`` (and ``metric``, typed where it is used).
Until = Callable[..., Awaitable[Any]]


async def test_an_agent_clock_600_s_ahead_is_a_clock_problem_never_a_re_enrolment(
    aiohttp_client: Any,
    hub_config: Callable[..., HubConfig],
    joined_agent: Callable[..., AgentConfig],
    until: Until,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    metric: Callable[..., Awaitable[float]],
) -> None:
    monkeypatch.setattr(hub_link, "CLOCK_BACKOFF_MAX_S", 0.2)  # back-off doubles up to this
    hub = await aiohttp_client(hub_app(hub_config(heartbeat_interval_s=0.1)))
    config = joined_agent(str(hub.make_url("")).rstrip("/"))
    agent = await aiohttp_client(agent_app(config))
    link = agent.app[AGENT].link
    await until(lambda: link.connected)
    enrolments: list[str] = []
    enrol = link.client.enrol

    async def counted(*args: Any, **kwargs: Any) -> Any:
        enrolments.append(str(args[:1]))
        return await enrol(*args, **kwargs)

    link.client.enrol = counted
    key, credential = link.client.key, (config.data_dir / hub_link.CREDENTIAL_FILE).read_text()

    async def health() -> dict[str, Any]:
        doc: dict[str, Any] = await (await agent.get("/v1/health")).json()
        return doc

    def stale_refusals() -> Awaitable[float]:
        return metric(hub, "/metrics", 'hetmesh_hub_auth_failures_total{reason="stale"}')

    caplog.set_level(logging.WARNING, logger="edge_agent.agent.hub.link")
    link.client.clock = lambda: time.time() + 600.0
    doc = await until(lambda: _degraded(health()))
    assert doc["problem"].startswith("clock skew 600 s vs hub"), doc
    assert doc["hub"]["clock_skew_s"] == pytest.approx(600, abs=1)
    await until(lambda: _at_least(stale_refusals(), 6))  # several tries, backing off
    assert link._clock_wait_s == 0.2  # doubled from hub_retry_s (0.05) up to the cap
    # the credential is the same everywhere: no re-enrolment, no new key
    assert enrolments == [] and link.client.key == key
    assert (config.data_dir / hub_link.CREDENTIAL_FILE).read_text() == credential
    assert hub.app[HUB].store.key(link.agent_id) == key
    link_logs = [r for r in caplog.records if r.name == "edge_agent.agent.hub.link"]
    skew_logs = [r for r in link_logs if "clock is +600 s off" in r.getMessage()]
    assert len(skew_logs) == 1, [r.getMessage() for r in link_logs]  # once, not per try

    capsys.readouterr()
    url = str(agent.make_url("")).rstrip("/")
    assert await asyncio.to_thread(cli_main, ["status", "--url", url]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "degraded: clock skew 600 s vs hub" in first, first

    link.client.clock = time.time  # the clock is corrected
    doc = await until(lambda: _ok(health()))
    assert doc["problem"] is None and doc["hub"]["clock_skew_s"] is None
    assert enrolments == [] and link.client.key == key


async def _degraded(doc: Awaitable[dict[str, Any]]) -> dict[str, Any] | None:
    found = await doc
    return found if found["status"] == "degraded" else None


async def _ok(doc: Awaitable[dict[str, Any]]) -> dict[str, Any] | None:
    found = await doc
    return found if found["status"] == "ok" and found["hub"]["connected"] else None


async def _at_least(value: Awaitable[float], n: float) -> bool:
    return await value >= n
