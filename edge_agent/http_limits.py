"""Server limits for every hetmesh HTTP service: connections, request heads, request bodies.

aiohttp bounds neither the time a client may take to send its request head nor how many
connections it holds, so one ``ConnectionGuard`` per service does, around aiohttp's own
protocol (``GuardedSite``):

* at most ``max_connections`` open; when full, the oldest connection that is not inside a
  request (a slow or idle head) is closed to make room, and only when every connection is
  busy is the newcomer answered 503;
* a request head must be complete ``header_timeout_s`` after the connection opened (or after
  the first byte of a following request arrived), else the connection is closed (an idle
  keep-alive connection closes after ``KEEPALIVE_S``, aiohttp's ``keepalive_timeout``);
* ``middleware`` reads each request body before the handler, within ``body_timeout_s``
  (408), counting the bytes as they arrive against the body cap in force (413): the
  service's, or a sub-application's ``BODY_CAP`` (chunked bodies included).

Every cut is counted (``hetmesh_http_limited_total{reason}``) beside the open connections.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import resource
import ssl
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edge_agent.http_errors import Handler, error_response
from edge_agent.http_express import Express, ExpressLane

_log = logging.getLogger(__name__)

#: The body cap of an application (a sub-application's overrides its parent's).
BODY_CAP = web.AppKey("body_cap", int)
#: Seconds an idle keep-alive connection stays open between requests.
KEEPALIVE_S = 75.0
#: Seconds aiohttp keeps reading (and dropping) a body its handler did not read.
LINGER_S = 2.0
#: Descriptors kept free beside client connections (database, mDNS, outgoing requests).
RESERVED_FDS = 256
#: Why a connection or request was cut, as counted on /metrics.
REASONS = ("over_capacity", "evicted", "header_timeout", "body_timeout", "body_too_large")

_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\n"
_LATE = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"


def _raw_error(head: bytes, status: int, message: str) -> bytes:
    """Return a whole HTTP answer in the JSON error shape, for a connection aiohttp never saw."""
    body = json.dumps({"ok": False, "error": message, "status": status}).encode()
    return head + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body


@dataclass(frozen=True)
class ServerLimits:
    """One service's limits (its config's ``[api]`` settings)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = 4096

    @classmethod
    def of(cls, config: Any) -> ServerLimits:
        """Return the limits a service config (agent or hub) sets in its ``[api]`` table."""
        return cls(config.header_timeout_s, config.body_timeout_s, config.max_connections)


#: The end of an HTTP/1 request head.
_HEAD_END = b"\r\n\r\n"


