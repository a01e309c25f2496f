"""Durability: accepted tasks survive ``kill -9`` of a real agent process and then complete."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import edge_agent

N_TASKS = 24
#: ~65 ms each on the emulated RK3588 CPU: the kill lands while most are unfinished.
SLOW = {"semantics": {"gflops": 5.0}, "requirements": {"kinds": ["cpu"]}}


def call(port: int, method: str, path: str, body: Any = None, key: str = "") -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data, headers, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def spawn(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``edge-agent run`` on an ephemeral port; return the process and its port."""
    data = tmp_path / "data"
    state = data / "agent.json"
    (tmp_path / "agent.toml").touch()
    # the child imports edge_agent exactly as this test process does (installed package, or
    # the source tree when PYTHONPATH points there)
    package_root = str(Path(edge_agent.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": package_root,
        "EDGE_AGENT_CONFIG": str(tmp_path / "agent.toml"),
    }
    cmd = [
        sys.executable,
        "-m",
        "edge_agent.cli",
        "run",
        "--port",
        "0",
        "--data-dir",
        str(data),
        "--profile",
        "rk3588",
    ]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"agent exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        try:
            doc = json.loads(state.read_text())
            if doc["pid"] == proc.pid:
                return proc, int(doc["port"])
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("agent did not start within 20 s")


def stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    proc.send_signal(sig)
    proc.wait(timeout=15)
    if proc.stderr:
        proc.stderr.close()


@pytest.mark.slow
def test_kill_9_loses_no_accepted_task(tmp_path: Path) -> None:
    proc, port = spawn(tmp_path)
    try:
        with ThreadPoolExecutor(8) as pool:
            accepted = list(
                pool.map(
                    lambda i: call(port, "POST", "/v1/tasks", SLOW, key=f"burst-{i}")["task"]["id"],
                    range(N_TASKS),
                )
            )
    finally:
        stop(proc, signal.SIGKILL)
    # what the file held when the kill landed (a GET before the kill races the tasks that
    # finish between the answer and the signal)
    db = sqlite3.connect(tmp_path / "data" / "agent.db")
    try:
        before = dict(db.execute("SELECT id, state FROM tasks").fetchall())
    finally:
        db.close()
    unfinished = {i for i, state in before.items() if state in ("placed", "running")}
    assert unfinished, before  # the kill interrupted work in progress
    proc, port = spawn(tmp_path)
    try:
        retry = call(port, "POST", "/v1/tasks", SLOW, key="burst-0")
        assert retry["task"]["id"] == accepted[0] and retry["created"] is False
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            tasks = call(port, "GET", "/v1/tasks?limit=1000")["tasks"]
            if all(t["state"] == "done" for t in tasks):
                break
            time.sleep(0.05)
        assert sorted(t["id"] for t in tasks) == sorted(accepted)
        assert {t["state"] for t in tasks} == {"done"}
        assert all(t["attempts"] == 2 for t in tasks if t["id"] in unfinished)  # placed again
    finally:
        stop(proc, signal.SIGTERM)
    assert proc.returncode == 0
    assert not (tmp_path / "data" / "agent.json").exists()
