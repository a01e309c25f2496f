"""Prometheus's own linter, ``promtool check metrics``, accepts what the agent and hub expose.

A real agent daemon (HTTP, SQLite, emulated RK3588) after running tasks, and a real hub after
an agent's heartbeat and outbox sync, so labelled series (per state, per policy, per outcome)
are present, not only the empty families of a fresh process. ``promtool`` comes from Debian's
``prometheus`` package (``.ci/run`` installs it); the test fails under ``HETMESH_REQUIRE_ALL``
rather than skip without it.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import pytest

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from edge_agent.agent.config import AgentConfig
from edge_agent.protocol.hub_client import HubClient

pytestmark = pytest.mark.asyncio


def _promtool(text: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return subprocess.run(
        [tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )


async def test_the_agents_metrics_pass_promtool(
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
) -> None:
    async with agent_daemon(emulated_agent()) as url, aiohttp.ClientSession() as http:
        body = {"tasks": [{"model": "tiny_cnn_fp32"}, {"semantics": {"gflops": 0.1}}]}
        async with http.post(f"{url}/v1/tasks:batch", json=body) as resp:
            assert resp.status == 202, await resp.text()
            ids = [t["id"] for t in (await resp.json())["tasks"]]
        for task_id in ids:
            for _ in range(400):
                async with http.get(f"{url}/v1/tasks/{task_id}") as resp:
                    if (await resp.json())["task"]["state"] == "done":
                        break
                await asyncio.sleep(0.025)
        async with http.get(f"{url}/metrics") as resp:
            text = await resp.text()
    assert 'hetmesh_agent_tasks{state="done"} 2.0' in text
    checked = _promtool(text)
    assert checked.returncode == 0 and not checked.stdout + checked.stderr, checked


async def test_the_hubs_metrics_pass_promtool(
    aiohttp_client: Any, hub_config: Callable[..., HubConfig]
) -> None:
    config = hub_config()
    hub = await aiohttp_client(make_app(config))
    async with aiohttp.ClientSession() as session:
        agent = HubClient(str(hub.make_url("")).rstrip("/"), "a1", session)
        await agent.enrol(config.join_token)
        await agent.heartbeat({"status": "ok"})
        record = {"seq": 1, "kind": "task", "created_at": 1.0, "payload": {"state": "done"}}
        await agent.sync([record])
    text = await (await hub.get("/metrics")).text()
    assert "hetmesh_hub_heartbeats_total 1.0" in text
    checked = _promtool(text)
    assert checked.returncode == 0 and not checked.stdout + checked.stderr, checked
