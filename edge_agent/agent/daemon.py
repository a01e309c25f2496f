"""``edge-agent run``: serve the API until SIGTERM or SIGINT, then stop gracefully.

Once listening, the agent writes ``<data_dir>/agent.json`` (pid, host, bound port) so that
local clients and tests find it even when it was started on port 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal

from aiohttp import web

from edge_agent import __version__
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.mesh.link import MESH
from edge_agent.agent.web.api import make_app
from edge_agent.http_limits import GUARD, GuardedSite, app_runner

_log = logging.getLogger(__name__)

#: Pending connections the kernel holds for us (a burst of clients must not see SYN drops).
LISTEN_BACKLOG = 2048
#: The collector's thresholds once started (Python's: 700, 10, 10). A batch of 1,000 tasks
#: makes tens of thousands of objects that live until the tasks have run; with Python's
#: thresholds the collector paused the agent for about a tenth of a batch's time to its last
#: ``placed_at``, mostly re-scanning survivors (docs/performance.md, "Eighth round").
GC_THRESHOLDS = (50_000, 20, 100)


async def serve(config: AgentConfig, stop: asyncio.Event | None = None) -> None:
    """Run the agent until ``stop`` is set or SIGTERM/SIGINT arrives."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    app = make_app(config)
    mesh = app.get(MESH)  # None: no fleet key, no mesh
    app[GUARD].fit_descriptors()  # room for max_connections under the open-file limit
    runner = app_runner(app)
    await runner.setup()
    try:
        site = GuardedSite(runner, config.host, config.port, app[GUARD], LISTEN_BACKLOG)
        await site.start()
        port = _bound_port(runner, config.port)
        if mesh is not None:  # advertised with the bound port, so only once listening
            await mesh.start(port)
        await asyncio.to_thread(_write_state, config, port)
        _log.info(
            "hetmesh agent %s listening on %s:%s (data in %s)",
            __version__,
            config.host,
            port,
            config.data_dir,
        )
        await stop.wait()
        _log.warning("stopping: finishing running tasks (up to %ss)", config.shutdown_grace_s)
    finally:
        with contextlib.suppress(OSError):
            config.state_path.unlink()
        if mesh is not None:  # say goodbye and settle forwarded work before the store closes
            await mesh.stop()
        await runner.cleanup()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _bound_port(runner: web.AppRunner, wanted: int) -> int:
    """Return the port the site listens on (the one the OS chose when ``wanted`` is 0)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return wanted


def _write_state(config: AgentConfig, port: int) -> None:
    """Record pid and address atomically in ``agent.json``."""
    doc = {"pid": os.getpid(), "host": config.host, "port": port, "version": __version__}
    tmp = config.state_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, config.state_path)


def settle_gc() -> None:
    """Collect once, freeze what start-up built out of the collector's scans (the imports
    and module state live as long as the process), and collect young objects less often
    (``GC_THRESHOLDS``)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(config: AgentConfig) -> int:
    """Run the daemon in a fresh event loop; 0 after a graceful stop."""
    settle_gc()
    try:
        import uvloop  # optional: a faster event loop where installed
    except ImportError:
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
    return 0
