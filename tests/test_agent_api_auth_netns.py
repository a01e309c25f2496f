"""The API token on a real LAN bind: `edge-agent run` on 10.99.0.11 in its own network
namespace (``[api] host`` a LAN address, ``auth`` left at "auto"), attacked from another host
of the LAN, and used by the operator's `edge-agent` commands on the box (root; skipped
otherwise).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_agent.api_token import bearer, read_token
from edge_agent.mesh.netns_fleet import Fleet
from edge_agent.mesh.netns_processes import AgentProcess

pytestmark = pytest.mark.slow
KEY_TEXT = "api-auth-netns-fleet-key-0000000"
TASK = {"semantics": {"gflops": 0.1}, "requirements": {"kinds": ["cpu"]}}


@pytest.fixture(scope="module")
def lan(netns_fleet: Callable[..., Fleet[AgentProcess]]) -> Fleet[AgentProcess]:
    """One agent on host 0; host 1 (the fleet's spoofer) is the hostile LAN host."""
    return netns_fleet(AgentProcess, (("box", "rk3588"),), KEY_TEXT, {})


def cli(ns: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run `edge-agent ARGV` inside namespace ``ns`` with no EDGE_AGENT_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_AGENT_")}
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "edge_agent.cli", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)


def error(text: str) -> str:
    doc: dict[str, Any] = json.loads(text)
    assert doc["ok"] is False and doc["status"] == 401
    return str(doc["error"])


def test_a_lan_host_without_the_token_gets_401_and_nothing_is_stored(
    lan: Fleet[AgentProcess],
) -> None:
    box, outsider = lan.members["box"], lan.lan.ns(1)
    token_file = box.data_dir / "api_token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600  # made on first start
    token = read_token(token_file)
    assert token is not None

    status, text = box.send("POST", "/v1/tasks", TASK, ns=outsider)
    assert status == 401
    message = error(text)
    assert "Authorization: Bearer <token>" in message and str(token_file) in message
    wrong = bearer("0" * len(token))
    status, text = box.send("POST", "/v1/tasks", TASK, wrong, ns=outsider)
    assert status == 401 and "wrong" in error(text) and token not in text
    status, _ = box.send("POST", "/v1/models?name=evil", {"not": "onnx"}, ns=outsider)
    assert status == 401
    status, _ = box.send("GET", "/v1/openapi.json", ns=outsider)
    assert status == 401
    status, text = box.send("GET", "/v1/health", ns=outsider)
    assert status == 200 and json.loads(text)["ok"] is True

    assert box.call("GET", "/v1/tasks")["tasks"] == []  # with the token: nothing was stored
    assert "evil" not in box.call("GET", "/v1/models")["models"]

    status, text = box.send("POST", "/v1/tasks", TASK, bearer(token), ns=outsider)
    assert status == 202, text  # a client on the LAN given the token is served
    task_id = json.loads(text)["task"]["id"]
    status, _ = box.send("POST", f"/v1/tasks/{task_id}:cancel", ns=outsider)
    assert status == 401
    ids = [t["id"] for t in box.call("GET", "/v1/tasks")["tasks"]]
    assert ids == [task_id]
    assert box.call("GET", f"/v1/tasks/{task_id}")["task"]["state"] != "cancelled"


def test_the_operators_commands_on_the_box_send_the_token(
    lan: Fleet[AgentProcess], tmp_path: Path
) -> None:
    box, outsider = lan.members["box"], lan.lan.ns(1)
    submitted = cli(box.ns, "submit", "tiny_cnn_fp32", "--config", str(box.config))
    assert submitted.returncode == 0, submitted.stderr
    task_id = submitted.stdout.strip()
    listed = cli(box.ns, "tasks", "--config", str(box.config), "--json")
    assert listed.returncode == 0, listed.stderr
    assert task_id in {t["id"] for t in json.loads(listed.stdout)["tasks"]}
    status = cli(box.ns, "status", "--config", str(box.config))
    assert status.returncode == 0 and f"at http://{box.address}:" in status.stdout, status.stderr

    elsewhere = tmp_path / "other.toml"  # another box's config: no token for this agent
    elsewhere.write_text(f'[agent]\ndata_dir = "{tmp_path / "other"}"\n')
    url = f"http://{box.address}:{box.port}"
    refused = cli(outsider, "tasks", "--config", str(elsewhere), "--url", url)
    assert refused.returncode == 2
    assert "agent answered 401" in refused.stderr and "Authorization: Bearer" in refused.stderr
