"""The README is executed: every shell block of README.md and docs/*.md that is meant to run.

A block is a ```sh fence (or ```python: a script run with the clone's ``.venv/bin/python``);
every fence in these files carries a language, so none escapes this classification. A
block runs unless the line before its fence marks it:

- ``<!-- not run: REASON -->``: installs, sudo/systemd, the demo or benchmarks that run for
  minutes, a daemon stopped by hand; the reason is required.
- ``<!-- serves: agent -->`` / ``<!-- serves: hub -->``: a daemon. The test starts the block
  as written in the background, waits until the service's state file names its port and
  ``/v1/health`` answers there, restarts it when a later block rewrote its config (as an
  operator would), and at the end stops it with SIGINT: it must exit 0, leaving no process.
- ``<!-- run: one box per line -->``: each line is another machine; the first is the box the
  services run on, each further line gets a fresh home.
- ``<!-- synopsis -->``: a usage summary; its lines without placeholders (``[``, ``|`` or an
  upper-case word such as ``MODEL``) run, with the virtualenv's ``bin`` on PATH as on a box
  where the package is installed.

Everything runs as a new user would from a fresh clone: the working directory is a
temporary clone (links to the repository's files, ``.venv`` -> the installed package's
environment), HOME is a temporary directory (the agent's ``~/.config/hetmesh`` and data,
the hub's secrets), PATH lacks the virtualenv (``.venv/bin/`` prefixes must be written), and
all runs in a fresh network namespace, so the default ports 8470 and 8480 are free, mDNS
stays inside and nothing leaves loopback. Each command has a timeout, must exit 0 with
output and no traceback, and must print what its ``# comment`` says (CLAIMS). Placeholders
are filled from earlier output: ``TASK_ID`` is the id the last ``submit`` printed,
``THE-SAME-KEY`` the first box's fleet key.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.readme_blocks import DOCS, MARK, ROOT, blocks, shell_blocks
from tests.support.readme_session import Session


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace with only loopback, up."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    name = f"hmreadme-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"network namespaces unavailable: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A fresh clone as seen by its user: the repository's files, `.venv` the installed one."""
    if not (Path(sys.prefix) / "bin" / "edge-agent").exists():
        pytest.skip(f"no edge-agent in {sys.prefix}/bin: run the tests from the package's venv")
    clone = tmp_path / "hetmesh"
    clone.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in {".venv", ".git", "build"} and not entry.name.endswith(".egg-info"):
            (clone / entry.name).symlink_to(entry)
    (clone / ".venv").symlink_to(sys.prefix)
    return clone


def test_every_fence_is_classified() -> None:
    """Every fence names its language, every mark is one the runner knows, all sh is bash."""
    for doc in DOCS:
        for block in blocks(doc):
            assert block.lang, (
                f"{block.where}: a fence without a language: sh (runs, or mark it"
                " <!-- not run: WHY -->; see this file's docstring), text, json, python, ..."
            )
            if block.lang in ("sh", "python") and block.mark:
                assert MARK.match(block.mark), f"{block.where}: unknown mark {block.mark!r}"
            if block.lang == "sh" and block.mark != "<!-- synopsis -->":  # run or not: valid
                parsed = subprocess.run(
                    ["bash", "-n"], input=block.text.encode(), capture_output=True
                )
                assert parsed.returncode == 0, f"{block.where}: {parsed.stderr.decode()}"
    assert any(not b.mark for b in shell_blocks()), "no block runs"


def inline_commands() -> Iterator[tuple[Path, str]]:
    """Yield each `edge-agent ...` / `cloud-hub ...` code span of the prose (one line each)."""
    span = re.compile(r"`(?:\.venv/bin/)?((?:edge-agent|cloud-hub) [^`]+)`")
    for doc in DOCS:
        for words in span.findall(doc.read_text(encoding="utf-8")):
            yield doc, words


def test_prose_commands_parse_and_name_shipped_models() -> None:
    """Commands quoted in the prose use real options, and models that ship with the package."""
    from cloud_hub.cli import cli as hub_cli
    from edge_agent.cli import cli as agent_cli

    parsers = {"edge-agent": agent_cli.build_parser(), "cloud-hub": hub_cli.build_parser()}
    shipped = {p.stem for p in (ROOT / "models").glob("*.onnx")}
    seen = 0
    for doc, command in inline_commands():
        prog, *words = shlex.split(command.replace("[", "").replace("]", ""))
        usage = io.StringIO()
        try:
            with contextlib.redirect_stderr(usage):
                args = parsers[prog].parse_args(words)
        except SystemExit:
            if "arguments are required" in usage.getvalue():  # names the command, no more
                continue
            pytest.fail(f"{doc.name}: `{command}`: {usage.getvalue().strip()}")
        models = [args.model] if hasattr(args, "model") else getattr(args, "tasks", [])
        for model in models:  # a name, a file (MODEL.onnx, CONTRACT.json) or a placeholder
            assert model.isupper() or "." in model or model in shipped, (
                f"{doc.name}: `{command}`: no model {model!r}"
            )
        seen += 1
    assert seen > 10


@pytest.mark.slow
def test_readme_commands_run_as_written(netns: str, clone: Path, tmp_path: Path) -> None:
    """Every block meant to run runs, against a real agent and hub it starts, as the text says."""
    home = tmp_path / "home"
    home.mkdir()
    session = Session(netns, clone, home)
    try:
        for block in shell_blocks():
            if not block.mark.startswith("<!-- not run:"):
                session.execute(block)
    finally:
        for name in list(session.services):
            if problem := session.stop(name):
                session.failures.append(f"stopping {name}: {problem}")
        left = subprocess.run(
            ["ip", "netns", "pids", netns], capture_output=True, text=True
        ).stdout.split()
        for pid in left:  # processes the blocks started and left behind
            os.kill(int(pid), signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    assert {"agent", "hub"} <= {
        MARK.match(b.mark)["service"] for b in shell_blocks() if b.mark.startswith("<!-- serves")
    }
    assert not session.failures, "\n\n".join(session.failures)
