"""Hub discovery benchmark: how long a fresh agent takes to its first heartbeat, by mDNS or URL.

    python benchmarks/bench_hub_discovery.py [--runs 5]

A real hub (``cloud_hub.hub.server.serve``, announcing ``_hetmesh-hub._tcp`` on 127.0.0.1)
and real edge agents (emulating an rk3588, fresh data directory each run) in this process.
For each run, one agent is given the hub's URL and one is told ``url = "mdns"``; each is
timed from the start of its application to the hub having heard its first heartbeat. The
mDNS agent also has the hub prove the join token first. A fake hub announces itself next to
the real one (relaying proof questions to it); the benchmark fails if an mDNS agent ever
uses it, and counts the runs where the agent heard the fake first and refused it.

- ``first_heartbeat_url_s`` / ``first_heartbeat_mdns_s``: medians over ``--runs``;
- ``discovery_overhead_s``: their difference (browse, resolve, proof);
- ``fake_hub_refused_runs``: runs in which it tried the fake first and refused it.

The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from zeroconf.asyncio import AsyncServiceInfo  # noqa: E402

from cloud_hub.hub.config import HubConfig  # noqa: E402
from cloud_hub.hub.server import serve  # noqa: E402
from edge_agent.agent.config import AgentConfig  # noqa: E402
from edge_agent.agent.hub.finder import open_zeroconf  # noqa: E402
from edge_agent.agent.web.api import AGENT  # noqa: E402
from edge_agent.agent.web.api import make_app as agent_app  # noqa: E402
from edge_agent.protocol.hub_discovery import HUB_SERVICE_TYPE, hub_txt  # noqa: E402

TOKEN = "bench-join"


async def start(app: web.Application) -> web.AppRunner:
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def heard(session: aiohttp.ClientSession, hub_url: str, agent_id: str) -> bool:
    async with session.get(f"{hub_url}/v1/agents") as resp:
        rows = (await resp.json())["agents"]
    return any(r["id"] == agent_id and r["heartbeats"] >= 1 for r in rows)


async def first_heartbeat(
    root: Path, hub_url: str, url: str, agent_id: str
) -> tuple[float, dict[str, Any]]:
    config = AgentConfig(
        data_dir=root / agent_id,
        port=0,
        profile="rk3588",
        shutdown_grace_s=0.0,
        telemetry_interval_s=0.0,
        hub_url=url,
        hub_join_token=TOKEN,
        hub_agent_id=agent_id,
        hub_retry_s=0.05,
        hub_mdns_interfaces=("127.0.0.1",),
    )
    app = agent_app(config)
    began = time.perf_counter()
    runner = await start(app)
    try:
        async with aiohttp.ClientSession() as s:
            while not await heard(s, hub_url, agent_id):
                if time.perf_counter() - began > 30:
                    raise TimeoutError(f"{agent_id}: no heartbeat within 30 s")
                await asyncio.sleep(0.01)
        link = app[AGENT].link
        assert link is not None
        return time.perf_counter() - began, link.status()
    finally:
        await runner.cleanup()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hub_config = HubConfig(
            data_dir=root / "hub",
            port=0,
            join_token=TOKEN,
            admin_token="bench-admin",
            hub_id="hub-bench",
            heartbeat_interval_s=0.2,
            advertise=True,
        )
        stop = asyncio.Event()
        served = asyncio.create_task(serve(hub_config, stop))
        while not hub_config.state_path.exists():
            await asyncio.sleep(0.02)
        port = json.loads(hub_config.state_path.read_text())["port"]
        hub_url = f"http://127.0.0.1:{port}"

        async def relay(request: web.Request) -> web.Response:
            body = await request.read()
            async with aiohttp.ClientSession() as s, s.post(hub_url + request.path, data=body) as r:
                return web.json_response(await r.json(), status=r.status)

        fake_app = web.Application()
        fake_app.router.add_route("*", "/{tail:.*}", relay)
        fake = await start(fake_app)
        fake_port = int(fake.addresses[0][1])
        zc = open_zeroconf(["127.0.0.1"])
        await zc.async_register_service(
            AsyncServiceInfo(
                HUB_SERVICE_TYPE,
                f"a-fake.{HUB_SERVICE_TYPE}",  # sorts first: tried before the real hub
                addresses=[socket.inet_aton("127.0.0.1")],
                port=fake_port,
                properties=hub_txt("hub-bench", "0.1.0", fake_port, "http"),
                server="a-fake.local.",
            ),
            cooperating_responders=True,
        )
        by_url, by_mdns, refused = [], [], 0
        try:
            for run in range(args.runs):
                took, _ = await first_heartbeat(root, hub_url, hub_url, f"url-{run}")
                by_url.append(took)
                took, status = await first_heartbeat(root, hub_url, "mdns", f"mdns-{run}")
                by_mdns.append(took)
                discovery = status["discovery"]
                assert status["url"] == hub_url and discovery["hub_id"] == "hub-bench"
                refused += discovery["refused"] >= 1
                print(
                    f"run {run}: url {by_url[-1]:.3f} s, mdns {took:.3f} s, "
                    f"refused {discovery['refused']}",
                    flush=True,
                )
        finally:
            await zc.async_close()
            await fake.cleanup()
            stop.set()
            await served
    url_s, mdns_s = statistics.median(by_url), statistics.median(by_mdns)
    return {
        "runs": args.runs,
        "first_heartbeat_url_s": round(url_s, 3),
        "first_heartbeat_mdns_s": round(mdns_s, 3),
        "first_heartbeat_url_n": len(by_url),  # the medians' sample counts
        "first_heartbeat_mdns_n": len(by_mdns),
        "discovery_overhead_s": round(mdns_s - url_s, 3),
        "fake_hub_refused_runs": refused,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    result = asyncio.run(main(parser.parse_args()))
    for key, value in result.items():
        print(f"{key}: {value}")
    print(json.dumps(result))
