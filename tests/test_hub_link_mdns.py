"""The agent finds its hub over mDNS on loopback and refuses a relay that cannot prove the
join token; hub and agent are the real aiohttp applications with real SQLite files."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from cloud_hub.hub.api import make_app as hub_app
from cloud_hub.hub.config import HubConfig
from edge_agent.agent.hub.link import CREDENTIAL_FILE
from edge_agent.agent.web.api import AGENT
from tests.support.hub_link import (
    QUICK_HUB,
    AgentServer,
    Reads,
    Server,
    Until,
    outcomes,
    submit,
)

pytestmark = pytest.mark.asyncio


async def test_agent_finds_the_hub_over_mdns_and_refuses_one_that_cannot_prove_the_token(
    tmp_path: Path,
    until: Until,
    reads: Reads,
    agent_server: AgentServer,
    hub_config: Callable[..., HubConfig],
) -> None:
    """A relay announcing ``_hetmesh-hub._tcp`` gets no join token; the real hub is used."""
    from zeroconf.asyncio import AsyncServiceInfo

    from cloud_hub.hub.server import serve
    from edge_agent.agent.hub.finder import open_zeroconf
    from edge_agent.protocol.hub_discovery import HUB_SERVICE_TYPE, hub_txt

    # phase 1: the real hub runs unannounced; a fake announces itself under the real hub's id
    # and passes every proof question on to the real hub: it never holds the token, and the
    # real hub's answer names the address it was asked on, which is not the fake's
    real = hub_config(hub_id="hub-real", **QUICK_HUB)
    quiet = Server(lambda: hub_app(real))
    await quiet.start()
    asked: list[str] = []

    async def relay(request: web.Request) -> web.Response:
        asked.append(request.path)
        body = await request.read()
        async with aiohttp.ClientSession() as s, s.post(quiet.url + request.path, data=body) as r:
            return web.json_response(await r.json(), status=r.status)

    def fake_app() -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", relay)
        return app

    fake = Server(fake_app)
    await fake.start()
    fake_zc = open_zeroconf(["127.0.0.1"])
    await fake_zc.async_register_service(
        AsyncServiceInfo(
            HUB_SERVICE_TYPE,
            f"hub-fake.{HUB_SERVICE_TYPE}",
            addresses=[socket.inet_aton("127.0.0.1")],
            port=fake.port,
            properties=hub_txt("hub-real", "0.1.0", fake.port, "http"),  # claims the real id
            server="hub-fake.local.",
        ),
        cooperating_responders=True,
    )
    agent = agent_server("mdns", hub_mdns_interfaces=("127.0.0.1",))
    app = await agent.start()
    stop = asyncio.Event()
    served: asyncio.Task[None] | None = None
    try:
        async with aiohttp.ClientSession() as s:
            link = app[AGENT].link
            assert link is not None
            await until(lambda: link.status()["discovery"]["refused"] >= 1)
            status = link.status()
            assert "a relay, not the hub" in status["discovery"]["last_refused"]
            assert asked == ["/v1/hub/proof"] and not status["enrolled"]
            assert status["heartbeats"] == 0 and not status["connected"]
            ids = await submit(s, agent, 3)  # work goes on while no hub is trusted
            await until(lambda: reads.all_done(s, agent, ids))
            assert await reads.hub_agent(s, quiet) is None
            await quiet.stop()

            # phase 2: the real hub announces itself; the agent proves it, enrols, heartbeats
            served = asyncio.create_task(serve(real.replace(advertise=True), stop))
            state = await until(lambda: _state(real.state_path))
            hub = Server(web.Application, int(state["port"]))  # for its url only
            row = await until(lambda: reads.heard(s, hub))
            status = link.status()
            assert status["url"] == hub.url and status["discovery"]["hub_id"] == "hub-real"
            assert row["labels"]["mode"] == "emulated board"
            await until(lambda: len(outcomes(tmp_path)) == 3)
            assert all(p == "/v1/hub/proof" for p in asked)  # the fake never got the token
            cred = json.loads((tmp_path / "a1" / CREDENTIAL_FILE).read_text())
            assert cred["url"] == "mdns" and cred["hub_id"] == "hub-real"
    finally:
        await agent.stop()
        stop.set()
        if served is not None:
            await served
        await fake_zc.async_close()
        await fake.stop()
        if quiet.runner is not None:
            await quiet.stop()


def _state(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
