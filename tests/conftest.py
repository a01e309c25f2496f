"""Fixtures shared between test files.

``chromium``: Debian's chromium driven by Playwright, for the browser tests (the hub's dashboard,
the agent's status page). Needs ``apt-get install chromium`` and ``pip install playwright``
(no ``playwright install``: the system browser is used). Skipped with the reason when either
is missing, unless ``HETMESH_REQUIRE_BROWSER=1`` (set in CI), where a missing browser fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

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
