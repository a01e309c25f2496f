"""The only door from the LAN into the SuperLink: its Fleet API, and nothing else.

Flower 1.42 serves the Fleet, Control and ServerAppIo (runtime) APIs on one HTTP port, and
the Control API has no authentication: whoever reaches it can register SuperNode keys and
start runs, that is, run a ServerApp on the hub. So the SuperLink listens on 127.0.0.1 only
(the hub's own `flwr` CLI and SuperExec use it there) and this gateway, on the address agents
reach, passes on ``POST /v1/fleet/<call>`` for the calls a SuperNode makes. Anything else is
answered 404 here and never reaches the SuperLink. Both sides speak TLS with the federation's
certificate; SuperNode authentication (signed headers) passes through unchanged and is checked
by the SuperLink.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from edge_agent.http_limits import ConnectionGuard, GuardedSite, ServerLimits, app_runner

if TYPE_CHECKING:
    from cloud_hub.learning.pki import TlsFiles

log = logging.getLogger(__name__)

#: The Fleet API calls (flwr.supernode.fleet_http_client); the only paths passed on.
FLEET_CALLS = frozenset(
    {
        "register-node",  # refused by the SuperLink itself under --enable-supernode-auth
        "activate-node",
        "deactivate-node",
        "unregister-node",
        "send-node-heartbeat",
        "pull-messages",
        "push-messages",
        "get-run",
        "get-fab",
        "push-object",
        "pull-object",
        "confirm-message-received",
    }
)
#: Headers that belong to one connection, not to the request or reply passed on.
HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "transfer-encoding", "upgrade", "host",
    }
)  # fmt: skip
#: How long one Fleet call may take upstream (object transfers of a large model included).
UPSTREAM_TIMEOUT_S = 300.0
CHUNK = 64 * 1024
#: The largest Fleet request body passed on (the predictor's messages are kilobytes).
MAX_BODY = 64 * 1024 * 1024


def _passed_on(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The end-to-end headers of a request or reply."""
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP)


async def _capped(request: web.Request) -> AsyncIterator[bytes]:
    """The request body as read, refused past MAX_BODY bytes (a chunked body has no length)."""
    read = 0
    async for chunk in request.content.iter_chunked(CHUNK):
        read += len(chunk)
        if read > MAX_BODY:
            raise web.HTTPRequestEntityTooLarge(MAX_BODY, read)
        yield chunk


class FleetGateway:
    """A TLS listener on ``host:port`` that forwards Fleet API calls to the loopback SuperLink."""

    def __init__(
        self,
        host: str,
        port: int,
        upstream_port: int,
        tls: TlsFiles,
        limits: ServerLimits | None = None,
    ) -> None:
        """Describe the gateway; nothing listens until start().

        ``limits``: its connection cap and header timeout (it faces the LAN like the hub's
        API does); the defaults of ``ServerLimits`` when not given.
        """
        self.host, self.port = host, port
        self.guard = ConnectionGuard(limits or ServerLimits())
        self.upstream = f"https://127.0.0.1:{upstream_port}"
        self.tls = tls
        self.refused = 0  # requests for anything but a Fleet call (e.g. the Control API)
        self.forwarded = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def address(self) -> str:
        """host:port agents' SuperNodes are told to connect to."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen on host:port (TLS) and open the upstream connection pool."""
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ctx.load_cert_chain(self.tls.server_cert, self.tls.server_key)
        client_ctx = ssl.create_default_context(cafile=str(self.tls.ca_cert))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client_ctx),
            timeout=aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT_S),
            auto_decompress=False,
        )
        # the body streams upstream as it arrives (capped by _capped, timed by the upstream
        # timeout); the guard only needs to know a request is being served
        app = web.Application(client_max_size=0, middlewares=[self.guard.streaming_middleware])
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = app_runner(app)
        await self._runner.setup()
        site = GuardedSite(self._runner, self.host, self.port, self.guard, ssl_context=server_ctx)
        try:
            await site.start()
        except OSError:
            await self.stop()
            raise
        log.info("Fleet API gateway on %s -> %s", self.address, self.upstream)

    async def stop(self) -> None:
        """Stop listening and close the upstream pool."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        prefix, _, call = request.path.partition("/v1/fleet/")
        if request.method != "POST" or prefix or call not in FLEET_CALLS:
            self.refused += 1
            log.warning(
                "learning port: refused %s %s from %s (only the Fleet API is served here)",
                request.method, request.path[:200], request.remote,
            )  # fmt: skip
            raise web.HTTPNotFound(
                text="only the Flower Fleet API is served on the hub's learning port\n"
            )
        assert self._session is not None
        if (request.content_length or 0) > MAX_BODY:
            raise web.HTTPRequestEntityTooLarge(MAX_BODY, request.content_length or 0)
        reply: web.StreamResponse | None = None
        try:
            async with self._session.post(
                self.upstream + request.path,
                data=_capped(request),
                headers=_passed_on(request.headers),
            ) as upstream:
                reply = web.StreamResponse(
                    status=upstream.status, headers=_passed_on(upstream.headers)
                )
                await reply.prepare(request)
                async for chunk in upstream.content.iter_chunked(CHUNK):
                    await reply.write(chunk)
                await reply.write_eof()
        except (aiohttp.ClientError, TimeoutError) as err:
            if isinstance(err.__cause__, web.HTTPRequestEntityTooLarge):  # from _capped
                raise err.__cause__ from None
            log.warning("learning port: SuperLink unreachable for %s: %s", request.path, err)
            if reply is not None:  # the reply had begun: the SuperNode sees a cut connection
                raise
            raise web.HTTPBadGateway(text=f"SuperLink unreachable: {err}\n") from None
        self.forwarded += 1
        return reply
