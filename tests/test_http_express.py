"""The express lane (edge_agent/http_express.py) of a real agent daemon: plain single
submissions are answered ahead of aiohttp with the same document, everything else is
aiohttp's and answered as before, in order, on the same connection."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edge_agent.agent.config import AgentConfig

pytestmark = pytest.mark.asyncio
Serve = Callable[[AgentConfig], AbstractAsyncContextManager[str]]
BODY = json.dumps({"semantics": {"gflops": 0.001}, "task_class": "bench"}).encode()


def _post(body: bytes = BODY, *headers: str, length: bool = True) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    size = f"Content-Length: {len(body)}\r\n" if length else ""
    head = f"POST /v1/tasks HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n{extra}"
    return (head + size + "\r\n").encode() + body


async def _answers(reader: asyncio.StreamReader, n: int) -> list[tuple[int, dict[str, str], Any]]:
    """Read ``n`` answers (status, headers by lower-case name, JSON body)."""
    out = []
    while len(out) < n:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode().split("\r\n")
        if lines[0].split()[1].startswith("1"):  # 100 Continue: the answer follows
            continue
        fields = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        body = await reader.readexactly(int(fields["content-length"]))
        json_body = fields.get("content-type", "").startswith("application/json")
        out.append((int(lines[0].split()[1]), fields, json.loads(body) if json_body else body))
    return out


async def _exchange(port: int, *requests: bytes, n: int = 0) -> list[Any]:
    """Send ``requests`` on one connection in one write; return its ``n`` (default: one per
    request) answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(requests))
        return await _answers(reader, n or len(requests))
    finally:
        writer.close()


