"""Corruption is found at start, named, and repairable; one bad row never breaks a listing.

Each fault is made on a real database file: random blocks flipped mid-file, the file
truncated to 0 bytes (its marker present), half the file cut off with its ``-wal`` present,
and a row whose JSON column is garbage. ``edge-agent run`` must refuse the first three with
exit status 2 and one line naming the file and ``edge-agent repair``; the repair salvages
what reads and the agent then starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import edge_agent
from cloud_hub.cli import main as hub_main
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.service import Hub
from cloud_hub.hub.store import HubStore
from cloud_hub.hub.wire import Enrolment
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.store import Store
from edge_agent.placement import Semantics, TaskContract
from edge_agent.storage.integrity import DatabaseDamaged, marker_path

N_TASKS = 1500
PAGE = 4096


def cli(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``edge-agent ARGS`` as a process (the installed package), an empty config."""
    (tmp_path / "agent.toml").touch()
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(edge_agent.__file__).resolve().parents[1]),
        "EDGE_AGENT_CONFIG": str(tmp_path / "agent.toml"),
    }
    cmd = [sys.executable, "-m", "edge_agent.cli", *args]
    return subprocess.run(
        cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, check=False
    )


def refused_start(tmp_path: Path, data: Path) -> str:
    """Start ``edge-agent run`` on ``data``; assert it refuses (exit 2, one line); the line."""
    done = cli(tmp_path, "run", "--port", "0", "--data-dir", str(data), "--profile", "rk3588")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert str(data / "agent.db") in line and f"edge-agent repair --data-dir {data}" in line, line
    assert "restore" in line and "backup" in line, line
    return line


async def populated(data: Path, n: int = N_TASKS) -> None:
    """Make a closed store in ``data`` holding ``n`` tasks."""
    store = Store(data / "agent.db")
    await asyncio.to_thread(store.open)
    contract = TaskContract(Semantics(1.0), task_class="x" * 64)  # rows of some size
    await store.submit([NewTask(contract, f"h{i}") for i in range(n)])
    await asyncio.to_thread(store.close)


