"""Shared by the agent benchmarks (not a benchmark): start an agent process, burst tasks at it.

The agent runs as ``python -m edge_agent.cli run`` in its own process on 127.0.0.1 and an
ephemeral port, emulating a board profile, with the source tree this file sits in on its path.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: A task an emulated RK3588 finishes in well under a millisecond.
FAST_TASK: dict[str, Any] = {"semantics": {"gflops": 0.001}, "task_class": "bench"}


def spawn(data_dir: Path, profile: str | None = "rk3588") -> tuple[subprocess.Popen[bytes], int]:
    """Start an agent on an ephemeral loopback port (``profile`` None: probe this machine)."""
    state = data_dir / "agent.json"
    config = data_dir.parent / "agent.toml"
    config.touch()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "EDGE_AGENT_CONFIG": str(config),
    }
    cmd = [sys.executable, "-m", "edge_agent.cli", "run", "--host", "127.0.0.1", "--port", "0"]
    cmd += ["--data-dir", str(data_dir)] + (["--profile", profile] if profile else [])
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
