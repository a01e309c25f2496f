"""Shared by the agent benchmarks (not a benchmark): start an agent process, send it tasks.

The agent runs as ``python -m edge_agent.cli run`` in its own process on 127.0.0.1 and an
ephemeral port, emulating a board profile. It is the INSTALLED package (reinstall after a
change, as for the tests), so that the compiled placement kernel is the one measured: the
source tree holds no built kernel and would silently run the pure-Python twin. The null
server (``bench_null_server.py``) starts the same way, for the floor beside the agent.
Clients are plain HTTP/1.1 on asyncio streams (requests pre-encoded), so that their own CPU
time disturbs the server as little as possible on a small machine.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
#: A task an emulated RK3588 finishes in well under a millisecond.
FAST_TASK: dict[str, Any] = {"semantics": {"gflops": 0.001}, "task_class": "bench"}


def spawn(data_dir: Path, profile: str | None = "rk3588") -> tuple[subprocess.Popen[bytes], int]:
    """Start an agent on an ephemeral loopback port (``profile`` None: probe this machine)."""
    cmd = [sys.executable, "-m", "edge_agent.cli", "run", "--host", "127.0.0.1", "--port", "0"]
    cmd += ["--data-dir", str(data_dir)] + (["--profile", profile] if profile else [])
    return _start(cmd, data_dir)


def spawn_null(data_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start the null aiohttp + SQLite server (bench_null_server.py) on a loopback port."""
    return _start(
        [sys.executable, str(ROOT / "benchmarks" / "bench_null_server.py"), str(data_dir)], data_dir
    )