def repaired(tmp_path: Path, data: Path) -> str:
    done = cli(tmp_path, "repair", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    return done.stdout


async def listed(
    config: AgentConfig,
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Start the agent on ``config``; return its task listing and health."""
    async with agent_daemon(config) as url, aiohttp.ClientSession() as session:
        async with session.get(f"{url}/v1/tasks?limit=10000") as resp:
            assert resp.status == 200, await resp.text()
            tasks = (await resp.json())["tasks"]
        async with session.get(f"{url}/v1/health") as resp:
            return tasks, await resp.json()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_flipped_blocks_are_refused_then_salvaged(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
) -> None:
    data = tmp_path / "data"
    await populated(data)
    db = data / "agent.db"
    pages = db.stat().st_size // PAGE
    rng = random.Random(7)
    with db.open("r+b") as f:  # three random blocks in the middle third, overwritten
        for page in rng.sample(range(pages // 3, 2 * pages // 3), 3):
            f.seek(page * PAGE)
            f.write(rng.randbytes(PAGE))
    line = refused_start(tmp_path, data)
    assert "is damaged (quick_check:" in line
    report = repaired(tmp_path, data)
    assert "kept the damaged file as" in report and "tasks:" in report
    kept = list(data.glob("agent.db.damaged-*"))
    assert kept and kept[0].stat().st_size == pages * PAGE  # the damaged file, untouched
    tasks, health = await listed(emulated_agent(data_dir=data), agent_daemon)
    assert N_TASKS // 2 < len(tasks) < N_TASKS  # most rows saved, those on the blocks lost
    assert health["status"] == "ok", health


@pytest.mark.slow
@pytest.mark.asyncio
async def test_truncated_to_zero_is_refused_not_started_empty(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
) -> None:
    data = tmp_path / "data"
    await populated(data, n=3)
    assert marker_path(data / "agent.db").exists()
    os.truncate(data / "agent.db", 0)
    line = refused_start(tmp_path, data)
    assert "is empty (0 bytes) but existed before" in line
    assert (data / "agent.db").stat().st_size == 0  # nothing written on it
    report = repaired(tmp_path, data)
    assert "starts with an empty database" in report
    tasks, health = await listed(emulated_agent(data_dir=data), agent_daemon)
    assert tasks == [] and health["status"] == "ok"
    assert marker_path(data / "agent.db").exists()  # the new database is marked in turn


@pytest.mark.slow
@pytest.mark.asyncio
async def test_half_truncated_with_wal_is_refused_then_salvaged(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
) -> None:
    live, data = tmp_path / "live", tmp_path / "data"
    await populated(live)  # checkpointed into the file at close
    store = Store(live / "agent.db")
    await asyncio.to_thread(store.open)
    contract = TaskContract(Semantics(2.0))
    await store.submit([NewTask(contract, f"w{i}") for i in range(200)])  # in the -wal
    data.mkdir()
    for name in ("agent.db", "agent.db-wal", "agent.db.exists"):
        shutil.copyfile(live / name, data / name)  # what a crash leaves
    await asyncio.to_thread(store.close)
    assert (data / "agent.db-wal").stat().st_size > 0
    db = data / "agent.db"
    os.truncate(db, db.stat().st_size // PAGE // 2 * PAGE)
    line = refused_start(tmp_path, data)
    assert "is damaged" in line
    report = repaired(tmp_path, data)
    assert "tasks:" in report
    (kept,) = [p for p in data.glob("agent.db.damaged-*") if p.name.endswith("Z")]
    assert kept.with_name(kept.name + "-wal").exists()  # the -wal kept beside its file
    tasks, health = await listed(emulated_agent(data_dir=data), agent_daemon)
    assert health["status"] == "ok", health
    assert len(tasks) > 0


@pytest.mark.asyncio
async def test_bad_row_is_skipped_counted_and_shown(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
) -> None:
    data = tmp_path / "data"
    await populated(data, n=5)
    conn = sqlite3.connect(data / "agent.db")
    (bad,) = conn.execute("SELECT id FROM tasks ORDER BY rowid LIMIT 1").fetchone()
    conn.execute("UPDATE tasks SET state = 'done', contract = '{not json' WHERE id = ?", (bad,))
    conn.commit()
    conn.close()
    config = emulated_agent(data_dir=data)
    async with agent_daemon(config) as url, aiohttp.ClientSession() as session:
        async with session.get(f"{url}/v1/tasks?limit=100") as resp:
            assert resp.status == 200, await resp.text()
            ids = [t["id"] for t in (await resp.json())["tasks"]]
        assert len(ids) == 4 and bad not in ids
        async with session.get(f"{url}/v1/health") as resp:
            health = await resp.json()
        assert health["storage"]["bad_rows"] >= 1
        assert health["status"] == "degraded"
        assert any("damaged task rows skipped" in p for p in health["problems"])
        async with session.get(f"{url}/v1/tasks/{bad}") as resp:
            assert resp.status == 503 and "damaged" in (await resp.json())["error"]


@pytest.mark.asyncio
async def test_hub_skips_a_bad_row_in_its_fleet_view(
    hub_config: Callable[..., HubConfig],
) -> None:
    hub = Hub(hub_config())
    await hub.start()
    try:
        for agent_id in ("good", "bad"):
            await hub.store.enrol(Enrolment(agent_id, "join-me"), time.time())
        conn = sqlite3.connect(hub.config.db_path)
        conn.execute("UPDATE agents SET labels = '{oops' WHERE id = 'bad'")
        conn.commit()
        conn.close()
        snapshot = await hub.snapshot()  # the dashboard's view still builds
        assert [a["id"] for a in snapshot["agents"]] == ["good"]
        health = hub.health()
        assert health["status"] == "degraded" and health["storage"]["bad_rows"] >= 1
    finally:
        await hub.stop()


@pytest.mark.asyncio
async def test_hub_refuses_a_damaged_database(tmp_path: Path) -> None:
    path = tmp_path / "hub" / "hub.db"
    store = HubStore(path)
    await asyncio.to_thread(store.open)
    await asyncio.to_thread(store.close)
    os.truncate(path, 0)
    with pytest.raises(DatabaseDamaged) as caught:
        await asyncio.to_thread(HubStore(path).open)
    assert str(path) in str(caught.value)
    assert f"cloud-hub repair --data-dir {path.parent}" in str(caught.value)


def test_hub_cli_refuses_then_repairs_a_truncated_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "hub"
    store = HubStore(data / "hub.db")
    store.open()
    store.close()
    os.truncate(data / "hub.db", 0)
    (tmp_path / "hub.toml").touch()
    monkeypatch.setenv("CLOUD_HUB_CONFIG", str(tmp_path / "hub.toml"))
    assert hub_main(["run", "--port", "0", "--data-dir", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(data / "hub.db") in err
    assert f"cloud-hub repair --data-dir {data}" in err
    assert hub_main(["repair", "--data-dir", str(data)]) == 0
    assert "starts with an empty database" in capsys.readouterr().out
    assert not marker_path(data / "hub.db").exists()


@pytest.mark.asyncio
async def test_clean_stop_leaves_no_wal(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
) -> None:
    config = emulated_agent()
    async with agent_daemon(config) as url, aiohttp.ClientSession() as session:
        body = {"tasks": [{"semantics": {"gflops": 0.01}}] * 200}
        async with session.post(f"{url}/v1/tasks:batch", json=body) as resp:
            assert resp.status == 202
        assert (config.data_dir / "agent.db-wal").stat().st_size > 100_000  # work in the WAL
    wal = config.data_dir / "agent.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    conn = sqlite3.connect(config.db_path)
    assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 200  # in the file
    conn.close()


@pytest.mark.asyncio
async def test_damage_found_while_running_is_named_in_health(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Callable[[AgentConfig], AbstractAsyncContextManager[str]],
) -> None:
    """Blocks flipped under a running agent: listings answer 503 naming the file and the
    repair, not 500, and the health says the database is damaged."""
    data = tmp_path / "data"
    await populated(data)
    db = data / "agent.db"
    # the rows the blocks are flipped under are cancelled before the agent starts, so it
    # writes none of them: a queued one would be placed and run, its page rewritten into
    # the WAL, which masks the file's damaged copy (on a fast box the whole middle third)
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("UPDATE tasks SET state = 'cancelled', finished_at = submitted_at")
    config = emulated_agent(data_dir=data)
    async with agent_daemon(config) as url, aiohttp.ClientSession() as session:
        pages = db.stat().st_size // PAGE
        with db.open("r+b") as f:
            for page in range(pages // 3, 2 * pages // 3):
                f.seek(page * PAGE)
                f.write(b"\xa5" * PAGE)
        async with session.get(f"{url}/v1/tasks?limit=10000&state=cancelled") as resp:
            assert resp.status == 503, await resp.text()
            error = (await resp.json())["error"]
        assert str(db) in error and f"edge-agent repair --data-dir {data}" in error
        async with session.get(f"{url}/v1/health") as resp:
            health = await resp.json()
        assert health["status"] == "degraded" and health["storage"]["damaged"]
        assert any(
            p.startswith(f"storage: database {db} cannot be read") for p in health["problems"]
        )
