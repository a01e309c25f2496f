"""Server limits (edge_agent/http_limits.py): slow heads, slow bodies, connection floods and
chunked bodies past the cap, against a real agent (a process, or ``daemon.serve``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edge_agent.agent.config import AgentConfig
from edge_agent.http_limits import RESERVED_FDS
from edge_agent.mesh.routes import MAX_BODY

SLOW_HEAD = b"GET /v1/health HTTP/1.1\r\nHost: agent\r\nX-Slow: "  # never finished
FLOOD = 2000
NORMAL = 60
KEY = "http-limits-test-fleet-key-00000"
pytestmark = pytest.mark.asyncio
Serve = Callable[[AgentConfig], AbstractAsyncContextManager[str]]


def _metric(text: str, name: str, reason: str | None = None) -> float:
    label = "" if reason is None else f'{{reason="{reason}"}}'
    found = re.search(rf"^{re.escape(name + label)} (\S+)$", text, re.M)
    assert found is not None, f"{name}{label} not on /metrics"
    return float(found.group(1))


async def _metrics(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
        return await resp.text()


@contextlib.contextmanager
def _open_files(n: int) -> Iterator[None]:
    """Let this process hold ``n`` descriptors (the flood's client ends), then restore."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n:
        pytest.skip(f"the hard open-file limit {hard} is under the {n} this test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, n), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _slow_heads(port: int, n: int) -> list[socket.socket]:
    """Open ``n`` connections that each send part of a request head and then nothing."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", port))
        socks.append(s)
    deadline = time.monotonic() + 20
    pending = list(socks)
    while pending and time.monotonic() < deadline:
        waiting = []
        for s in pending:
            try:
                s.send(SLOW_HEAD)
            except (BlockingIOError, OSError):
                waiting.append(s)  # still connecting (the backlog is full for a moment)
        pending = waiting
        time.sleep(0.01)
    return socks


async def _normal_requests(url: str, n: int, timeout_s: float) -> int:
    """Return how many of ``n`` fresh-connection GET /v1/health answered 200 in time."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    connector = aiohttp.TCPConnector(force_close=True, limit=10)

    async def one(session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(f"{url}/v1/health") as resp:
                return resp.status == 200 and (await resp.json())["ok"] is True
        except (aiohttp.ClientError, TimeoutError):
            return False

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        return sum(await asyncio.gather(*(one(session) for _ in range(n))))


async def _flooded(url: str, slow: int, normal: int, settle_s: float = 0.0) -> tuple[int, str]:
    """Hold ``slow`` slow heads open while ``normal`` requests run (10 s each at most);
    return (how many were served, /metrics ``settle_s`` later)."""
    flood = await asyncio.to_thread(_slow_heads, _port(url), slow)
    try:
        served = await _normal_requests(url, normal, timeout_s=10)
        await asyncio.sleep(settle_s)
        return served, await _metrics(url)
    finally:
        for s in flood:
            s.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@contextlib.contextmanager
def _agent_process(tmp: Path, soft_nofile: int, hard: bool = False, **env: str) -> Iterator[str]:
    """Run ``edge-agent run`` with a soft open-file limit of ``soft_nofile`` (the stock
    1,024 of a service manager; ``hard``: the hard limit too); yield its URL."""
    data = tmp / "data"
    environ = {
        **os.environ,
        "HOME": str(tmp),
        "EDGE_AGENT_CONFIG": str(tmp / "none.toml"),
        "EDGE_AGENT_DATA_DIR": str(data),
        "EDGE_AGENT_PORT": "0",
        "EDGE_AGENT_PROFILE": "rk3588",
        "EDGE_AGENT_TELEMETRY_INTERVAL_S": "0",
        "EDGE_AGENT_SHUTDOWN_GRACE_S": "0",
        **env,
    }

    def limit() -> None:
        top = soft_nofile if hard else resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft_nofile, top))

    cli = Path(sys.executable).with_name("edge-agent")
    proc = subprocess.Popen([str(cli), "run"], env=environ, preexec_fn=limit)
    try:
        deadline = time.monotonic() + 30
        while not (data / "agent.json").exists():
            assert proc.poll() is None, "the agent exited at start"
            assert time.monotonic() < deadline, "the agent did not start"
            time.sleep(0.05)
        port = json.loads((data / "agent.json").read_text())["port"]
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def test_2000_slow_head_connections_leave_normal_requests_served(tmp_path: Path) -> None:
    # the finding: at the stock open-file limit of 1,024, 1,100 slow heads starved the agent
    with _open_files(FLOOD + 1000), _agent_process(tmp_path, 1024) as url:
        served, text = await _flooded(url, FLOOD, NORMAL)
    assert served >= NORMAL - 2, f"{served} of {NORMAL} normal requests served"
    # the agent raised its own limit and holds every slow head (none was refused)
    assert _metric(text, "hetmesh_http_connections") >= FLOOD
    assert _metric(text, "hetmesh_http_limited_total", "over_capacity") == 0


async def test_at_the_connection_cap_slow_heads_make_room_for_real_requests(
    tmp_path: Path,
) -> None:
    cap = 300
    env = {"EDGE_AGENT_MAX_CONNECTIONS": str(cap), "EDGE_AGENT_HEADER_TIMEOUT_S": "60"}
    with _open_files(FLOOD + 1000), _agent_process(tmp_path, 1024, **env) as url:
        served, text = await _flooded(url, FLOOD, NORMAL)
    assert served >= NORMAL - 2, f"{served} of {NORMAL} normal requests served"
    assert _metric(text, "hetmesh_http_connections") <= cap
    # every connection past the cap closed the oldest slow head: the flood, then ours
    assert _metric(text, "hetmesh_http_limited_total", "evicted") >= FLOOD - cap


async def test_an_agent_that_cannot_raise_its_file_limit_lowers_its_cap_and_serves(
    tmp_path: Path,
) -> None:
    # no LimitNOFILE and a hard limit of 1,024: the cap shrinks to fit (a warning says so)
    with _open_files(FLOOD + 1000), _agent_process(tmp_path, 1024, hard=True) as url:
        served, text = await _flooded(url, FLOOD, NORMAL)
    assert served >= NORMAL - 2, f"{served} of {NORMAL} normal requests served"
    assert _metric(text, "hetmesh_http_connections") <= 1024 - RESERVED_FDS
    assert _metric(text, "hetmesh_http_limited_total", "evicted") >= FLOOD - (1024 - RESERVED_FDS)


async def test_a_slow_head_is_closed_at_the_header_timeout_and_counted(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    config = emulated_agent(header_timeout_s=0.3)
    async with agent_daemon(config) as url:
        port = _port(url)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        writer.write(SLOW_HEAD)
        answer = await asyncio.wait_for(reader.read(), 5)  # until the agent closes it
        waited = time.monotonic() - started
        writer.close()
        # a kept-alive connection: one request, then the next head trickles
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/health HTTP/1.1\r\nHost: agent\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b"}"), 5)
        await asyncio.sleep(0.5)  # idle longer than the header timeout: keep-alive, not a head
        writer.write(SLOW_HEAD)
        rest = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        text = await _metrics(url)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"request head not received" in answer
    assert 0.3 <= waited < 3
    assert first.startswith(b"HTTP/1.1 200 ")
    assert b"408 Request Timeout" in rest
    assert _metric(text, "hetmesh_http_limited_total", "header_timeout") == 2