class _Conn:
    __slots__ = ("busy", "head_done", "tail", "timer", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.busy = False  # inside a request (head complete, handler not returned)
        self.head_done = False  # the head's end arrived; the handler may not have started yet
        self.tail = b""  # the last bytes of the head so far (its end may span two reads)
        self.timer: asyncio.TimerHandle | None = None


class ConnectionGuard(Collector):
    """Tracks one service's connections and cuts them at its limits; a metrics collector."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.counts: Counter[str] = Counter()
        self._conns: dict[asyncio.Transport, _Conn] = {}  # insertion order: oldest first
        #: Routes answered ahead of aiohttp (``http_express``); None: every request is aiohttp's.
        self.express: Express | None = None

    def count(self, reason: str) -> None:
        """Count one connection or request cut for ``reason`` (one of REASONS)."""
        self.counts[reason] += 1

    def protocol_factory(self, inner: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        """Return a protocol factory that tracks each connection of ``inner``'s protocols."""
        return lambda: _Tracked(self, inner())

    # --- connection events (from _Tracked) ------------------------------------------------
    def opened(self, transport: asyncio.Transport) -> bool:
        """Admit a new connection (evicting an idle one when full); False: refused."""
        if len(self._conns) >= self.limits.max_connections and not self._evict():
            self.count("over_capacity")
            transport.write(_raw_error(_BUSY, 503, "too many connections; retry shortly"))
            transport.close()
            return False
        conn = self._conns[transport] = _Conn(transport)
        self._arm(conn)
        return True

    def received(self, transport: asyncio.Transport, data: bytes) -> None:
        """Note bytes arriving: the first byte of a head on an idle connection starts its clock,
        and the head's end stops it (a loaded loop may start the handler much later)."""
        conn = self._conns.get(transport)
        if conn is None or conn.busy or conn.head_done:
            return
        seen = conn.tail + data
        if _HEAD_END in seen:
            conn.head_done, conn.tail = True, b""
            if conn.timer is not None:
                conn.timer.cancel()
                conn.timer = None
            return
        conn.tail = seen[-(len(_HEAD_END) - 1) :]
        if conn.timer is None:
            self._arm(conn)

    def closed(self, transport: asyncio.Transport) -> None:
        """Forget a connection that went away."""
        conn = self._conns.pop(transport, None)
        if conn is not None and conn.timer is not None:
            conn.timer.cancel()

    def _evict(self) -> bool:
        for conn in self._conns.values():
            if not conn.busy:
                self.count("evicted")
                self.closed(conn.transport)
                conn.transport.abort()
                return True
        return False

    def _arm(self, conn: _Conn) -> None:
        loop = asyncio.get_running_loop()
        conn.timer = loop.call_later(self.limits.header_timeout_s, self._head_late, conn)

    def _head_late(self, conn: _Conn) -> None:
        conn.timer = None
        if conn.busy or conn.transport.is_closing():
            return
        self.count("header_timeout")
        if conn.transport.get_write_buffer_size() == 0:  # no answer half-sent: say why
            message = f"request head not received within {self.limits.header_timeout_s:g} s"
            conn.transport.write(_raw_error(_LATE, 408, message))
        self.closed(conn.transport)
        conn.transport.close()

    # --- requests (from the middleware) -------------------------------------------------
    def _request(self, transport: asyncio.Transport | None, busy: bool) -> None:
        conn = self._conns.get(transport) if transport is not None else None
        if conn is None:
            return
        conn.busy = busy
        conn.head_done, conn.tail = False, b""  # the next bytes after this request: a new head
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None

    def _finished(self, request: web.Request, transport: asyncio.Transport | None) -> None:
        """The request is over once its body has all arrived: a handler may answer before
        reading it (a proxy whose upstream is down), and the rest is no new request's head."""
        request.content.on_eof(lambda: self._request(transport, busy=False))

    @property
    def middleware(self) -> Middleware:
        """Return the middleware marking requests busy and reading bodies within the limits.

        Place it first (outermost): the handlers get a copy of the request with its body
        read (``Request.clone``), so request state set inside is not seen by middleware
        outside it. Its 408/413 answers are in the JSON error shape and close the connection.
        """

        @web.middleware
        async def limits(request: web.Request, handler: Handler) -> web.StreamResponse:
            transport = request.transport
            self._request(transport, busy=True)
            try:
                if request.body_exists:
                    request, refused = await self._read_body(request)
                    if refused is not None:
                        return refused
                return await handler(request)
            finally:
                self._finished(request, transport)

        return limits

    @property
    def streaming_middleware(self) -> Middleware:
        """Return the middleware marking requests busy, for a handler that streams the body.

        The head's clock stops once the request reaches the application, as with
        ``middleware``, but the body is left unread: the handler (a proxy) passes it on as it
        arrives and bounds its size and time itself. Without it a request still in flight
        when the head's clock runs out would be cut with a 408.
        """

        @web.middleware
        async def busy(request: web.Request, handler: Handler) -> web.StreamResponse:
            transport = request.transport
            self._request(transport, busy=True)
            try:
                return await handler(request)
            finally:
                self._finished(request, transport)

        return busy

    async def _read_body(self, request: web.Request) -> tuple[web.Request, web.Response | None]:
        """Return ``request`` with its body read (handlers' ``read()`` answers from memory),
        or an error answer when the body breaks the cap or arrives too slowly."""
        # the innermost application's cap (config_dict sees only those up to the current one)
        caps = [app[BODY_CAP] for app in request.match_info.apps if BODY_CAP in app]
        cap = caps[-1] if caps else None
        if cap is not None:
            declared = request.content_length
            if declared is not None and declared > cap:
                return request, self._refuse(413, f"{declared} bytes, ", cap)
            request = request.clone(client_max_size=cap)  # counted as the bytes arrive
        try:
            if request.content.is_eof():  # all of it came with the head: no clock to run
                await request.read()
            else:
                async with asyncio.timeout(self.limits.body_timeout_s):
                    await request.read()
        except web.HTTPRequestEntityTooLarge:
            return request, self._refuse(413, "", cap or 0)
        except TimeoutError:
            message = f"request body not received within {self.limits.body_timeout_s:g} s"
            return request, self._refuse(408, message)
        return request, None

    def _refuse(self, status: int, message: str, cap: int = 0) -> web.Response:
        if status == 413:
            self.count("body_too_large")
            message = f"request body too large: {message}over the limit of {cap} bytes"
        else:
            self.count("body_timeout")
        resp = error_response(status, message)
        resp.force_close()
        return resp

    # --- metrics --------------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        """Yield open connections and cuts by reason (for a prometheus registry)."""
        gauge = GaugeMetricFamily("hetmesh_http_connections", "Open client connections")
        gauge.add_metric([], float(len(self._conns)))
        cuts = CounterMetricFamily(
            "hetmesh_http_limited",
            "Connections or requests cut by a server limit: " + ", ".join(REASONS),
            labels=["reason"],
        )
        for reason in REASONS:
            cuts.add_metric([reason], float(self.counts[reason]))
        yield gauge
        yield cuts
        if self.express is not None:
            yield CounterMetricFamily(
                "hetmesh_http_express_answered",
                "Requests answered in the express lane, ahead of aiohttp (http_express)",
                value=float(self.express.served),
            )
            yield CounterMetricFamily(
                "hetmesh_http_express_handed",
                "Connections the express lane handed to aiohttp (a request not plain)",
                value=float(self.express.handed),
            )

    def fit_descriptors(self) -> None:
        """Raise this process's open-file limit to hold ``max_connections`` (up to the hard
        limit); if it cannot, lower ``max_connections`` to fit and say how to raise it."""
        want = self.limits.max_connections + RESERVED_FDS
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            top = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, top), hard))
            soft = max(soft, top)
        if soft != resource.RLIM_INFINITY and soft < want:
            fits = max(1, soft - RESERVED_FDS)
            _log.warning(
                "open-file limit %s holds %s connections, not max_connections = %s; "
                "raise it (systemd: LimitNOFILE=65536)",
                soft,
                fits,
                self.limits.max_connections,
            )
            self.limits = dataclasses.replace(self.limits, max_connections=fits)


