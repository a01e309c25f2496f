"""Fixtures shared between test files.

``chromium``: Debian's chromium driven by Playwright, for the browser tests (the hub's dashboard,
the agent's status page). Needs ``apt-get install chromium`` and ``pip install playwright``
(no ``playwright install``: the system browser is used). Skipped with the reason when either
is missing, unless ``HETMESH_REQUIRE_BROWSER=1`` (or ``HETMESH_REQUIRE_ALL=1``), where a
missing browser fails.

``emulated_agent``: a maker of agent configs for an emulated board in the test's ``tmp_path``.
``hub_config``: a maker of hub configs in ``tmp_path / "hub"`` with known join and admin tokens.
``joined_agent``: ``joined_agent(hub_url, agent_id)``, an emulated agent's config that joins
that hub with ``hub_config``'s join token.

``until``: ``await until(check, timeout)``, polling ``check()`` (sync or async) until it is
truthy (its value).

``get_json``: ``await get_json(session, url)``, a GET that must answer 200; its JSON body.
``final_task``: ``await final_task(session, agent_url, task_id)``, the agent's task once it is
done or failed.
``peer_online``: ``await peer_online(session, agent_url, peer_id)``, once the agent's
``/v1/peers`` shows that mesh peer online.

``agent_daemon``: ``async with agent_daemon(config) as base_url``: `edge-agent run`'s
``daemon.serve`` (real mDNS mesh, HTTP, SQLite), stopped gracefully on exit.
``carbon_series_file``: ``write(path, start, values)``, an hourly carbon series CSV.

``recorder``: a real ``aiohttp.ClientSession`` (``recorder.session``) that keeps each request
as sent (``recorder.sent``, ``recorder.last(url_end)``: URL, headers, body bytes), the capture
of the attack tests; ``replay``: ``await replay(sent, port, source)``, sending a capture
unchanged to ``127.0.0.1:port`` from the loopback address ``source``.
``metric``: ``await metric(session, url, 'name_total{label="value"}')``, that sample's value
on the ``/metrics`` page at ``url`` (0.0 when absent).

``hub_server``: ``hub_server(port=0)``, a ``Server`` of the hub (``QUICK_HUB`` heartbeats);
``agent_server``: ``agent_server(hub_url, name="a1", **changes)``, a ``Server`` of a
``joined_agent``; ``reads``: the hub link tests' reads (``tests/support/hub_link.py``).

``netns_fleet``: starts ``edge_agent.mesh.netns_fleet.start_fleet`` for the module (root; skipped
with the reason where network namespaces cannot be made, failed instead with
``HETMESH_REQUIRE_NETNS=1`` or ``HETMESH_REQUIRE_ALL=1``).

Fail, don't skip, in CI: with ``HETMESH_REQUIRE_ALL=1`` (set in ``.ci/run``) every skipped
test is reported as failed (a real component it needs, such as network namespaces, the
browser, the compiled kernel or onnxruntime, could not run), except tests marked
``@pytest.mark.platform``: a branch for another kind of machine (an NVIDIA driver, an
architecture), whose counterpart runs here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from cloud_hub.hub.api import make_app as hub_app
from cloud_hub.hub.config import HubConfig
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.web.api import make_app as agent_app
from edge_agent.mesh.netns import NetnsUnavailable
from edge_agent.mesh.netns_fleet import start_fleet
from edge_agent.placement import native_available
from tests.support import http_capture, polling
from tests.support.agent_daemon import serve_agent
from tests.support.http_capture import Recorder
from tests.support.hub_link import QUICK_HUB, AgentServer, GetJson, HubServer, Reads, Server

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


def required(component: str) -> bool:
    """Return True when a missing ``component`` must fail the test rather than skip it."""
    env = os.environ
    return env.get("HETMESH_REQUIRE_ALL") == "1" or env.get(f"HETMESH_REQUIRE_{component}") == "1"


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``platform`` marker (a skip that HETMESH_REQUIRE_ALL allows)."""
    config.addinivalue_line(
        "markers", "platform: runs on one kind of machine only; its skip elsewhere is allowed"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """With ``HETMESH_REQUIRE_ALL=1``, report a skipped test (not ``platform``) as failed."""
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and not hasattr(report, "wasxfail")
        and os.environ.get("HETMESH_REQUIRE_ALL") == "1"
        and item.get_closest_marker("platform") is None
    ):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under HETMESH_REQUIRE_ALL=1, which fails skips: {reason}"


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
        if required("BROWSER"):
            pytest.fail(missing)
        pytest.skip(missing)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture(
    params=[
        pytest.param(
            "native",
            marks=pytest.mark.skipif(not native_available(), reason="compiled kernel not built"),
        ),
        "python",
    ]
)
def backend(request: pytest.FixtureRequest) -> str:
    """Each placement kernel backend in turn: the compiled kernel, then its Python twin."""
    return str(request.param)


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


@pytest.fixture
def hub_config(tmp_path: Path) -> Callable[..., HubConfig]:
    """Return a maker of hub configs in ``tmp_path / "hub"`` on a free loopback port.

    Join token ``"join-me"``, admin token ``"admin-me"`` (read them from the config); keyword
    arguments replace any setting.
    """

    def make(**changes: Any) -> HubConfig:
        base = HubConfig(
            data_dir=tmp_path / "hub", port=0, join_token="join-me", admin_token="admin-me"
        )
        return base.replace(**changes)

    return make


