"""``cloud-hub run``: serve the hub until SIGTERM or SIGINT; record its address in hub.json."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal

from cloud_hub.hub.advertise import HubAdvertiser
from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.request_auth import HUB
from edge_agent.http_limits import GUARD, GuardedSite, app_runner

_log = logging.getLogger(__name__)

#: The hub process's cyclic-GC thresholds (Python's are 700, 10, 10). A hub holding thousands
#: of agents' connections and nonce caches spent 0.4-3 s in each full collection, which
#: found nothing to free, and 10-30 ms in young ones (8,000 agents; docs/performance.md,
#: "Hub heartbeats"): fewer, larger young collections, and full ones far more rarely.
GC_THRESHOLDS = (50_000, 20, 100)


async def serve(config: HubConfig, stop: asyncio.Event | None = None) -> None:
    """Run the hub until ``stop`` is set or SIGTERM/SIGINT arrives."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    app = make_app(config)
    app[GUARD].fit_descriptors()  # room for max_connections under the open-file limit
    runner = app_runner(app, shutdown_timeout=2.0)
    await runner.setup()
    advertiser: HubAdvertiser | None = None
    try:
        site = GuardedSite(runner, config.host, config.port, app[GUARD])
        await site.start()
        port = next((int(a[1]) for a in runner.addresses if isinstance(a, tuple)), config.port)
        if config.advertise:
            advertiser = HubAdvertiser(app[HUB].hub_id, config.announced_address, port)
            await advertiser.start()
        await asyncio.to_thread(_write_state, config, port)
        _log.info(
            "hetmesh hub listening on http://%s:%s/ (dashboard); join token in %s",
            config.host,
            port,
            config.secrets_path if not config.join_token else "the configuration",
        )
        await stop.wait()
    finally:
        if advertiser is not None:
            await advertiser.stop()
        with contextlib.suppress(OSError):
            config.state_path.unlink()
        await runner.cleanup()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _write_state(config: HubConfig, port: int) -> None:
    doc = {"pid": os.getpid(), "host": config.host, "port": port}
    tmp = config.state_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, config.state_path)


def run(config: HubConfig) -> int:
    """Run the hub in a fresh event loop (uvloop where installed, as the agent); 0 after a
    graceful stop."""
    gc.collect()
    gc.freeze()  # what the imports and the config built lives as long as the process
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        import uvloop  # optional ('.[fast]'), as the agent
    except ImportError:
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
    return 0
