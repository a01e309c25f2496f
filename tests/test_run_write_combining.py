"""Write-combining: a task that finishes before the writer took its start writes one row.

``RunLog.take_back_start`` withdraws a start still waiting for the writer, and the finish
writes both (placed -> done or failed, ``started_at`` the time the start was asked) in its
own transaction. A start the writer has taken is not withdrawn: the finish follows its
commit as before. A trigger on the test's file logs every change of a task's state, so the
tests see the row writes themselves, not only the state they end in.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from edge_agent.agent.config.settings import AgentConfig
from edge_agent.agent.core.emulation import Emulation
from edge_agent.agent.core.executor import BRIEF_RUN_S, Job, Outcome
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.lifecycle import legal
from edge_agent.agent.core.store import Store
from edge_agent.agent.service import Agent
from edge_agent.placement import TaskContract
from tests.test_executor_commits import placed_store as placed_tasks

pytestmark = pytest.mark.asyncio

TELEMETRY = {"kind": "task", "device": "cpu0", "latency_s": 0.001}

#: logs every state change of a task (created by the test, in the agent's own file)
LOG_MOVES = (
    "CREATE TABLE IF NOT EXISTS moves (task_id TEXT, before TEXT, after TEXT, "
    "started_at REAL, finished_at REAL);"
    "CREATE TRIGGER IF NOT EXISTS log_moves AFTER UPDATE OF state ON tasks "
    "WHEN old.state IS NOT new.state BEGIN INSERT INTO moves VALUES "
    "(new.id, old.state, new.state, new.started_at, new.finished_at); END;"
)


def log_moves(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(LOG_MOVES)


def moves(path: Path) -> list[tuple[str, str, str, float | None, float | None]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT * FROM moves ORDER BY rowid").fetchall()


async def placed_store(path: Path, n: int) -> tuple[Store, list[str]]:
    """Return an open store holding ``n`` placed tasks (moves logged from here on)."""
    store, ids = await placed_tasks(path, n)
    log_moves(path)
    return store, ids


def hold_writer(store: Store) -> tuple[threading.Event, asyncio.Future[bool]]:
    """Keep the writer busy (as an fsync would) until the returned event is set."""
    gate = threading.Event()
    return gate, store.db.write(lambda db: gate.wait(5))


class WriterHold:
    """The agent's writer kept busy from the first ``hold`` until ``release``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.held: tuple[threading.Event, asyncio.Future[bool]] | None = None

    def hold(self) -> None:
        if self.held is None:
            self.held = hold_writer(self.store)

    async def release(self) -> None:
        assert self.held is not None, "the writer was never held"
        gate, busy = self.held
        gate.set()
        await busy


@contextlib.asynccontextmanager
async def logging_agent(tmp_path: Path) -> AsyncIterator[Agent]:
    """A started agent (emulated RK3588) whose file logs its tasks' moves."""
    agent = Agent(AgentConfig(data_dir=tmp_path, port=0, profile="rk3588"))
    await agent.start()
    try:
        log_moves(agent.config.db_path)
        yield agent
    finally:
        await agent.stop()


async def tiny_tasks(agent: Agent, n: int) -> list[str]:
    """Submit ``n`` tiny tasks in one op (placed together); return their ids."""
    contract = TaskContract.from_dict({"semantics": {"gflops": 0.001}, "task_class": "t"})
    return [row["id"] for row, _ in await agent.submit([NewTask(contract, "h")] * n)]


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.005)


