"""The mesh client: how an answer it cannot verify is taken."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from edge_agent.mesh.client import MeshClient
from edge_agent.mesh.credential import FleetKey
from edge_agent.mesh.errors import AuthError, PeerUnavailable

pytestmark = pytest.mark.asyncio
KEY = FleetKey("client-test-fleet-key-000000000")


async def answering(status: int) -> TestServer:
    """Return a started server answering every hello with ``status``, unsigned."""

    async def hello(request: web.Request) -> web.Response:
        return web.json_response({"ok": False, "error": "mesh not started yet"}, status=status)

    app = web.Application()
    app.router.add_post("/mesh/v1/hello", hello)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


async def call(server: TestServer) -> Any:
    async with aiohttp.ClientSession() as session:
        client = MeshClient(session, KEY, "me")
        assert server.port is not None
        return await client.call("peer", ("127.0.0.1", server.port), "hello", {}, 5.0)


async def test_an_unsigned_503_is_a_member_not_ready_never_a_forgery() -> None:
    server = await answering(503)
    try:
        with pytest.raises(PeerUnavailable, match="not ready"):
            await call(server)
    finally:
        await server.close()


@pytest.mark.parametrize("status", [200, 401, 500])
async def test_any_other_unsigned_answer_fails_verification(status: int) -> None:
    server = await answering(status)
    try:
        with pytest.raises(AuthError):
            await call(server)
    finally:
        await server.close()
