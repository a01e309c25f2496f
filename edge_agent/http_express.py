"""An express lane for one plain request shape, ahead of aiohttp on the same connections.

aiohttp spends about 150 µs of CPU on every request around its handler (its request and
response objects, routing, the middlewares, the headers), more than everything else a tiny
task submission costs; a bare aiohttp server on uvloop that does nothing tops out below
2,000 requests/s on the 2-core development box (``docs/performance.md``). A route
registered here (``Express.route``) is read first by the connection's ``ExpressLane``. A
request goes to the route's handler only when it is exactly the plain case:

* the registered request line, ``HTTP/1.1``, head and body together within ``HEAD_MAX`` +
  the body cap, the whole body already received with the head;
* a ``Content-Length`` and no ``Transfer-Encoding``, ``Expect``, ``Upgrade`` or
  ``Content-Encoding``, ``Connection`` absent or ``keep-alive``, no header given twice,
  header names that are tokens and values that are printable UTF-8.

Everything else, and every request the handler declines (it returns None, having stored
nothing), is handed to aiohttp byte for byte together with whatever follows it on that
connection; from then on the connection is aiohttp's, which answers exactly as it always did
(401, 400, 413, 404, 408, the JSON error shape). One request at a time per connection, in
order: bytes that arrive while a request is handled wait for its answer. The connection
guard (``http_limits``) still sees every byte first (head clock, eviction of idle
connections, the connection cap); an idle keep-alive connection closes after
``keepalive_s``, as aiohttp's do.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import re
import socket
import time
from asyncio import CancelledError
from collections.abc import Callable
from email.utils import formatdate
from functools import partial
from typing import Literal

from aiohttp.http import SERVER_SOFTWARE

_log = logging.getLogger(__name__)

#: Request headers (names lower-case) as the lane hands them to a route.
Headers = dict[str, str]
#: A route: the request's headers, body and teller -> the whole HTTP answer,
#: or None: "aiohttp's"; at once, as a future that resolves to it (no task per request: the
#: lane answers from the future's callback), or ``LATER``: the route calls the teller with
#: the answer (or the error the lane answers 500 for) from a later loop callback, once.
Answer = bytes | None
#: A request's teller (``ExpressLane._told`` for that request): a route that answers
#: through it costs no future and no loop callback per request. It does not raise; a second
#: call, or one after the connection went away, is ignored.
Tell = Callable[["Answer | BaseException"], None]


class Later(enum.Enum):
    """What a route returns when it will answer through the teller it was given."""

    LATER = "later"


LATER = Later.LATER
Route = Callable[[Headers, bytes, Tell], "Answer | asyncio.Future[Answer] | Later"]
#: Longest request head the lane reads (aiohttp's own limit on a line or field is 8190).
HEAD_MAX = 8192
#: An answer not yet taken by the client past this many bytes: aiohttp's (it applies
#: back-pressure; the lane would only buffer).
WRITE_BACKLOG_MAX = 64 * 1024
#: Bytes read ahead (pipelined requests) while a request is handled before the lane stops
#: reading the connection until it has answered.
READ_BACKLOG_MAX = 64 * 1024
#: Header fields as the lane takes them: a token, a colon, a value without control bytes.
_FIELDS = re.compile(rb"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\x00-\x08\x0a-\x1f\x7f]*\r\n)*")
#: Headers whose presence makes a request aiohttp's (framing or body encoding it handles).
_NOT_PLAIN = frozenset({"transfer-encoding", "expect", "upgrade", "content-encoding"})


class Express:
    """The routes served in the express lane of one service, and its requests in flight."""

    def __init__(self, body_cap: int, keepalive_s: float) -> None:
        self.body_cap = body_cap
        self.keepalive_s = keepalive_s
        self.routes: dict[bytes, Route] = {}
        self.closing = False  # set once the service stops: new requests go to aiohttp
        self.served = 0  # requests answered in the lane
        self.handed = 0  # connections handed to aiohttp
        self._inflight: set[asyncio.Future[Answer]] = set()
        self._later: set[ExpressLane] = set()  # lanes waiting for a teller's answer
        self._all_told: asyncio.Future[None] | None = None  # ``close``'s, while it waits
        self._lanes: set[ExpressLane] = set()  # connections the lane still reads
        #: whole heads seen lately (request line and fields) -> (route, headers, body
        #: length), or False: aiohttp's. Bounded (``HEADS_LIMIT``): cleared when full.
        self._heads: dict[bytes, tuple[Route, Headers, int] | Literal[False]] = {}
        self._date = (0, b"")

    def route(self, method: str, path: str, handler: Route) -> None:
        """Serve ``method path`` (exact, no query) in the lane through ``handler``."""
        self.routes[f"{method} {path} HTTP/1.1".encode("ascii")] = handler

    def answer(self, status: int, reason: str, body: bytes, headers: Headers) -> bytes:
        """Return a whole HTTP/1.1 answer with a JSON ``body``, headers as aiohttp writes them."""
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True).encode("ascii"))
        head = f"HTTP/1.1 {status} {reason}\r\n"
        for name, value in headers.items():
            head += f"{name}: {value}\r\n"
        return b"%b%d\r\nDate: %b%b%b" % (
            (head + _JSON_LENGTH).encode("latin-1"),
            len(body),
            self._date[1],
            _SERVER,
            body,
        )

    async def close(self, timeout_s: float = 30.0) -> None:
        """Take no new request; wait (up to ``timeout_s``) for those in flight to be answered,
        then close the lane's connections (aiohttp closes those it was handed).

        The ``LATER`` answers still to be told are awaited on a future the last one's teller
        resolves (``later_told``): ``close`` returns as that answer is sent, not at a poll.
        """
        self.closing = True
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=timeout_s)
        if self._later:
            self._all_told = all_told = loop.create_future()
            try:
                await asyncio.wait({all_told}, timeout=max(0.0, end - loop.time()))
            finally:
                self._all_told = None
        for lane in list(self._lanes):
            lane.close()

    def later_told(self, lane: ExpressLane) -> None:
        """``lane``'s ``LATER`` answer was told: once none is left, wake a waiting ``close``."""
        self._later.discard(lane)
        all_told = self._all_told
        if all_told is not None and not self._later and not all_told.done():
            all_told.set_result(None)