async def _counts(url: str) -> tuple[float, float]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
        text = await resp.text()
    found = [
        re.search(rf"^hetmesh_http_express_{name}_total (\S+)$", text, re.M)
        for name in ("answered", "handed")
    ]
    assert found[0] and found[1], "express counters not on /metrics"
    return float(found[0].group(1)), float(found[1].group(1))


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def test_plain_submissions_are_answered_in_the_lane_with_the_stored_document(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    async with agent_daemon(emulated_agent()) as url:
        port = _port(url)
        before = await _counts(url)
        answers = await _exchange(
            port, _post(), _post(BODY, "Idempotency-Key: k-1"), _post(BODY, "Idempotency-Key: k-1")
        )
        after = await _counts(url)
        async with aiohttp.ClientSession() as s:
            stored = []
            for _, _, doc in answers:
                async with s.get(f"{url}/v1/tasks/{doc['task']['id']}") as resp:
                    stored.append((await resp.json())["task"])
    assert [(status, doc["created"]) for status, _, doc in answers] == [
        (202, True),
        (202, True),
        (202, False),  # the retry of k-1: the same task
    ]
    assert answers[1][2]["task"]["id"] == answers[2][2]["task"]["id"]
    for (_, fields, doc), row in zip(answers, stored, strict=True):
        assert fields["location"] == f"/v1/tasks/{row['id']}"
        assert fields["content-type"] == "application/json; charset=utf-8"
        assert "date" in fields and fields["server"].startswith("Python/")
        task = doc["task"]
        assert {k: task[k] for k in ("id", "idempotency_key", "contract", "priority")} == {
            k: row[k] for k in ("id", "idempotency_key", "contract", "priority")
        }
        assert task["submitted_at"] == row["submitted_at"]
    # all three in the lane; the one connection handed over is the /metrics read's own
    assert after[0] - before[0] == 3 and after[1] - before[1] == 1


async def test_requests_that_are_not_plain_are_answered_by_aiohttp_as_before(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    chunked = _post(b"", "Transfer-Encoding: chunked", length=False)
    chunked += b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    cases = {
        "chunked body": (chunked, 202),
        "Connection: close": (_post(BODY, "Connection: close"), 202),
        "Expect: 100-continue": (_post(BODY, "Expect: 100-continue"), 202),
        "malformed JSON": (_post(b'{"semantics": '), 400),
        "a bad contract": (_post(b'{"semantics": {"gflops": -1}}'), 400),
        "an empty Idempotency-Key": (_post(BODY, "Idempotency-Key: "), 400),
        # aiohttp's parser refuses this one before any middleware (its own text 400, as before)
        "Content-Length twice": (_post(BODY, f"Content-Length: {len(BODY)}"), 400),
        "a key reused with another body": (
            _post(b'{"semantics": {"gflops": 0.5}}', "Idempotency-Key: k-1"),
            409,
        ),
    }
    async with agent_daemon(emulated_agent()) as url:
        port = _port(url)
        await _exchange(port, _post(BODY, "Idempotency-Key: k-1"))
        before = await _counts(url)
        got = {}
        for name, (request, _) in cases.items():
            [got[name]] = await _exchange(port, request)
        after = await _counts(url)
    for name, (_, status) in cases.items():
        code, fields, doc = got[name]
        assert code == status, f"{name}: {code} {doc}"
        if name == "Content-Length twice":
            continue
        if status >= 400:  # the one JSON error shape, with what to fix
            assert doc["ok"] is False and doc["status"] == status and doc["error"], name
        assert fields["content-type"].startswith("application/json"), name
    assert after[0] == before[0]  # none of them answered in the lane
    assert after[1] - before[1] == len(cases) + 1  # and the /metrics read's own


async def test_a_connection_handed_to_aiohttp_answers_in_order(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    """Pipelined: two plain submissions, a GET, another submission; then a body that
    arrives after its head on a fresh connection."""
    health = b"GET /v1/health HTTP/1.1\r\nHost: agent\r\n\r\n"
    async with agent_daemon(emulated_agent()) as url:
        port = _port(url)
        before = await _counts(url)
        answers = await _exchange(
            port,
            _post(BODY, "Idempotency-Key: p-1"),
            _post(BODY, "Idempotency-Key: p-2"),
            health,
            _post(BODY, "Idempotency-Key: p-3"),
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        whole = _post(BODY, "Idempotency-Key: s-1")
        writer.write(whole[:-5])
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(whole[-5:])
        [split] = await _answers(reader, 1)
        writer.close()
        after = await _counts(url)
    assert [a[0] for a in answers] == [202, 202, 200, 202]
    keys = [a[2]["task"]["idempotency_key"] for i, a in enumerate(answers) if i != 2]
    assert keys == ["p-1", "p-2", "p-3"]
    assert answers[2][2]["ok"] is True and "uptime_s" in answers[2][2]
    assert split[0] == 202 and split[2]["task"]["idempotency_key"] == "s-1"
    assert after[0] - before[0] == 2  # p-1 and p-2; the rest were aiohttp's
    assert after[1] - before[1] == 3  # the two, and the /metrics read's own


async def test_the_lane_asks_for_the_api_token(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    config = emulated_agent(auth="token")
    async with agent_daemon(config) as url:
        token = config.token_path.read_text().strip()
        port = _port(url)
        bearer = f"Authorization: Bearer {token}"
        refused, wrong, accepted = (
            await _exchange(port, _post())
            + await _exchange(port, _post(BODY, "Authorization: Bearer nope"))
            + await _exchange(port, _post(BODY, bearer))
        )
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            async with s.get(f"{url}/v1/tasks") as resp:
                ids = [t["id"] for t in (await resp.json())["tasks"]]
            async with s.get(f"{url}/metrics") as resp:
                text = await resp.text()
    assert refused[0] == wrong[0] == 401
    assert "needs a token" in refused[2]["error"] and "token is wrong" in wrong[2]["error"]
    assert accepted[0] == 202 and ids == [accepted[2]["task"]["id"]]
    assert "hetmesh_http_express_answered_total 1.0" in text


async def test_an_idle_keep_alive_connection_of_the_lane_is_closed(
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Serve,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Also once its answers went through the lane's copy of the socket (from the second
    on): the copy is closed with the lane, so the client sees the connection end."""
    monkeypatch.setattr("edge_agent.agent.web.api.KEEPALIVE_S", 0.3)
    async with agent_daemon(emulated_agent()) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        statuses = []
        for _ in range(3):
            writer.write(_post())
            statuses += [a[0] for a in await _answers(reader, 1)]
        closed = await asyncio.wait_for(reader.read(), 5)  # b"": the agent closed it
        writer.close()
    assert statuses == [202] * 3 and closed == b""


async def test_a_busy_lane_connection_outlives_aiohttps_keep_alive_time(
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Serve,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiohttp closes a connection it reads no request on after its keep-alive time; one
    the lane is busy with is not aiohttp's until handed over, so it stays open."""
    monkeypatch.setattr("edge_agent.http_limits.KEEPALIVE_S", 0.3)  # aiohttp's timeout
    async with agent_daemon(emulated_agent()) as url:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(url))
        statuses = []
        for _ in range(8):  # 1.2 s of traffic on one connection: four times aiohttp's time
            writer.write(_post())
            statuses += [a[0] for a in await _answers(reader, 1)]
            await asyncio.sleep(0.15)
        writer.write(b"GET /v1/health HTTP/1.1\r\nHost: agent\r\n\r\n")  # now aiohttp's
        [(health, _, _)] = await _answers(reader, 1)
        closed = await asyncio.wait_for(reader.read(), 5)  # aiohttp's keep-alive time, idle
        writer.close()
    assert statuses == [202] * 8 and health == 200 and closed == b""


async def test_a_long_pipeline_is_answered_in_order(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    """More pipelined bytes than the lane reads ahead: it stops reading while it answers,
    then reads on; every request is answered, in order."""
    requests = [_post(BODY, f"Idempotency-Key: long-{i}") for i in range(500)]
    assert len(b"".join(requests)) > 64 * 1024  # http_express.READ_BACKLOG_MAX
    async with agent_daemon(emulated_agent()) as url:
        answers = await _exchange(_port(url), *requests)
    assert [a[0] for a in answers] == [202] * 500
    assert [a[2]["task"]["idempotency_key"] for a in answers] == [f"long-{i}" for i in range(500)]


async def test_requests_in_the_lane_when_the_agent_stops_are_answered_and_stored(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    """A stop while 8 connections submit: every 202 names a task the file holds, and no
    answer is cut short (each connection ends after a whole answer)."""
    config = emulated_agent()
    acked: list[str] = []
    cut: list[bytes] = []

    async def lane(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                writer.write(_post())
                try:
                    [(status, _, doc)] = await _answers(reader, 1)
                except asyncio.IncompleteReadError as err:  # closed: after a whole answer?
                    if err.partial:
                        cut.append(err.partial)
                    return
                assert status == 202
                acked.append(doc["task"]["id"])
        except ConnectionError:
            return
        finally:
            writer.close()

    async with agent_daemon(config) as url:
        lanes = [asyncio.create_task(lane(_port(url))) for _ in range(8)]
        await asyncio.sleep(0.5)
        assert acked, "no submission answered before the stop"
    await asyncio.wait_for(asyncio.gather(*lanes), 10)
    db = sqlite3.connect(f"file:{config.data_dir / 'agent.db'}?mode=ro", uri=True)
    stored = {row[0] for row in db.execute("SELECT id FROM tasks")}
    db.close()
    assert cut == [] and set(acked) <= stored


async def test_nothing_the_lane_acknowledged_is_lost_to_kill_9(tmp_path: Path) -> None:
    """``kill -9`` of an agent process while 16 keep-alive connections submit through the
    lane: every task it answered 202 is in its file (a 202 only after the commit)."""
    data = tmp_path / "data"
    env = {
        **os.environ,
        "EDGE_AGENT_CONFIG": str(tmp_path / "none.toml"),
        "EDGE_AGENT_DATA_DIR": str(data),
        "EDGE_AGENT_PORT": "0",
        "EDGE_AGENT_PROFILE": "rk3588",
        "EDGE_AGENT_TELEMETRY_INTERVAL_S": "0",
    }
    proc = subprocess.Popen([str(Path(sys.executable).with_name("edge-agent")), "run"], env=env)
    try:
        deadline = time.monotonic() + 30
        while not (data / "agent.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the agent did not start"
            await asyncio.sleep(0.05)
        port = json.loads((data / "agent.json").read_text())["port"]
        acked: list[str] = []

        async def lane(i: int) -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            n = 0
            try:
                while True:
                    n += 1
                    writer.write(_post(BODY, f"Idempotency-Key: kill-{i}-{n}"))
                    [(status, _, doc)] = await _answers(reader, 1)
                    assert status == 202
                    acked.append(doc["task"]["id"])
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # killed
            finally:
                writer.close()

        lanes = [asyncio.create_task(lane(i)) for i in range(16)]
        deadline = time.monotonic() + 30
        while len(acked) < 200:  # then kill it mid-flood
            assert time.monotonic() < deadline and not all(t.done() for t in lanes)
            await asyncio.sleep(0.01)
        proc.kill()
        await asyncio.wait_for(asyncio.gather(*lanes), 10)
    finally:
        proc.kill()
        proc.wait(timeout=20)
    db = sqlite3.connect(f"file:{data / 'agent.db'}?mode=ro", uri=True)
    stored = {row[0] for row in db.execute("SELECT id FROM tasks")}
    db.close()
    assert len(acked) >= 200 and set(acked) <= stored


async def test_a_head_seen_before_is_judged_once_and_each_other_head_as_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lane judges a whole head (request line and fields) it has seen lately from its
    cache: the same route and fields (or the same hand-over to aiohttp) as judging it again,
    a head differing in one byte judged on its own, and the cache bounded."""
    from edge_agent import http_express

    monkeypatch.setattr(http_express, "HEADS_LIMIT", 4)
    read: list[bytes] = []
    real = http_express._headers
    monkeypatch.setattr(http_express, "_headers", lambda b: read.append(b) or real(b))
    seen: list[dict[str, str]] = []

    def route(headers: dict[str, str], body: bytes, tell: Any) -> bytes:
        seen.append(headers)
        return b"ok:" + body

    express = http_express.Express(1024, 60.0)
    express.route("POST", "/x", route)
    plain = b"Host: a\r\nContent-Length: 2\r\nIdempotency-Key: k1"
    other = plain.replace(b"k1", b"k2")
    twice = b"Host: a\r\nHost: b\r\nContent-Length: 2"
    handed: list[bytes] = []
    for block in (plain, plain, other, plain, twice, twice):
        transport = _Transport()
        lane = http_express.ExpressLane(express, transport, handed.append, lambda b: None)  # type: ignore[arg-type]
        lane.feed(b"POST /x HTTP/1.1\r\n" + block + b"\r\n\r\nhi")
        assert transport.written == ([] if block == twice else [b"ok:hi"])
    assert seen[0] == {"host": "a", "content-length": "2", "idempotency-key": "k1"}
    assert seen[1] == seen[3] == seen[0] and seen[2]["idempotency-key"] == "k2"
    assert len(seen) == 4 and len(handed) == 2  # a field twice: aiohttp's, every time
    assert read == [plain, other, twice]
    lane = http_express.ExpressLane(express, _Transport(), handed.append, lambda b: None)  # type: ignore[arg-type]
    for i in range(10):
        lane.feed(b"POST /x HTTP/1.1\r\nHost: h%d\r\nContent-Length: 0\r\n\r\n" % i)
    assert len(express._heads) <= 4


class _Transport:
    """What the lane uses of a transport: writes kept, a close noted."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> None:
        return None  # no socket: answers go through ``write``

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def test_a_route_answers_at_once_or_by_a_future_in_order_and_a_failure_is_a_500() -> None:
    """A route's answer given at once and one given by a future are sent in request order
    (a pipelined request waits for the future before it); a future that fails or a route
    that raises is a 500 that closes the connection, after the answers before it."""
    from edge_agent import http_express

    loop = asyncio.get_running_loop()
    later: list[asyncio.Future[bytes | None]] = []

    def route(headers: dict[str, str], body: bytes, tell: Any) -> Any:
        if body == b"now":
            return b"A:" + body
        if body == b"boom":
            raise RuntimeError("route failed")
        later.append(loop.create_future())
        return later[-1]

    def request(body: bytes) -> bytes:
        return b"POST /x HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    for last, bad in ((b"boom", None), (b"then", RuntimeError("the store broke"))):
        express = http_express.Express(1024, 60.0)
        express.route("POST", "/x", route)
        transport, busy = _Transport(), list[bool]()
        lane = http_express.ExpressLane(express, transport, lambda b: None, busy.append)  # type: ignore[arg-type]
        lane.feed(request(b"now") + request(b"wait") + request(b"now") + request(last))
        assert transport.written == [b"A:now"]  # the rest waits for the future
        assert express._inflight == set(later[-1:])
        later[-1].set_result(b"B:wait")
        await asyncio.sleep(0)
        if bad is not None:
            later[-1].set_exception(bad)
            await asyncio.sleep(0)
        assert transport.written[:3] == [b"A:now", b"B:wait", b"A:now"]
        assert len(transport.written) == 4 and transport.written[3].startswith(b"HTTP/1.1 500 ")
        assert transport.closed and busy == [True, False] * 4
        assert express.served == 4 and not express._inflight


async def test_a_route_answers_later_through_the_lanes_teller_in_order() -> None:
    """A route that returns ``LATER`` answers through the teller it was given: the answer is
    sent from the teller's call itself (no loop turn between), a pipelined request waits for
    it, a second call is ignored, an error told is a 500 that closes the connection, an
    answer told after the connection went away is dropped, and ``close`` waits for the
    answers still to be told."""
    from edge_agent import http_express

    tellers: list[Callable[[Any], None]] = []

    def route(headers: dict[str, str], body: bytes, tell: Any) -> Any:
        if body == b"now":
            return b"A:" + body
        tellers.append(tell)
        return http_express.LATER

    def request(body: bytes) -> bytes:
        return b"POST /x HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    express = http_express.Express(1024, 60.0)
    express.route("POST", "/x", route)
    transport, busy = _Transport(), list[bool]()
    lane = http_express.ExpressLane(express, transport, lambda b: None, busy.append)  # type: ignore[arg-type]
    lane.feed(request(b"wait") + request(b"now") + request(b"wait") + request(b"wait"))
    assert transport.written == [] and express._later == {lane} and len(tellers) == 1
    tellers[0](b"B:1")  # answered at once, and the pipelined requests after it
    assert transport.written == [b"B:1", b"A:now"] and len(tellers) == 2
    tellers[0](b"B:again")  # told twice: ignored
    tellers[1](b"B:2")
    assert transport.written == [b"B:1", b"A:now", b"B:2"] and len(tellers) == 3
    tellers[2](RuntimeError("the store broke"))
    assert len(transport.written) == 4 and transport.written[3].startswith(b"HTTP/1.1 500 ")
    assert transport.closed and busy == [True, False] * 4 and not express._later

    gone = _Transport()
    lane = http_express.ExpressLane(express, gone, lambda b: None, lambda b: None)  # type: ignore[arg-type]
    lane.feed(request(b"wait"))
    lane.lost()
    tellers[-1](b"B:late")
    assert gone.written == [] and not express._later

    waiting = _Transport()
    lane = http_express.ExpressLane(express, waiting, lambda b: None, lambda b: None)  # type: ignore[arg-type]
    lane.feed(request(b"wait"))
    asyncio.get_running_loop().call_later(0.05, tellers[-1], b"B:closing")
    await express.close(timeout_s=5.0)
    assert waiting.written == [b"B:closing"] and waiting.closed


async def test_keep_alive_answers_go_through_the_sockets_copy_in_order_with_the_transport() -> None:
    """From a connection's second answer on, the lane sends through a copy of its socket;
    while the transport still holds unsent bytes it writes through the transport (so the
    answers stay in order), and leaving the connection closes the copy."""
    import socket

    from edge_agent import http_express

    ours, peer = socket.socketpair()
    peer.settimeout(5)

    class Transport(_Transport):
        backlog = 0

        def get_write_buffer_size(self) -> int:
            return self.backlog

        def get_extra_info(self, name: str) -> Any:
            return ours if name == "socket" else None

    def request(body: bytes) -> bytes:
        return b"POST /x HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    express = http_express.Express(1024, 60.0)
    express.route("POST", "/x", lambda headers, body, tell: b"A:" + body)
    transport = Transport()
    lane = http_express.ExpressLane(express, transport, lambda b: None, lambda b: None)  # type: ignore[arg-type]
    try:
        lane.feed(request(b"1"))  # a first answer: the transport's (most connections' only)
        lane.feed(request(b"2"))  # the second: through the copy
        transport.backlog = 5  # the transport has bytes left to send: after them
        lane.feed(request(b"3"))
        transport.backlog = 0
        lane.feed(request(b"4"))
        assert transport.written == [b"A:1", b"A:3"]
        assert peer.recv(64) == b"A:2A:4"
        copy = lane._sock
        assert copy is not None and copy.fileno() != ours.fileno()
        lane.lost()
        assert copy.fileno() == -1 and lane._sock is None and ours.fileno() >= 0
    finally:
        ours.close()
        peer.close()
