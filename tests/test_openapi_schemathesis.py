"""schemathesis, with every check, finds no failure against a live agent and a live hub.

Each service is started as an operator would (``edge-agent run`` / ``cloud-hub run`` on port
0, the bound port read from agent.json / hub.json) and the schemathesis CLI tests the document
it serves: examples, coverage, fuzzing and the stateful phase (submit, then get/explain/cancel
by the returned id), positive and negative data. The only allowances are per operation, in
the committed ``schemathesis.toml``, each with its reason. The hub's admin routes get the
admin token so they really run; signed routes answer 401 to the unsigned requests, which the
documents declare. Bounded: a fixed seed and a few examples per operation.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
#: Examples per operation and the seed: a bounded, reproducible run (well under a minute each).
EXAMPLES = 6
SEED = 20261201
ADMIN = "schemathesis-admin-token"

pytestmark = pytest.mark.slow


def _serve(argv: list[str], env: dict[str, str], ready: Path, log: Path) -> Iterator[int]:
    """Start a service, yield the port it wrote to ``ready``, stop it (SIGTERM) afterwards."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() or not ready.read_text().strip():
            assert proc.poll() is None, f"{argv[0]} exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{argv[0]} did not start:\n{log.read_text()}"
            time.sleep(0.1)
        yield int(json.loads(ready.read_text())["port"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _schemathesis(url: str, cwd: Path, *extra: str) -> None:
    """Run schemathesis in ``cwd`` (its cache goes there) with the repository's config."""
    argv = [
        str(BIN / "schemathesis"),
        "--config-file",
        str(ROOT / "schemathesis.toml"),
        "run",
        url,
        "--checks",
        "all",
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        str(SEED),
        "--wait-for-schema",
        "30",
        "--no-color",
        *extra,
    ]
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"schemathesis found failures:\n{done.stdout}\n{done.stderr}"
    assert re.search(r"(\d+) generated, \1 passed", done.stdout), done.stdout


@pytest.fixture
def agent_port(tmp_path: Path) -> Iterator[int]:
    data = tmp_path / "agent"
    argv = [str(BIN / "edge-agent"), "run", "--profile", "rk3588", "--port", "0"]
    env = {"EDGE_AGENT_HOST": "127.0.0.1", "EDGE_AGENT_MESH_FLEET_KEY": secrets.token_hex(32)}
    yield from _serve([*argv, "--data-dir", str(data)], env, data / "agent.json", tmp_path / "a")


@pytest.fixture
def hub_port(tmp_path: Path) -> Iterator[int]:
    data = tmp_path / "hub"
    argv = [str(BIN / "cloud-hub"), "run", "--host", "127.0.0.1", "--port", "0"]
    env = {"CLOUD_HUB_ADMIN_TOKEN": ADMIN, "CLOUD_HUB_JOIN_TOKEN": secrets.token_hex(16)}
    yield from _serve([*argv, "--data-dir", str(data)], env, data / "hub.json", tmp_path / "h")


def test_agent_answers_as_its_document_says(agent_port: int, tmp_path: Path) -> None:
    """Every agent route, the signed mesh routes (mesh on) included, passes every check."""
    _schemathesis(f"http://127.0.0.1:{agent_port}/v1/openapi.json", tmp_path)


def test_hub_answers_as_its_document_says(hub_port: int, tmp_path: Path) -> None:
    """Every hub JSON route passes every check, admin routes with the admin token.

    ``/v1/events`` is left out: it is a server-sent event stream for the dashboard (it never
    ends, and is not JSON); the dashboard's page and stylesheet are not in the document.
    """
    url = f"http://127.0.0.1:{hub_port}/v1/openapi.json"
    _schemathesis(
        url, tmp_path, "--header", f"Authorization: Bearer {ADMIN}", "--exclude-path", "/v1/events"
    )
