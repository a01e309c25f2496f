"""Polling helpers of the tests: wait for a condition, read JSON, wait for a task or a peer;
conftest's ``until``, ``get_json``, ``final_task`` and ``peer_online`` fixtures."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

import aiohttp


async def until(check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as resp:
        assert resp.status == 200, f"GET {url}: {resp.status} {await resp.text()}"
        return await resp.json()


async def final_task(
    session: aiohttp.ClientSession, base: str, task_id: str, timeout: float = 20.0
) -> dict[str, Any]:
    async def final() -> dict[str, Any] | None:
        task: dict[str, Any] = (await get_json(session, f"{base}/v1/tasks/{task_id}"))["task"]
        return task if task["state"] in ("done", "failed") else None

    found: dict[str, Any] = await until(final, timeout)
    return found


async def peer_online(
    session: aiohttp.ClientSession, base: str, peer_id: str, timeout: float = 20.0
) -> None:
    async def online() -> bool:
        rows = (await get_json(session, f"{base}/v1/peers"))["peers"]
        return any(r["agent_id"] == peer_id and r["state"] == "online" for r in rows)

    await until(online, timeout)
