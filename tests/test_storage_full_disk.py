"""A full disk strands no accepted task: writes retry until they land, loops restart, health shows.

The agent's data directory is a small tmpfs the test mounts (root); the disk is filled with a
filler file while 150 accepted tasks are being placed and run, then freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.service import Hub
from cloud_hub.hub.wire import Enrolment
from edge_agent import loops
from edge_agent.agent.config import AgentConfig
from edge_agent.cli import main as cli_main
from edge_agent.storage import db
from edge_agent.storage.db import StorageUnavailable

pytestmark = pytest.mark.asyncio

N_TASKS = 150
#: Opaque and light: 150 of them run for a few seconds on the emulated RK3588, the fill lands early.
TASK = {"semantics": {"gflops": 0.05}}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for the test (skipped where mounting is not allowed)."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Write a filler file until the disk is full; return it."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(chunk)
        with contextlib.suppress(OSError):  # the last few bytes
            while True:
                f.write(b"\0" * 512)
    try:
        (disk / "probe").write_bytes(b"\0" * 4096)
    except OSError as err:
        assert err.errno == errno.ENOSPC
    else:
        raise AssertionError("the disk still takes writes")
    return filler


@pytest.mark.slow
async def test_full_disk_mid_run_strands_no_task(
    small_disk: Path,
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
    until: Callable[..., Any],
    get_json: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(db, "RETRY_MAX_S", 0.1)
    monkeypatch.setattr(loops, "RESTART_FIRST_S", 0.05)
    monkeypatch.setattr(loops, "RESTART_MAX_S", 0.2)
    monkeypatch.setattr(loops, "STABLE_S", 1.0)
    config = emulated_agent(data_dir=small_disk / "data", telemetry_interval_s=0.05)
    async with agent_daemon(config) as url, aiohttp.ClientSession() as session:
        body = {"tasks": [TASK] * N_TASKS}
        async with session.post(f"{url}/v1/tasks:batch", json=body) as resp:
            assert resp.status == 202, await resp.text()
            accepted = [t["id"] for t in (await resp.json())["tasks"]]
        filler = fill(small_disk)

        async def storage_degraded() -> dict[str, Any] | None:
            health = await get_json(session, f"{url}/v1/health")
            storage = [p for p in health["problems"] if p.startswith("storage: ")]
            return health if health["status"] == "degraded" and storage else None

        health = await until(storage_degraded, timeout=10)
        assert "database or disk is full" in health["problem"]
        assert health["storage"]["writable"] is False
        listed = (await get_json(session, f"{url}/v1/tasks?limit=1000"))["tasks"]
        stuck = [t["id"] for t in listed if t["state"] != "done"]
        assert stuck, "every task finished before the disk filled: nothing was tested"
        full_since = time.monotonic()
        while time.monotonic() - full_since < 1.0:  # stays full a while: nothing gives up
            assert (await storage_degraded()) is not None
            await asyncio.sleep(0.05)
        async with session.post(f"{url}/v1/tasks", json=TASK) as resp:
            assert resp.status == 503  # no new work accepted while nothing can be stored
            assert "cannot store data now" in (await resp.json())["error"]
        health = await get_json(session, f"{url}/v1/health")
        assert health["loops"]["agent-telemetry"]["restarts"] >= 1  # died on the full disk
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            assert await asyncio.to_thread(cli_main, ["status", "--url", url]) == 0
        assert f"at {url}: degraded: storage: cannot write" in shown.getvalue()

        filler.unlink()  # space again: no restart, the retried writes land

        async def all_done() -> list[dict[str, Any]] | None:
            tasks = (await get_json(session, f"{url}/v1/tasks?limit=1000"))["tasks"]
            return tasks if {t["state"] for t in tasks} == {"done"} else None

        tasks = await until(all_done, timeout=30)
        assert sorted(t["id"] for t in tasks) == sorted(accepted)
        healthy = await until(
            lambda: _ok(session, get_json, url),
            timeout=10,
        )
        assert healthy["storage"]["writable"] and healthy["storage"]["retrying_writes"] == 0
        telemetry = healthy["loops"]["agent-telemetry"]
        assert telemetry["state"] == "running" and telemetry["restarts"] >= 1


async def _ok(
    session: aiohttp.ClientSession, get_json: Callable[..., Any], url: str
) -> dict[str, Any] | None:
    health = await get_json(session, f"{url}/v1/health")
    return health if health["status"] == "ok" and health["problems"] == [] else None


async def test_hub_health_shows_a_full_disk(
    small_disk: Path, hub_config: Callable[..., HubConfig]
) -> None:
    hub = Hub(hub_config(data_dir=small_disk / "hub"))
    await hub.start()
    try:
        assert hub.health()["status"] == "ok"
        filler = fill(small_disk)
        with pytest.raises(StorageUnavailable):
            for i in range(500):  # until the WAL must grow
                await hub.store.enrol(Enrolment(f"a{i}", "join-me"), time.time())
        health = hub.health()
        assert health["status"] == "degraded" and health["storage"]["writable"] is False
        assert health["problems"][0].startswith("storage: cannot write ")
        assert "database or disk is full" in health["problems"][0]
        filler.unlink()
        await hub.store.enrol(Enrolment("after", "join-me"), time.time())
        assert hub.health()["status"] == "ok" and hub.health()["problems"] == []
    finally:
        await hub.stop()
