"""A finish takes its task's start along when that start has not been written yet.

A tiny task ends before its start's group reached the writer: one write moves its row from
placed to done (with its ``started_at``), the start's future resolving with the finish's
commit; a start no finish comes for is written ``START_LAG_S`` after it was asked for, and
the starts still waiting when the writer runs a finish's op are written by that op.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from edge_agent.agent.core import store_runs
from edge_agent.agent.core.store_runs import Finish
from edge_agent.storage.db import Database
from tests.test_executor_commits import placed_store

pytestmark = pytest.mark.asyncio

SAMPLE = {"kind": "task", "device": "cpu0", "latency_s": 0.001}


def rows(path: Path) -> dict[str, tuple[str, float | None, float | None]]:
    """Return task id -> (state, started_at, finished_at) as the file holds them."""
    with sqlite3.connect(path) as conn:
        found = conn.execute("SELECT id, state, started_at, finished_at FROM tasks").fetchall()
    return {task_id: (state, started, finished) for task_id, state, started, finished in found}


def records(path: Path) -> tuple[int, int]:
    """Return (telemetry rows of tasks, outbox records of tasks) in the file."""
    with sqlite3.connect(path) as conn:
        (samples,) = conn.execute("SELECT count(*) FROM telemetry WHERE kind = 'task'").fetchone()
        (outbox,) = conn.execute("SELECT count(*) FROM outbox WHERE kind = 'task'").fetchone()
    return samples, outbox


def count_commits(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Record the number of ops of every transaction the writer commits from now on."""
    groups: list[list[int]] = []
    commit = Database._commit

    def counted(db: Database, conn, group):  # type: ignore[no-untyped-def]
        groups.append([len(group)])
        return commit(db, conn, group)

    monkeypatch.setattr(Database, "_commit", counted)
    return groups


async def test_a_finish_asked_before_its_start_was_written_is_one_move_placed_to_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.db"
    store, ids = await placed_store(path, 3)
    commits = count_commits(monkeypatch)
    gate = threading.Event()  # the writer is busy (a commit's fsync) until it is set
    busy = store.db.write(lambda db: gate.wait(5))
    asked = time.time()
    starts = [store.started(task_id) for task_id in ids]
    order: list[str] = []
    for task_id, start in zip(ids, starts, strict=True):
        start.add_done_callback(lambda _, t=task_id: order.append(f"start {t}"))
    finishes = [
        store.runs.finished(Finish(task_id, "done", {"n": 1}, None, SAMPLE)) for task_id in ids
    ]
    for task_id, finish in zip(ids, finishes, strict=True):
        finish.add_done_callback(lambda _, t=task_id: order.append(f"finish {t}"))
    await asyncio.sleep(0.05)
    assert not any(f.done() for f in [*starts, *finishes])  # nothing before its commit
    assert {state for state, _, _ in rows(path).values()} == {"placed"}  # never "running"
    assert records(path) == (0, 0)
    gate.set()
    await busy
    assert await asyncio.gather(*finishes) == [True] * 3
    assert await asyncio.gather(*starts) == [True] * 3  # resolved by the finish's commit
    for task_id in ids:  # each start is known before its finish
        assert order.index(f"start {task_id}") < order.index(f"finish {task_id}")
    after = rows(path)
    for task_id in ids:
        state, started, finished = after[task_id]
        assert state == "done" and started is not None and finished is not None
        assert asked <= started <= finished  # when the start was asked for, not the finish
    assert records(path) == (3, 3)
    assert sum(n for [n] in commits) == 2  # the gate's op and the finishes' (no start op)
    await asyncio.to_thread(store.close)


async def test_a_start_no_finish_comes_for_is_written_after_the_lag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_runs, "START_LAG_S", 0.2)
    path = tmp_path / "a.db"
    store, ids = await placed_store(path, 2)
    started = [store.started(task_id) for task_id in ids]
    await asyncio.sleep(0.05)
    assert {state for state, _, _ in rows(path).values()} == {"placed"}  # waiting its lag
    assert await asyncio.wait_for(asyncio.gather(*started), 2.0) == [True, True]
    assert {state for state, _, _ in rows(path).values()} == {"running"}
    await asyncio.to_thread(store.close)


async def test_waiting_starts_are_written_by_the_next_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_runs, "START_LAG_S", 30.0)  # never by the lag in this test
    path = tmp_path / "a.db"
    store, ids = await placed_store(path, 4)
    first = ids[0]
    commits = count_commits(monkeypatch)
    started = store.started(first)
    others = [store.started(task_id) for task_id in ids[1:]]  # their runs go on
    finish = store.runs.finished(Finish(first, "done", None, None, None))
    assert await finish is True and await started is True
    assert await asyncio.gather(*others) == [True] * 3
    after = rows(path)
    assert after[first][0] == "done"
    assert {after[t][0] for t in ids[1:]} == {"running"}
    assert commits == [[1]]  # the finish's op wrote the waiting starts: one op, one commit
    await asyncio.to_thread(store.close)


async def test_a_taken_along_start_of_a_task_no_longer_placed_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "a.db"
    store, ids = await placed_store(path, 2)
    gate = threading.Event()
    busy = store.db.write(lambda db: gate.wait(5))
    # a cancel that took the task back was queued before the start (never expected here)
    cancel = store.db.write(
        lambda db: db.execute("UPDATE tasks SET state = 'cancelled' WHERE id = ?", [ids[0]])
    )
    starts = [store.started(task_id) for task_id in ids]
    finishes = [store.runs.finished(Finish(t, "done", {"n": 1}, None, SAMPLE)) for t in ids]
    gate.set()
    await asyncio.gather(busy, cancel)
    assert await asyncio.gather(*finishes) == [False, True]
    assert await asyncio.gather(*starts) == [False, True]
    after = rows(path)
    assert after[ids[0]] == ("cancelled", None, None) and after[ids[1]][0] == "done"
    assert records(path) == (1, 1)  # no telemetry row or outbox record for the cancelled one
    assert "no longer running" in caplog.text
    await asyncio.to_thread(store.close)
