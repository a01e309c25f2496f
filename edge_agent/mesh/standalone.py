"""Run a MeshNode on its own HTTP server, with emulated execution (tests, benchmarks, netns)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from edge_agent.http_limits import ConnectionGuard, GuardedSite, ServerLimits, app_runner
from edge_agent.mesh.client import PREFIX
from edge_agent.mesh.config import MeshConfig
from edge_agent.mesh.credential import FleetKey
from edge_agent.mesh.node import MeshNode
from edge_agent.mesh.offload import RunPlaced
from edge_agent.placement import Decision, Placer, Policy, TaskContract, devices_from_profiles


async def emulated_run(
    contract: TaskContract, decision: Decision, payload: dict[str, Any], *, time_scale: float
) -> dict[str, Any]:
    """Emulate running: sleep the service time (scaled) or ``payload["emulate_s"][device]``."""
    hold = payload.get("emulate_s")
    hold = hold.get(decision.device_id) if isinstance(hold, dict) else None
    wall = float(hold) if isinstance(hold, (int, float)) else decision.service_s * time_scale
    await asyncio.sleep(wall)
    return {
        "emulated": True,
        "devices": list(decision.device_ids),
        "service_s": wall,
        "task_class": contract.task_class,
    }


def emulated_node(
    config: MeshConfig,
    key: FleetKey,
    profiles: list[str],
    ledger_path: Path,
    *,
    time_scale: float = 1.0,
    run_task: RunPlaced | None = None,
    policy: str = "latency-first",
    session: aiohttp.ClientSession | None = None,
) -> MeshNode:
    """Return a node whose devices are emulated boards from firmware profiles (its peer
    calls go through ``session`` if given)."""
    placer = Placer(devices_from_profiles(profiles), Policy.template(policy))
    run = run_task or functools.partial(emulated_run, time_scale=time_scale)
    return MeshNode(config, key, placer, run, ledger_path, session=session)


@asynccontextmanager
async def serve(node: MeshNode, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[int]:
    """Serve ``node``'s endpoints on ``host:port`` and start it; yield the bound port."""
    guard = ConnectionGuard(ServerLimits())
    guard.fit_descriptors()
    app = web.Application(middlewares=[guard.middleware])
    app.add_subapp(PREFIX, node.app())
    runner = app_runner(app)
    await runner.setup()
    try:
        site = GuardedSite(runner, host, port, guard)
        await site.start()
        bound = next(a[1] for a in runner.addresses if isinstance(a, tuple))
        await node.start(int(bound))
        try:
            yield int(bound)
        finally:
            await node.stop()
    finally:
        await runner.cleanup()