_JSON_LENGTH = "Content-Type: application/json; charset=utf-8\r\nContent-Length: "
_SERVER = f"\r\nServer: {SERVER_SOFTWARE}\r\n\r\n".encode("latin-1")
_INTERNAL = json.dumps({"ok": False, "error": "internal error; see the log", "status": 500})


class ExpressLane:
    """One connection's lane: parses plain requests, hands everything else to aiohttp."""

    __slots__ = (
        "_buf",
        "_busy",
        "_express",
        "_gone",
        "_handover",
        "_idle",
        "_last",
        "_paused",
        "_raw",
        "_sent",
        "_sock",
        "_task",
        "_transport",
    )

    def __init__(
        self,
        express: Express,
        transport: asyncio.Transport,
        handover: Callable[[bytes], None],
        busy: Callable[[bool], None],
    ) -> None:
        self._express = express
        self._transport = transport
        self._handover = handover  # give these bytes (and the connection) to aiohttp
        self._busy = busy  # tell the guard a request started (True) or was answered
        self._buf = b""
        self._task: asyncio.Future[Answer] | Later | None = None  # the request in flight
        self._raw = b""  # the request a ``LATER`` answer is for
        self._gone = False  # handed over or lost
        self._idle: asyncio.TimerHandle | None = None
        self._last = 0.0
        self._paused = False  # reading stopped: too much read ahead
        self._sent = 0  # answers sent on this connection
        self._sock: socket.socket | None = None  # a copy of its socket (``_direct``)
        express._lanes.add(self)

    def feed(self, data: bytes) -> None:
        """Take bytes from the connection."""
        self._buf += data
        if self._task is None:
            self._pump()
        elif len(self._buf) > READ_BACKLOG_MAX and not self._paused:
            self._paused = True
            self._transport.pause_reading()

    def lost(self) -> None:
        """The connection went away (a request in flight still completes, unanswered)."""
        self._leave()

    def close(self) -> None:
        """Close the connection (the service stops)."""
        self._leave()
        self._transport.close()

    def _leave(self) -> None:
        self._gone = True
        self._express._lanes.discard(self)
        if self._sock is not None:
            self._sock.close()  # the copy only: the transport still holds the connection
            self._sock = None
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _pump(self) -> None:
        while self._buf and self._task is None and not self._gone:
            parsed = self._parse()
            if parsed is None:  # a head still arriving
                return
            if parsed is False:
                self._hand_over(self._buf)
                return
            route, headers, size, body_at = parsed
            raw, self._buf = self._buf[:size], self._buf[size:]
            self._busy(True)
            try:
                tell = partial(self._told, raw)  # the request's own: told once
                answer = None if self._express.closing else route(headers, raw[body_at:], tell)
            except Exception:
                self._failed(raw)
                return
            if answer is LATER:  # told through ``_told``
                self._task, self._raw = LATER, raw
                self._express._later.add(self)
                return
            if isinstance(answer, asyncio.Future):  # in flight until answered (``close``)
                self._task = answer
                self._express._inflight.add(answer)
                answer.add_done_callback(partial(self._resolved, raw))
                return
            if not self._answer(raw, answer):
                return

    def _resolved(self, raw: bytes, pending: asyncio.Future[Answer]) -> None:
        """A route's future is done: answer its request, then go on with what follows."""
        self._task = None
        self._express._inflight.discard(pending)
        err = CancelledError() if pending.cancelled() else pending.exception()
        if err is not None:
            self._failed(raw, err)
            return
        if self._answer(raw, pending.result()):
            self._pump()

    def _told(self, raw: bytes, outcome: Answer | BaseException) -> None:
        """A route's ``LATER`` answer (or error) to ``raw``: answer it, then go on with what
        follows, from the route's own callback (no loop callback between). Never raises."""
        if self._task is not LATER or raw is not self._raw:  # told twice: the first stands
            return
        self._raw = b""
        self._task = None
        self._express.later_told(self)
        try:
            if isinstance(outcome, BaseException):
                self._failed(raw, outcome)
            elif self._answer(raw, outcome):
                self._pump()
        except Exception:  # the teller's caller tells others after this one
            _log.exception("answering a request in the express lane failed")
            self.close()

    def _failed(self, raw: bytes, err: BaseException | None = None) -> None:
        """The route raised: log it, answer 500 and close the connection."""
        exc_info = True if err is None else err
        line = raw[: raw.find(b"\r\n")].decode()
        _log.error("unhandled error answering %s", line, exc_info=exc_info)
        answer = self._express.answer(500, "Internal Server Error", _INTERNAL.encode(), {})
        if self._answer(raw, answer):
            self.close()

    def _parse(self) -> tuple[Route, Headers, int, int] | Literal[False] | None:
        """Return (route, headers, request size, body offset); None: wait; False: aiohttp's.

        A client sends the same head again and again (its request line, host, content type,
        a body of the same length): a whole head seen lately is judged once (``_heads``).
        """
        buf = self._buf
        end = buf.find(b"\r\n\r\n", 0, HEAD_MAX + 4)
        if 0 <= end <= HEAD_MAX:
            heads = self._express._heads
            head = buf[:end]
            found = heads.get(head)
            if found is None:
                if len(heads) >= HEADS_LIMIT:
                    heads.clear()
                found = heads[head] = self._judge(head, end)
            if found is False or self._transport.get_write_buffer_size() > WRITE_BACKLOG_MAX:
                return False
            route, headers, length = found
            size = end + 4 + length
            if len(buf) < size:  # aiohttp's: a timed body
                return False
            return route, headers, size, end + 4
        return self._waiting()

    def _judge(self, head: bytes, end: int) -> tuple[Route, Headers, int] | Literal[False]:
        """Return a whole head's (route, headers, body length), or False: aiohttp's."""
        express = self._express
        line_end = head.find(b"\r\n")
        route = express.routes.get(head if line_end < 0 else head[:line_end])
        if route is None:
            return False
        headers = _headers(head[line_end + 2 :]) if line_end >= 0 else {}
        if headers is None or not _NOT_PLAIN.isdisjoint(headers):
            return False
        if headers.get("connection", "keep-alive").lower() != "keep-alive":
            return False
        length = headers.get("content-length", "")
        if not (length.isascii() and length.isdigit() and len(length) <= 12):
            return False
        if int(length) > express.body_cap:  # aiohttp: 413
            return False
        return route, headers, int(length)

    def _waiting(self) -> Literal[False] | None:
        """For a head not yet whole: None: wait for more; False: aiohttp's."""
        buf, express = self._buf, self._express
        line_end = buf.find(b"\r\n")
        if line_end < 0:
            starts = any(line.startswith(buf) for line in express.routes)
            return None if starts and len(buf) < HEAD_MAX else False
        if buf[:line_end] not in express.routes:
            return False
        if self._transport.get_write_buffer_size() > WRITE_BACKLOG_MAX:
            return False
        return None if len(buf) < HEAD_MAX else False  # the head is not whole yet

    def _answer(self, raw: bytes, answer: Answer) -> bool:
        """Send a request's answer (None: hand it and the rest to aiohttp); return whether
        the lane goes on reading this connection."""
        self._task = None
        self._busy(False)
        if self._paused and not self._transport.is_closing():
            self._paused = False
            self._transport.resume_reading()
        if answer is None:  # declined: nothing was stored; aiohttp answers it and the rest
            self._hand_over(raw + self._buf)
            return False
        if self._gone or self._transport.is_closing():
            return False
        self._send(answer)
        self._express.served += 1
        self._last = asyncio.get_running_loop().time()
        if self._idle is None:
            self._idle = asyncio.get_running_loop().call_later(
                self._express.keepalive_s, self._idle_check
            )
        return True

    def _send(self, answer: bytes) -> None:
        """Write an answer: on a keep-alive connection through its socket's copy, the GIL
        released during the system call (``_direct``), else through the transport."""
        transport, sock = self._transport, self._sock
        self._sent += 1
        if sock is None and self._sent == 2:  # keep-alive: worth a copy of the socket
            sock = self._sock = _direct(transport)
        if sock is None or transport.get_write_buffer_size():  # (in order after the rest)
            transport.write(answer)
            return
        try:
            sent = sock.send(answer)
        except OSError:  # full, or the connection broke: the transport deals with it
            sent = 0
        if sent < len(answer):
            transport.write(answer[sent:] if sent else answer)

    def _idle_check(self) -> None:
        self._idle = None
        if self._gone or self._transport.is_closing():
            return
        loop = asyncio.get_running_loop()
        left = self._last + self._express.keepalive_s - loop.time()
        if self._task is not None or self._buf or left > 0:  # busy, a head arriving, or used
            self._idle = loop.call_later(max(left, 1.0), self._idle_check)
            return
        self.close()

    def _hand_over(self, data: bytes) -> None:
        gone = self._gone or self._transport.is_closing()
        self._leave()
        self._buf = b""
        if not gone:
            self._express.handed += 1
            self._handover(data)


