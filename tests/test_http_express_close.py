"""``Express.close`` waits for the ``LATER`` answers still to be told on the last teller's
call, not on a poll, and still gives up after its timeout when an answer never comes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edge_agent import http_express
from tests.test_http_express import _Transport

pytestmark = pytest.mark.asyncio

#: Loop turns a woken ``close`` needs to finish: the future's callback wakes ``asyncio.wait``,
#: which wakes the task (a poll, asleep on a timer, would need the clock to move instead).
_TURNS = 10


def _express() -> tuple[http_express.Express, list[Any]]:
    """An express lane whose one route answers ``LATER``; the tellers it was given."""
    tellers: list[Any] = []

    def route(headers: dict[str, str], body: bytes, tell: Any) -> Any:
        tellers.append(tell)
        return http_express.LATER

    express = http_express.Express(1024, 60.0)
    express.route("POST", "/x", route)
    return express, tellers


def _waiting(express: http_express.Express) -> _Transport:
    """A connection whose one request waits for its ``LATER`` answer; its transport."""
    transport = _Transport()
    lane = http_express.ExpressLane(express, transport, lambda b: None, lambda b: None)  # type: ignore[arg-type]
    lane.feed(b"POST /x HTTP/1.1\r\nContent-Length: 4\r\n\r\nwait")
    assert lane in express._later
    return transport


async def test_close_returns_as_the_last_pending_answer_is_told() -> None:
    """Two answers pending, a timeout of an hour: ``close`` waits through the first and
    returns within a few loop turns of the last (no clock needed), having sent both."""
    express, tellers = _express()
    first, second = _waiting(express), _waiting(express)
    closing = asyncio.ensure_future(express.close(timeout_s=3600.0))
    for _ in range(_TURNS):
        await asyncio.sleep(0)
    assert not closing.done()  # waiting for both
    tellers[0](b"A:first")
    for _ in range(_TURNS):
        await asyncio.sleep(0)
    assert not closing.done() and first.written == [b"A:first"]  # the second still pending
    tellers[1](b"B:second")
    for _ in range(_TURNS):
        if closing.done():
            break
        await asyncio.sleep(0)
    done = closing.done()
    closing.cancel()
    assert done, "close did not return when the last pending answer was told"
    assert second.written == [b"B:second"] and first.closed and second.closed


async def test_close_gives_up_after_its_timeout_when_an_answer_never_comes() -> None:
    """An answer never told: ``close`` returns after its timeout and closes the connection
    unanswered; a teller's call after that is dropped."""
    express, tellers = _express()
    transport = _waiting(express)
    await asyncio.wait_for(express.close(timeout_s=0.02), timeout=30.0)
    assert transport.closed and transport.written == []
    tellers[0](b"A:late")
    assert transport.written == [] and not express._later