class _Tracked(asyncio.Protocol):
    """aiohttp's protocol for one connection, with the guard told of its events.

    With an express lane (``ConnectionGuard.express``) the lane reads the connection first
    and aiohttp's protocol is connected only when the lane hands the connection over, so
    that aiohttp's timers (its keep-alive close) never run on a connection it does not read.
    """

    __slots__ = ("_guard", "_inner", "_lane", "_transport")

    def __init__(self, guard: ConnectionGuard, inner: Any) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.Transport | None = None  # None: refused
        self._lane: ExpressLane | None = None  # None: aiohttp's connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport
        if self._guard.opened(transport):
            self._transport = transport
            express = self._guard.express
            if express is None:
                self._inner.connection_made(transport)
            else:
                self._lane = ExpressLane(express, transport, self._handover, self._busy)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._guard.received(self._transport, data)
            if self._lane is not None:
                self._lane.feed(data)
            else:
                self._inner.data_received(data)

    def _handover(self, data: bytes) -> None:
        """The lane gives the connection to aiohttp from ``data`` on."""
        self._lane = None
        self._inner.connection_made(self._transport)
        self._inner.data_received(data)

    def _busy(self, busy: bool) -> None:
        self._guard._request(self._transport, busy)

    def eof_received(self) -> bool | None:
        if self._transport is None or self._lane is not None:
            return None  # the transport closes (aiohttp's own answer to an EOF)
        return self._inner.eof_received()  # type: ignore[no-any-return]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._guard.closed(self._transport)
            if self._lane is not None:
                self._lane.lost()
            else:
                self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._transport is not None and self._lane is None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._transport is not None and self._lane is None:
            self._inner.resume_writing()


def app_runner(app: web.Application, **kwargs: Any) -> web.AppRunner:
    """Return an AppRunner for a guarded service: bounded keep-alive and lingering."""
    return web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        keepalive_timeout=KEEPALIVE_S,
        lingering_time=LINGER_S,
        **kwargs,
    )


class GuardedSite(web.BaseSite):
    """A TCP site whose connections pass through a ConnectionGuard."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        backlog: int = 2048,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, backlog=backlog, ssl_context=ssl_context)
        self._host, self._port, self._guard = host, port, guard

    @property
    def name(self) -> str:
        """Return the site's URL."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{host}:{self._port}"

    async def stop(self) -> None:
        """Stop listening; then let the express lane answer the requests it holds before
        aiohttp closes the connections (``AppRunner.cleanup`` stops its sites first)."""
        await super().stop()
        if self._guard.express is not None:
            await self._guard.express.close()

    async def start(self) -> None:
        """Listen; every connection is admitted by the guard first."""
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
            ssl=self._ssl_context,  # the guard sees the decrypted stream (its heads and bodies)
        )


#: The guard of a service's application (its server listens through ``GuardedSite``).
GUARD = web.AppKey("connection_guard", ConnectionGuard)