def _direct(transport: asyncio.Transport) -> socket.socket | None:
    """Return a non-blocking copy (``dup``) of a plain TCP transport's socket; None for TLS
    or anything else.

    uvloop's ``transport.write`` makes its ``send`` with the GIL held, and on loopback that
    call does the receiving side's TCP work too: about a tenth of a busy agent's GIL time
    (``docs/performance.md``, intake path, session 10). Python's ``socket.send`` releases
    the GIL around it, so the SQLite writer thread runs meanwhile. The copy is used only
    while the transport's own buffer is empty (bytes stay in order; what the copy does not
    take goes through the transport), only by the lane, and closed when the lane leaves the
    connection (``_leave``), so the connection ends when the transport closes it.
    """
    if transport.get_extra_info("sslcontext") is not None:
        return None
    raw = transport.get_extra_info("socket")
    if raw is None or raw.type != socket.SOCK_STREAM:
        return None
    try:
        sock = socket.socket(raw.family, raw.type, raw.proto, os.dup(raw.fileno()))
    except OSError:
        return None
    sock.setblocking(False)
    return sock


#: Whole heads an ``Express`` keeps judged (``_heads``); more and it starts again.
HEADS_LIMIT = 256


def _headers(block: bytes) -> Headers | None:
    """Return a head's fields by lower-case name; None: not plain (see the module doc)."""
    if not _FIELDS.fullmatch(block + b"\r\n"):  # every line a token, a colon, a clean value
        return None
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\r\n")
    out = {
        name.lower(): value.strip(" \t") for name, _, value in (ln.partition(":") for ln in lines)
    }
    return out if len(out) == len(lines) else None  # a field given twice: aiohttp's