async def test_a_finish_before_its_start_is_written_moves_the_row_once(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store, (done_id, failed_id) = await placed_store(path, 2)
    gate, busy = hold_writer(store)
    asked = time.time()
    starts = [store.started(done_id), store.started(failed_id)]
    started_at = [store.take_back_start(s) for s in starts]
    assert all(t is not None and asked <= t <= time.time() for t in started_at)
    assert store.take_back_start(starts[0]) is None  # taken back once only
    finishes = [
        store.finished(done_id, "done", {"ok": 1}, None, TELEMETRY, started_at[0]),
        store.finished(failed_id, "failed", None, "boom", TELEMETRY, started_at[1]),
    ]
    gate.set()
    await busy
    assert await asyncio.gather(*finishes) == [True, True]
    assert not any(s.done() for s in starts)  # withdrawn: resolved by the caller, not here
    logged = moves(path)
    assert [(t, b, a) for t, b, a, _, _ in logged] == [
        (done_id, "placed", "done"),
        (failed_id, "placed", "failed"),
    ]  # one row write each, never running in the file
    assert all(legal(b, a) for _, b, a, _, _ in logged)
    for (_, _, _, start, end), asked_at in zip(logged, started_at, strict=True):
        assert start == asked_at and end is not None and start <= end
    with sqlite3.connect(path) as conn:
        (records,) = conn.execute("SELECT count(*) FROM outbox WHERE kind = 'task'").fetchone()
        (samples,) = conn.execute("SELECT count(*) FROM telemetry WHERE kind = 'task'").fetchone()
    assert records == 2 and samples == 2  # the finish's rows, as ever
    await asyncio.to_thread(store.close)


async def test_a_start_the_writer_has_taken_is_not_taken_back(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store, (task_id,) = await placed_store(path, 1)
    started = store.started(task_id)
    assert await started is True  # written and committed
    assert store.take_back_start(started) is None
    assert await store.finished(task_id, "done", {"ok": 1}, None, TELEMETRY) is True
    assert [(b, a) for _, b, a, _, _ in moves(path)] == [("placed", "running"), ("running", "done")]
    await asyncio.to_thread(store.close)


async def test_a_combined_finish_of_a_task_no_longer_placed_moves_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "a.db"
    store, (task_id, other) = await placed_store(path, 2)
    assert await store.cancel(task_id, ("placed",)) is not None  # behind the run's back
    gate, busy = hold_writer(store)
    started_at = store.take_back_start(store.started(task_id))
    assert started_at is not None
    late = store.finished(task_id, "done", {"ok": 1}, None, TELEMETRY, started_at)
    fine = store.finished(other, "done", {"ok": 1}, None, TELEMETRY)  # never started: refused
    gate.set()
    await busy
    assert await asyncio.gather(late, fine) == [False, False]  # per finish, not per group
    assert "no longer running" in caplog.text
    await asyncio.to_thread(store.close)


async def test_an_agent_writes_a_short_task_once_and_counts_it_through_placed_to_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real agent: with the writer held, every short job (not brief: its start is
    asked for) ends before its start is written, so each task's row moves once; the gauge
    and the start futures read as a start's own commit would have left them."""
    n = 30
    monkeypatch.setattr(Emulation, "target", lambda self, job, slots: (BRIEF_RUN_S, "test"))
    async with logging_agent(tmp_path) as agent:
        writer = WriterHold(agent.store)
        begun: list[Job] = []
        begins = agent.jobs.job_begins

        def holding(job: Job, brief: bool) -> bool | None:  # the writer busy from the first
            assert not brief
            writer.hold()
            begun.append(job)
            return begins(job, brief)

        agent.jobs.job_begins = holding  # type: ignore[method-assign]
        ids = await tiny_tasks(agent, n)
        await until(lambda: len(begun) == n and not agent.executor.backlog())
        assert agent.metrics.tasks_in("done") == 0  # nothing counted before its commit
        await writer.release()
        await until(lambda: agent.metrics.tasks_in("done") == n)
        assert agent.metrics.tasks_in("running") == 0 and agent.metrics.tasks_in("placed") == 0
        assert all(job.started is not None and job.started.result() is True for job in begun)
        logged = moves(agent.config.db_path)
        into_done = [(t, b) for t, b, a, _, _ in logged if a == "done"]
        assert sorted(t for t, _ in into_done) == sorted(ids)  # one move into done each
        assert {b for _, b in into_done} == {"placed"}  # written with its start
        assert not any(a == "running" for _, _, a, _, _ in logged)


async def test_a_brief_run_asks_no_start_of_its_own_and_moves_its_row_once(
    tmp_path: Path,
) -> None:
    """A tiny job (shorter than ``BRIEF_RUN_S``) asks for no start apart: its finish writes
    it, so its row moves placed -> done once with ``started_at`` (never ``running``), the
    gauge counts it placed -> done after that commit, and the writer gets no start op."""
    n = 40
    async with logging_agent(tmp_path) as agent:
        asked: list[str] = []
        started = agent.store.runs.started

        def counted(task_id: str) -> asyncio.Future[bool]:
            asked.append(task_id)
            return started(task_id)

        agent.store.runs.started = counted  # type: ignore[method-assign]
        ids = await tiny_tasks(agent, n)
        await until(lambda: agent.metrics.tasks_in("done") == n)
        assert asked == []
        assert agent.metrics.tasks_in("running") == 0 and agent.metrics.tasks_in("placed") == 0
        logged = moves(agent.config.db_path)
        into_done = [(t, b, s, f) for t, b, a, s, f in logged if a == "done"]
        assert sorted(t for t, _, _, _ in into_done) == sorted(ids)  # one move into done each
        assert {b for _, b, _, _ in into_done} == {"placed"}  # written with its start
        assert all(s is not None and f is not None and s <= f for _, _, s, f in into_done)
        assert not any(a == "running" for _, _, a, _, _ in logged)


async def test_a_finishs_telemetry_row_holds_its_sample_under_the_sample_columns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    store, (task_id,) = await placed_store(path, 1)
    started_at = store.take_back_start(store.started(task_id))
    sample = {"kind": "task", "device": "cpu0", "latency_s": 0.25, "emulated": 1, "energy_j": None}
    assert await store.finished(task_id, "done", {"ok": 1}, None, sample, started_at) is True
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM telemetry WHERE task_id = ?", (task_id,)).fetchone()
        (finished_at,) = conn.execute(
            "SELECT finished_at FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
    assert {k: row[k] for k in sample} == sample
    assert row["ts"] == finished_at  # the write's time, as the task's finish
    await asyncio.to_thread(store.close)


async def test_a_job_that_outlasts_its_starts_commit_reads_running_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write-combining never holds a start back: a run longer than a commit is ``running``
    in the file (and the gauge) while it runs, and its row moves twice."""
    monkeypatch.setattr(Emulation, "target", lambda self, job, slots: (0.4, "test"))
    async with logging_agent(tmp_path) as agent:
        (task_id,) = await tiny_tasks(agent, 1)
        await until(lambda: agent.metrics.tasks_in("running") == 1)
        stored = await agent.store.get(task_id)
        assert stored is not None and stored["state"] == "running"  # committed, still running
        await until(lambda: agent.metrics.tasks_in("done") == 1)
        assert [(b, a) for _, b, a, _, _ in moves(agent.config.db_path)] == [
            ("queued", "placed"),
            ("placed", "running"),
            ("running", "done"),
        ]


async def test_a_job_on_the_task_path_writes_its_start_with_its_finish_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job the executor runs as a task (a command, a model, a power meter: here hooks
    that decline ``job_begins``) ends in ``job_finished``; a start its finish finds unwritten
    is written with it as well."""
    n = 8
    async with logging_agent(tmp_path) as agent:
        writer = WriterHold(agent.store)
        finished: list[Job] = []
        starting, finishing = agent.jobs.job_starting, agent.jobs.job_finished

        async def holding(job: Job) -> bool:
            writer.hold()
            return await starting(job)

        async def counting(job: Job, outcome: Outcome) -> None:
            finished.append(job)
            await finishing(job, outcome)

        monkeypatch.setattr(agent.jobs, "job_begins", lambda job, brief: None)  # the task path
        monkeypatch.setattr(agent.jobs, "job_starting", holding)
        monkeypatch.setattr(agent.jobs, "job_finished", counting)
        ids = await tiny_tasks(agent, n)
        await until(lambda: len(finished) == n)
        await writer.release()
        await until(lambda: agent.metrics.tasks_in("done") == n)
        assert agent.metrics.tasks_in("running") == 0
        assert all(job.started is not None and job.started.result() is True for job in finished)
        into_done = {t: b for t, b, a, _, _ in moves(agent.config.db_path) if a == "done"}
        assert into_done == dict.fromkeys(ids, "placed")
