"""The agent's hub link tests' pieces: hub and agent served on loopback, task submission,
reads of the hub's and agent's views, and the hub's stored records."""

from __future__ import annotations

import json
import socket
import sqlite3
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

TASK = {"semantics": {"gflops": 0.01}, "requirements": {"kinds": ["cpu"]}}
#: The conftest fixtures ``until`` and ``get_json``.
Until = Callable[..., Awaitable[Any]]
GetJson = Callable[[aiohttp.ClientSession, str], Awaitable[Any]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One aiohttp application served on 127.0.0.1; stop and start again on the same port."""

    def __init__(self, make: Callable[[], web.Application], port: int = 0) -> None:
        self.make, self.port = make, port
        self.runner: web.AppRunner | None = None

    async def start(self) -> web.Application:
        app = self.make()
        self.runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=0.5
        )
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = int(self.runner.addresses[0][1])
        return app

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()
        self.runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


#: The conftest fixtures ``hub_server`` and ``agent_server``.
HubServer = Callable[[int], Server]
AgentServer = Callable[..., Server]
#: Hub settings of these tests: agents are told a 0.1 s heartbeat interval.
QUICK_HUB = {"heartbeat_interval_s": 0.1, "push_interval_s": 0.05}


async def submit(session: aiohttp.ClientSession, agent: Server, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        async with session.post(f"{agent.url}/v1/tasks", json=TASK) as resp:
            assert resp.status == 202, await resp.text()
            ids.append((await resp.json())["task"]["id"])
    return ids


@dataclass
class Reads:
    """What the tests read from the hub and the agent over HTTP (GETs that must answer 200)."""

    get: GetJson

    async def all_done(self, s: aiohttp.ClientSession, agent: Server, ids: list[str]) -> bool:
        tasks = (await self.get(s, f"{agent.url}/v1/tasks?limit=1000"))["tasks"]
        states = {t["id"]: t["state"] for t in tasks}
        return all(states.get(i) == "done" for i in ids)

    async def hub_agent(self, s: aiohttp.ClientSession, hub: Server, agent_id: str = "a1") -> Any:
        """The hub's row for the agent (None while the hub does not know it)."""
        rows = (await self.get(s, f"{hub.url}/v1/agents"))["agents"]
        return next((r for r in rows if r["id"] == agent_id), None)

    async def heard(self, s: aiohttp.ClientSession, hub: Server) -> Any:
        """The agent's row once the hub has had two heartbeats from it and shows it online."""
        row = await self.hub_agent(s, hub)
        return row if row and row["heartbeats"] >= 2 and row["state"] == "online" else None

    async def acknowledged(self, s: aiohttp.ClientSession, hub: Server, label: str) -> Any:
        """The agent's row once it reports running the policy ``label``."""
        row = await self.hub_agent(s, hub)
        return row if row and row["policy"] == label else None


def hub_records(tmp_path: Path, agent_id: str = "a1") -> list[tuple[int, str, dict[str, Any]]]:
    conn = sqlite3.connect(tmp_path / "hub" / "hub.db")
    try:
        rows = conn.execute(
            "SELECT seq, kind, payload FROM records WHERE agent_id = ? ORDER BY seq", (agent_id,)
        ).fetchall()
        return [(int(s), str(k), json.loads(p)) for s, k, p in rows]
    finally:
        conn.close()


def outcomes(tmp_path: Path) -> Counter[str]:
    """Return how many ``done`` task records the hub holds per task id."""
    return Counter(p["id"] for _, k, p in hub_records(tmp_path) if k == "task")
