"""Fixtures shared between test files.

``chromium``: Debian's chromium driven by Playwright, for the browser tests (the hub's dashboard,
the agent's status page). Needs ``apt-get install chromium`` and ``pip install playwright``
(no ``playwright install``: the system browser is used). Skipped with the reason when either
is missing, unless ``HETMESH_REQUIRE_BROWSER=1`` (set in CI), where a missing browser fails.

``emulated_agent``: a maker of agent configs for an emulated board in the test's ``tmp_path``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from edge_agent.agent.config import AgentConfig

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
