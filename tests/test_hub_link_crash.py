"""``kill -9`` of an agent mid-work, with real ``cloud-hub run`` and ``edge-agent run`` processes.

Everything the agent recorded (decisions, task outcomes) reaches the hub exactly once: the
hub's records equal the agent's own tables, row for row, with no gap in the seqs.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import edge_agent
from tests.support.spawned import spawn

TOKEN = "crash-join"
SLOW = {"semantics": {"gflops": 5.0}, "requirements": {"kinds": ["cpu"]}}
N_TASKS = 24


def call(url: str, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def until(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
    return value


def rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


@pytest.mark.slow
def test_kill_9_mid_work_syncs_every_record_exactly_once(tmp_path: Path) -> None:
    root = str(Path(edge_agent.__file__).resolve().parents[1])
    (tmp_path / "empty.toml").touch()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("EDGE_AGENT", "CLOUD_HUB"))}
    base |= {"PYTHONPATH": root, "EDGE_AGENT_CONFIG": str(tmp_path / "empty.toml")}
    hub_env = base | {
        "CLOUD_HUB_CONFIG": str(tmp_path / "empty.toml"),
        "CLOUD_HUB_JOIN_TOKEN": TOKEN,
        "CLOUD_HUB_HEARTBEAT_INTERVAL_S": "0.1",
    }
    hub_argv = ["cloud_hub.cli", "run", "--port", "0", "--data-dir", str(tmp_path / "hub")]
    hub, hub_url = spawn(hub_argv, hub_env, tmp_path / "hub" / "hub.json")
    agent_env = base | {
        "EDGE_AGENT_HUB_URL": hub_url,
        "EDGE_AGENT_HUB_JOIN_TOKEN": TOKEN,
        "EDGE_AGENT_HUB_AGENT_ID": "crashy",
        "EDGE_AGENT_HUB_RETRY_S": "0.1",
        "EDGE_AGENT_TELEMETRY_INTERVAL_S": "0",
    }
    data = tmp_path / "agent"
    agent_argv = ["edge_agent.cli", "run", "--port", "0", "--data-dir", str(data)]
    agent_argv += ["--profile", "rk3588"]
    agent, url = spawn(agent_argv, agent_env, data / "agent.json")
    try:
        for _ in range(N_TASKS):
            call(f"{url}/v1/tasks", "POST", SLOW)

        def some_synced_some_running() -> bool:
            tasks = call(f"{url}/v1/tasks?limit=1000")["tasks"]
            states = Counter(t["state"] for t in tasks)
            synced = call(f"{hub_url}/v1/agents")["agents"]
            return bool(states["done"] and states["done"] < N_TASKS and synced[0]["applied"])

        until(some_synced_some_running)
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
        agent, url = spawn(agent_argv, agent_env, data / "agent.json")
        until(
            lambda: all(t["state"] == "done" for t in call(f"{url}/v1/tasks?limit=1000")["tasks"])
        )
        until(lambda: call(f"{url}/v1/health")["hub"]["pending"] == 0)
        until(
            lambda: (
                len(rows(tmp_path / "hub" / "hub.db", "SELECT 1 FROM records WHERE kind = 'task'"))
                == N_TASKS
            )
        )
        [row] = call(f"{hub_url}/v1/agents")["agents"]
    finally:
        for proc in (agent, hub):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=15)
    decisions = Counter(t for (t,) in rows(data / "agent.db", "SELECT task_id FROM decisions"))
    assert any(n == 2 for n in decisions.values())  # the kill interrupted placed work
    held = rows(tmp_path / "hub" / "hub.db", "SELECT seq, kind, payload FROM records ORDER BY seq")
    assert [seq for seq, _, _ in held] == list(range(1, len(held) + 1))
    on_hub = Counter(json.loads(p)["task_id"] for _, k, p in held if k == "decision")
    outcomes = Counter(json.loads(p)["id"] for _, k, p in held if k == "task")
    assert on_hub == decisions and set(outcomes.values()) == {1} and len(outcomes) == N_TASKS
    assert row["lost"] == 0 and row["duplicates"] == 0