@pytest.fixture
def joined_agent(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    hub_config: Callable[..., HubConfig],
) -> Callable[..., AgentConfig]:
    """Return ``joined_agent(hub_url, agent_id="a1", **changes)``: ``emulated_agent``'s config
    in ``tmp_path / agent_id`` that joins the hub at ``hub_url`` as ``agent_id`` with the
    ``hub_config`` join token, retrying every 0.05 s; keyword arguments replace any setting."""
    token = hub_config().join_token

    def make(hub_url: str, agent_id: str = "a1", **changes: Any) -> AgentConfig:
        joined = emulated_agent(
            data_dir=tmp_path / agent_id,
            hub_url=hub_url,
            hub_join_token=token,
            hub_agent_id=agent_id,
            hub_retry_s=0.05,
        )
        return joined.replace(**changes)

    return make


@pytest.fixture
def agent_daemon() -> Callable[[AgentConfig], AbstractAsyncContextManager[str]]:
    """Return ``serve(config)``: a real agent daemon (mDNS mesh, HTTP, SQLite) as an async
    context manager that yields its base URL and stops the daemon gracefully on exit."""
    return serve_agent


#: The mesh fleet key of ``site_agent``'s agents.
SITE_KEY = "hub-moves-test-fleet-key-0000000"


@pytest.fixture
def site_agent(joined_agent: Callable[..., AgentConfig]) -> Callable[..., AgentConfig]:
    """Return ``site_agent(name, hub_url, **changes)``: a ``joined_agent`` (hub id ``name``;
    ``hub_url`` "" joins no hub) in the mesh of SITE_KEY as ``mesh-NAME``: its mesh id
    differs from its hub id on purpose."""

    def make(name: str, hub_url: str, **changes: Any) -> AgentConfig:
        mesh = {
            "mesh_fleet_key": SITE_KEY,
            "mesh_agent_id": f"mesh-{name}",
            "mesh_heartbeat_s": 0.3,
        }
        return joined_agent(hub_url, name, **mesh).replace(**changes)

    return make


@pytest.fixture
def hub_running(
    hub_config: Callable[..., HubConfig],
) -> Callable[[], AbstractAsyncContextManager[tuple[Any, str]]]:
    """Return ``hub_running()``: serve a hub (heartbeats every 0.2 s, re-evaluation only when
    forced with ``?fresh=1``) on loopback; yield (its aiohttp app, its URL)."""
    from aiohttp import web

    from cloud_hub.hub.api import make_app

    @contextlib.asynccontextmanager
    async def serve() -> AsyncIterator[tuple[web.Application, str]]:
        app = make_app(hub_config(heartbeat_interval_s=0.2, reevaluate_s=3600.0))
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            yield app, f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()

    return serve


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
                if required("NETNS"):
                    pytest.fail(f"network namespaces unavailable (HETMESH_REQUIRE_NETNS): {err}")
                pytest.skip(f"network namespaces unavailable: {err}")

        yield start


@pytest.fixture
def until() -> Callable[..., Any]:
    """Return ``await until(check, timeout=20.0, interval=0.02)``: poll ``check()`` every
    ``interval`` s until truthy (a coroutine it returns is awaited); return that value."""
    return polling.until


@pytest.fixture
def get_json() -> Callable[[aiohttp.ClientSession, str], Awaitable[Any]]:
    """Return ``await get_json(session, url)``: GET ``url``, assert 200, return the JSON."""
    return polling.get_json


@pytest.fixture
def final_task() -> Callable[..., Awaitable[dict[str, Any]]]:
    """Return ``await final_task(session, agent_url, task_id, timeout=20.0)``: poll the agent's
    ``GET /v1/tasks/{id}`` until the task is done or failed; return the task."""
    return polling.final_task


@pytest.fixture
def peer_online() -> Callable[..., Awaitable[None]]:
    """Return ``await peer_online(session, agent_url, peer_id, timeout=20.0)``: poll the
    agent's ``GET /v1/peers`` until it lists ``peer_id`` online."""
    return polling.peer_online


@pytest_asyncio.fixture
async def recorder() -> AsyncIterator[Recorder]:
    """Return a Recorder; its session is closed after the test."""
    rec = Recorder()
    try:
        yield rec
    finally:
        await rec.session.close()


@pytest.fixture
def replay() -> Callable[..., Awaitable[tuple[int, Any]]]:
    """Return ``await replay(sent, port, source="127.0.0.1")``: (status, JSON answer)."""
    return http_capture.replay


@pytest.fixture
def metric() -> Callable[..., Awaitable[float]]:
    """Return ``await metric(session, url, sample)``: a sample's value from a /metrics page
    (``session``: an aiohttp ClientSession or test client), 0.0 when it is absent."""
    return http_capture.metric


@pytest.fixture
def hub_server(hub_config: Callable[..., HubConfig]) -> HubServer:
    """Return ``hub_server(port=0)``: the hub (conftest ``hub_config``, QUICK_HUB) to serve."""

    def make(port: int = 0) -> Server:
        config = hub_config(port=port, **QUICK_HUB)
        return Server(lambda: hub_app(config), port)

    return make


@pytest.fixture
def agent_server(joined_agent: Callable[..., AgentConfig]) -> AgentServer:
    """Return ``agent_server(hub_url, name="a1", **changes)``: a ``joined_agent`` to serve
    (given 1 s to finish its work when stopped)."""

    def make(hub_url: str, name: str = "a1", **changes: Any) -> Server:
        config = joined_agent(hub_url, name, shutdown_grace_s=1.0).replace(**changes)
        return Server(lambda: agent_app(config))

    return make


@pytest.fixture
def reads(get_json: GetJson) -> Reads:
    """Return the hub link tests' reads of the hub and the agent (GETs that must answer 200)."""
    return Reads(get_json)
