"""Fixtures shared between test files.

``chromium``: Debian's chromium driven by Playwright, for the browser tests (the hub's dashboard,
the agent's status page). Needs ``apt-get install chromium`` and ``pip install playwright``
(no ``playwright install``: the system browser is used). Skipped with the reason when either
is missing, unless ``HETMESH_REQUIRE_BROWSER=1`` (set in CI), where a missing browser fails.

``emulated_agent``: a maker of agent configs for an emulated board in the test's ``tmp_path``.

``until``: ``await until(check, timeout)``, polling ``check()`` until it is truthy (its value).

``agent_daemon``: ``async with agent_daemon(config) as base_url``: `edge-agent run`'s
``daemon.serve`` (real mDNS mesh, HTTP, SQLite), stopped gracefully on exit.
``carbon_series_file``: ``write(path, start, values)``, an hourly carbon series CSV.

``netns_fleet``: starts ``edge_agent.mesh.netns.start_fleet`` for the module (root; skipped
with the reason where network namespaces cannot be made).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from edge_agent.agent.config import AgentConfig
from edge_agent.mesh.netns import NetnsUnavailable, start_fleet

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest_asyncio.fixture
async def chromium() -> AsyncIterator[Any]:
    """Yield a launched headless chromium (a Playwright ``Browser``), closed afterwards."""
    missing = None
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        missing = "the playwright package is not installed (pip install playwright)"
    if missing is None and not shutil.which(CHROMIUM):
        missing = f"{CHROMIUM} is missing (apt-get install chromium)"
    if missing is not None:
        if os.environ.get("HETMESH_REQUIRE_BROWSER") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
def emulated_agent(tmp_path: Path) -> Callable[..., AgentConfig]:
    """Return a maker of agent configs for an emulated RK3588 in ``tmp_path``.

    Deterministic and quick to stop: no service-time jitter, no shutdown grace, no periodic
    telemetry; keyword arguments replace any setting.
    """

    def make(**changes: Any) -> AgentConfig:
        base = AgentConfig(
            data_dir=tmp_path / "data",
            port=0,
            profile="rk3588",
            emulation_jitter=0.0,
            shutdown_grace_s=0.0,
            telemetry_interval_s=0.0,
        )
        return dataclasses.replace(base, **changes)

    return make


@contextlib.asynccontextmanager
async def _serve_agent(config: AgentConfig) -> AsyncIterator[str]:
    """Run ``daemon.serve`` (what `edge-agent run` runs) for ``config``; yield its base URL."""
    from edge_agent.agent import daemon

    stop = asyncio.Event()
    task = asyncio.create_task(daemon.serve(config, stop))
    try:
        deadline = time.monotonic() + 20
        while not config.state_path.exists():
            if task.done():
                task.result()  # raises what stopped it
            assert time.monotonic() < deadline, "agent did not start"
            await asyncio.sleep(0.02)
        port = json.loads(config.state_path.read_text())["port"]
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await task


@pytest.fixture
def agent_daemon() -> Callable[[AgentConfig], AbstractAsyncContextManager[str]]:
    """Return ``serve(config)``: a real agent daemon (mDNS mesh, HTTP, SQLite) as an async
    context manager that yields its base URL and stops the daemon gracefully on exit."""
    return _serve_agent


def _write_series(path: Path, start: float, values: list[float]) -> Path:
    rows = ["timestamp,avg_ci_g_per_kwh"]
    for i, v in enumerate(values):
        rows.append(f"{datetime.fromtimestamp(start + i * 3600.0, UTC).isoformat(sep=' ')},{v}")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def carbon_series_file() -> Callable[[Path, float, list[float]], Path]:
    """Return ``write(path, start, values)``: an hourly carbon series CSV from Unix ``start``."""
    return _write_series


@pytest.fixture(scope="module")
def netns_fleet() -> Iterator[Callable[..., Any]]:
    """Return a starter of ``start_fleet(...)`` fleets that end with the test module."""
    with contextlib.ExitStack() as stack:

        def start(*args: Any) -> Any:
            try:
                return stack.enter_context(start_fleet(*args))
            except NetnsUnavailable as err:
                pytest.skip(f"network namespaces unavailable: {err}")

        yield start


async def _until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.02)
    return value


@pytest.fixture
def until() -> Callable[..., Any]:
    """Return ``await until(check, timeout=20.0)``: poll ``check()`` until truthy; its value."""
    return _until