def _start(cmd: list[str], data_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Run ``cmd`` (it writes ``data_dir/agent.json`` once listening); return it and its port."""
    state = data_dir / "agent.json"
    config = data_dir.parent / "agent.toml"
    config.touch()
    env = {**os.environ, "EDGE_AGENT_CONFIG": str(config)}
    env.pop("PYTHONPATH", None)  # the installed package (see the module docstring)
    proc = subprocess.Popen(cmd, env=env, cwd=data_dir.parent, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the agent exited with status {proc.returncode} at start-up")
        try:
            doc = json.loads(state.read_text())
            if doc["pid"] == proc.pid:
                return proc, int(doc["port"])
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError("the agent did not start within 60 s")


def cpu_s(pid: int) -> float:
    """Return the CPU seconds (user + system, every thread) process ``pid`` has used (Linux)."""
    return stat_cpu_s(Path(f"/proc/{pid}/stat"))


def stat_cpu_s(stat: Path) -> float:
    """Return the CPU seconds (user + system) a ``/proc`` stat file (a process's, or a
    thread's ``/proc/PID/task/TID/stat``) reports; OSError once it has gone."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workdir() -> tempfile.TemporaryDirectory[str]:
    """Return a temporary directory for one benchmark's agent data."""
    return tempfile.TemporaryDirectory(prefix="hetmesh-bench-")


async def burst(
    port: int, n: int, key_prefix: str, on_ack: Callable[[int], None] | None = None
) -> list[tuple[str, str, float, float]]:
    """POST ``n`` tasks at once, one connection each; return (key, id, sent, answered) per 202.

    A plain HTTP/1.1 client on asyncio streams (requests pre-encoded) so that the client's
    own CPU time disturbs the agent as little as possible on a small machine. A request that
    gets no answer (the agent was killed) is left out: it was not acknowledged.
    """
    body = json.dumps(FAST_TASK).encode()
    acked: list[tuple[str, str, float, float]] = []

    async def one(i: int) -> None:
        key = f"{key_prefix}-{i}"
        head = (
            f"POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nIdempotency-Key: {key}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        sent = time.time()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head + body)
            answer = await reader.read()
            writer.close()
        except OSError:
            return
        status, _, rest = answer.partition(b"\r\n")
        if b" 202 " in status:
            doc = json.loads(rest.partition(b"\r\n\r\n")[2])
            acked.append((key, doc["task"]["id"], sent, time.time()))
            if on_ack is not None:
                on_ack(len(acked))

    await asyncio.gather(*(one(i) for i in range(n)))
    return acked


def request(port: int, path: str, body: bytes, key: str | None = None) -> bytes:
    """Return a pre-encoded keep-alive POST of a JSON ``body``."""
    extra = f"Idempotency-Key: {key}\r\n" if key else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Read one HTTP/1.1 response with a Content-Length; return (status, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


async def keepalive(
    port: int, n: int, connections: int, seconds: float = 0.0
) -> list[tuple[str, float]]:
    """Submit over ``connections`` keep-alive connections, one request in flight on each.

    ``n`` tasks in all, or (``seconds`` > 0) as many as fit in ``seconds``. Return (task id,
    sent) per 202. Each connection is a bare protocol (``_Lane``): the request is
    pre-encoded and each answer parsed where it lands, so the generator, on the same cores
    as the server, spends as little CPU per request as it can (``run_load`` adds uvloop).
    """
    msg = request(port, "/v1/tasks", json.dumps(FAST_TASK).encode())
    acked: list[tuple[str, float]] = []
    left = [n]
    stop_at = time.monotonic() + seconds

    def more() -> bool:
        if seconds > 0:
            return time.monotonic() < stop_at
        left[0] -= 1
        return left[0] >= 0

    loop = asyncio.get_running_loop()
    lanes = []
    for _ in range(connections):
        done: asyncio.Future[None] = loop.create_future()
        await loop.create_connection(lambda d=done: _Lane(msg, acked, more, d), "127.0.0.1", port)
        lanes.append(done)
    await asyncio.gather(*lanes)
    return acked


class _Lane(asyncio.Protocol):
    """One keep-alive connection of ``keepalive``: send, read the answer, send again."""

    def __init__(
        self,
        msg: bytes,
        acked: list[tuple[str, float]],
        more: Callable[[], bool],
        done: asyncio.Future[None],
    ) -> None:
        self.msg, self.acked, self.more, self.done = msg, acked, more, done
        self.buf = b""
        self.sent = 0.0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._next()

    def _next(self) -> None:
        assert self.transport is not None
        if not self.more():
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)
            return
        self.sent = time.time()
        self.transport.write(self.msg)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].lower() + b"\r\n"
        at = head.find(b"\r\ncontent-length:")
        length = int(head[at + 17 : head.find(b"\r\n", at + 2)]) if at >= 0 else 0
        if len(self.buf) < end + 4 + length:
            return
        body, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
        if head[9:12] == b"202":
            self.acked.append((json.loads(body)["task"]["id"], self.sent))
        self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():  # closed while a request was in flight
            self.done.set_exception(exc or ConnectionError("the server closed the connection"))


def run_load(load: Awaitable[T]) -> T:
    """Run a client load on uvloop where installed (the agent's own event loop, and a
    cheaper one for a generator sharing the server's cores), else on asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(load)  # type: ignore[arg-type]
    return uvloop.run(load)  # type: ignore[arg-type]


def distinct_task(i: int, salt: int = 0) -> dict[str, Any]:
    """Return the ``i``-th of a batch of different tiny contracts: its own gflops, one of
    three priorities, and a deadline on every other task (so no two share a contract).
    Another ``salt`` (up to a million) moves every gflops a little: another batch's."""
    task: dict[str, Any] = {
        "semantics": {"gflops": 0.001 + i * 1e-6 + salt * 1e-12},
        "task_class": "bench",
        "priority": i % 3,
    }
    if i % 2:
        task["requirements"] = {"deadline_s": 5.0 + i * 0.01}
    return task


async def batch(
    port: int, n: int, distinct: bool = False, salt: int = 0
) -> list[tuple[str, float]]:
    """Submit ``n`` tasks in one ``POST /v1/tasks:batch``; return (task id, sent) per task.

    ``distinct``: every task a different contract (``distinct_task``), not ``n`` copies of
    ``FAST_TASK``, so that nothing per contract kind can be reused across the batch (nor
    across batches given different ``salt``)."""
    tasks = [distinct_task(i, salt) for i in range(n)] if distinct else [FAST_TASK] * n
    body = json.dumps({"tasks": tasks}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = time.time()
    writer.write(request(port, "/v1/tasks:batch", body))
    status, doc = await answer(reader)
    writer.close()
    if status != 202:
        raise RuntimeError(f"batch refused ({status}): {doc[:200]!r}")
    return [(t["id"], sent) for t in json.loads(doc)["tasks"]]


def placed_at(data_dir: Path) -> dict[str, float | None]:
    """Return task id -> placed_at from a (stopped or running) server's SQLite file."""
    db = sqlite3.connect(f"file:{data_dir / 'agent.db'}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT id, placed_at FROM tasks").fetchall())
    finally:
        db.close()


def busy(data_dir: Path) -> int:
    """Return how many of an agent's tasks still wait to be placed or run (its SQLite file)."""
    db = sqlite3.connect(f"file:{data_dir / 'agent.db'}?mode=ro", uri=True)
    try:
        sql = "SELECT count(*) FROM tasks WHERE state IN ('queued', 'placed', 'running')"
        return int(db.execute(sql).fetchone()[0])
    finally:
        db.close()


def latencies_ms(acked: list[tuple[str, float]], placed: dict[str, float | None]) -> list[float]:
    """Return submit -> placed (ms) of each acknowledged task that was placed."""
    out = []
    for task_id, sent in acked:
        at = placed.get(task_id)
        if at is not None:
            out.append(1e3 * (at - sent))
    return out


def get(port: int, path: str) -> Any:
    """GET a JSON document from the agent (blocking)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
        return json.loads(resp.read())


def percentile(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


class Spy:
    """py-spy sampling one process into a raw (collapsed stacks) file; ``stop`` to write it.

    ``py-spy record --gil -f raw`` on ``pid``: only the thread holding the GIL is sampled,
    so the samples say where the process spends its Python time (SQLite's own C work,
    done without the GIL, is not seen; nor are waits). Sampling pauses the process, so a
    spied run's figures are not the benchmark's: use its shares only. py-spy must be
    installed (``pip install py-spy``) and allowed to ptrace the process (root, or
    ptrace_scope 0).
    """

    def __init__(self, pid: int, out: Path, rate: int = 1000) -> None:
        exe = Path(sys.executable).with_name("py-spy")
        cmd = [str(exe), "record", "-p", str(pid), "-o", str(out), "-r", str(rate)]
        self.proc = subprocess.Popen(
            [*cmd, "-f", "raw", "--nolineno", "--gil"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.out = out
        time.sleep(0.5)  # attached before the load starts

    def stop(self) -> Path:
        """Stop sampling and return the raw file (one ``frame;frame;... count`` per line)."""
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        return self.out


#: Where a sampled stack's CPU goes, by the innermost frame that names a part (first rule
#: that matches, walking from the leaf to the root); anything else is "other".
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("metrics", ("AgentMetrics.", "prometheus_client/")),
    ("outbox rows", ("outbox.py",)),
    ("decision rows", ("decision_row ",)),
    ("kernel call (prepare + place)", ("tiers.py", "placement/batch.py")),
    ("store: accept tasks", ("Store.submit.",)),
    ("store: record placed", ("Store.placed.", "record_placed ")),
    ("sqlite commit", ("Database._commit ",)),
    ("intake parse/validate", ("Intake.", "parse_json_body", "parse.<locals>")),
    ("202 response (task docs, JSON)", ("task_doc", "json_response", "_task_json", "_accepted")),
    ("submission handlers (rest of api.py)", ("web/api.py",)),
    ("executor (runs, starts, finishes)", ("executor.py", "jobs.py", "store_runs.py")),
    ("scheduler (queue, wake-ups, dispatch)", ("scheduler.py", "fairshare.py", "service.py")),
    ("intake queue (coalescer)", ("intake_queue.py",)),
    (
        "http (aiohttp, middlewares, express lane)",
        ("aiohttp/", "http_limits.py", "http_errors.py", "http_express.py"),
    ),
)


def breakdown(raw: Path) -> dict[str, float]:
    """Return each part's share (0..1) of the samples in a py-spy raw file (``Spy``)."""
    counts: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        part = "other"
        for frame in reversed(stack.split(";")):
            found = next((name for name, keys in PARTS if any(k in frame for k in keys)), None)
            if found is not None:
                part = found
                break
        counts[part] = counts.get(part, 0) + int(n)
    total = sum(counts.values()) or 1
    return {k: v / total for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}