async def test_a_slow_body_is_answered_408_and_counted(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    async with agent_daemon(emulated_agent(body_timeout_s=0.3)) as url:
        port = _port(url)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/tasks HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"semantics": '
        )
        answer = await asyncio.wait_for(reader.read(), 5)  # answered, then closed
        writer.close()
        text = await _metrics(url)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request body not received within 0.3 s" in answer
    assert _metric(text, "hetmesh_http_limited_total", "body_timeout") == 1


async def _chunked_until_answered(url: str, path: str, most: int) -> tuple[bytes, int]:
    """POST a chunked body of up to ``most`` bytes, stopping once an answer arrives;
    return (status line, body bytes sent by then)."""
    port = _port(url)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n".encode()
    )
    status = asyncio.create_task(reader.readline())
    chunk, sent = b"7" * 32768, 0
    with contextlib.suppress(ConnectionError):
        while sent < most and not status.done():
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            sent += len(chunk)
            await asyncio.sleep(0.002)  # a client on a LAN, not a memory copy
    line = await asyncio.wait_for(status, 10)
    writer.close()
    return line, sent


async def test_a_chunked_mesh_body_is_refused_after_about_the_mesh_cap(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    # the finding: unauthenticated, it was read up to the agent's 16 MiB before its 413
    async with agent_daemon(emulated_agent(mesh_fleet_key=KEY)) as url:
        line, sent = await _chunked_until_answered(url, "/mesh/v1/tasks", 16 << 20)
        text = await _metrics(url)
    assert line.startswith(b"HTTP/1.1 413 "), line
    assert MAX_BODY < sent <= 2 * MAX_BODY, f"sent {sent} bytes before the 413"
    assert _metric(text, "hetmesh_http_limited_total", "body_too_large") == 1


async def test_a_chunked_api_body_is_refused_after_about_max_body_bytes(
    emulated_agent: Callable[..., AgentConfig], agent_daemon: Serve
) -> None:
    cap = 256 * 1024
    async with agent_daemon(emulated_agent(max_body_bytes=cap)) as url:
        line, sent = await _chunked_until_answered(url, "/v1/tasks", 16 << 20)
        declared = await asyncio.to_thread(_post_declared, url, cap + 1)
    assert line.startswith(b"HTTP/1.1 413 "), line
    assert cap < sent <= 2 * cap, f"sent {sent} bytes before the 413"
    assert declared.startswith(b"HTTP/1.1 413 ")
    assert b"request body too large: 262145 bytes, over the limit of 262144" in declared


def _post_declared(url: str, length: int) -> bytes:
    """Send only the head of a POST declaring ``length`` bytes; return the answer."""
    port = _port(url)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(
            f"POST /v1/tasks HTTP/1.1\r\nHost: a\r\nContent-Length: {length}\r\n\r\n".encode()
        )
        return s.recv(4096)


@pytest.fixture
def hub_url(hub_config: Callable[..., Any]) -> Callable[..., AbstractAsyncContextManager[str]]:
    from cloud_hub.hub import server

    @contextlib.asynccontextmanager
    async def serve(**changes: Any) -> AsyncIterator[str]:
        config = hub_config(**changes)
        stop = asyncio.Event()
        task = asyncio.create_task(server.serve(config, stop))
        try:
            while not config.state_path.exists():
                assert not task.done(), "the hub exited at start"
                await asyncio.sleep(0.02)
            yield f"http://127.0.0.1:{json.loads(config.state_path.read_text())['port']}"
        finally:
            stop.set()
            await task

    return serve


async def test_the_hub_has_the_same_limits(hub_url: Callable[..., Any]) -> None:
    async with hub_url(header_timeout_s=0.3, max_connections=10) as url:
        # 2 past the cap are evicted at once, the rest closed by the header timeout
        served, text = await _flooded(url, 12, 5, settle_s=0.6)
    assert served == 5
    evicted = _metric(text, "hetmesh_http_limited_total", "evicted")
    late = _metric(text, "hetmesh_http_limited_total", "header_timeout")
    assert evicted >= 2 and late >= 1
    assert evicted + late == 12  # every slow head was cut, one way or the other


async def test_the_hub_reads_its_limits_from_the_api_table_and_environment(tmp_path: Path) -> None:
    from cloud_hub.hub.config import ConfigError, load_config

    path = tmp_path / "hub.toml"
    path.write_text("[api]\nheader_timeout_s = 4\nmax_connections = 100\n")
    config = load_config(path, {"CLOUD_HUB_BODY_TIMEOUT_S": "30"})
    assert (config.header_timeout_s, config.body_timeout_s, config.max_connections) == (4, 30, 100)
    with pytest.raises(ConfigError, match=r"max_connections must be 1\.\.1000000"):
        load_config(path, {"CLOUD_HUB_MAX_CONNECTIONS": "-1"})
