"""The attack tests' recorder keeps each request's own body when requests overlap.

Regression: the recorder appended every body chunk to the request started last, so a
hello captured while a heartbeat to another member was in flight carried the wrong body;
replayed, it failed its signature (``auth_rejected_bad_signature``) instead of being
refused as signed for another member, and ``test_mesh_recipient`` failed under load.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.http_capture import Recorder

pytestmark = pytest.mark.asyncio


async def test_overlapping_requests_are_each_recorded_with_their_own_body() -> None:
    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app = web.Application()
    app.router.add_post("/{name}", echo)
    recorder = Recorder()
    async with TestServer(app, host="127.0.0.1") as server, recorder.session as http:

        async def post(name: str) -> bytes:
            body = f"body of {name}".encode() * 50
            async with http.post(server.make_url(f"/{name}"), data=body) as resp:
                assert await resp.read() == body
            return body

        names = [f"r{i}" for i in range(8)]
        bodies = await asyncio.gather(*(post(n) for n in names))
    for name, body in zip(names, bodies, strict=True):
        assert recorder.last(f"/{name}")[2] == body, name
