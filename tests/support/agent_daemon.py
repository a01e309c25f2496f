"""A real agent daemon (`edge-agent run`'s ``daemon.serve``) served for a test; conftest's
``agent_daemon`` fixture."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

from edge_agent.agent.config import AgentConfig


@contextlib.asynccontextmanager
async def serve_agent(config: AgentConfig) -> AsyncIterator[str]:
    """Run ``daemon.serve`` (what `edge-agent run` runs) for ``config``; yield its base URL."""
    from edge_agent.agent import daemon

    stop = asyncio.Event()
    task = asyncio.create_task(daemon.serve(config, stop))
    try:
        deadline = time.monotonic() + 20
        while not config.state_path.exists():
            if task.done():
                task.result()  # raises what stopped it
            assert time.monotonic() < deadline, "agent did not start"
            await asyncio.sleep(0.02)
        port = json.loads(config.state_path.read_text())["port"]
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await task
