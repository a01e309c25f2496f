"""An emulated job runs as loop callbacks (a timer, no task per job) and behaves as before.

The executor starts an emulated job through ``JobHooks.job_begins`` and reports its end to
``job_ended`` from the timer's callback: no asyncio task, coroutine or sleep future per
job. These tests hold it to what a run by task guarantees: a job withdrawn before its slot
is not run, the slot is held for the run only, the overrun watch sees it while it runs, a
stop waits up to its grace and then cancels it (no outcome reported), hooks that must await
get the task path, and through a real agent every finish is durable before it counts.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from pathlib import Path

import pytest

from edge_agent.agent.config.settings import AgentConfig
from edge_agent.agent.core.emulation import Emulation
from edge_agent.agent.core.executor import Executor, Job, Outcome
from edge_agent.agent.core.fleet import build_fleet
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.service import Agent
from edge_agent.placement import Decision, Placer, Policy, Semantics, TaskContract
from tests.support.jobs import placed_job

pytestmark = pytest.mark.asyncio


class Hooks:
    """JobHooks that start without awaiting and record what they are told."""

    def __init__(self) -> None:
        self.begun: list[str] = []
        self.ended: dict[str, Outcome] = {}
        self.finished: list[str] = []  # the task path's hook: never expected here

    async def job_starting(self, job: Job) -> bool:
        raise AssertionError("job_begins started it: job_starting is not called")

    async def job_finished(self, job: Job, outcome: Outcome) -> None:
        self.finished.append(job.task_id)

    def job_begins(self, job: Job, brief: bool) -> bool | None:
        if job.cancelled:
            return False
        self.begun.append(job.task_id)
        return True

    def job_ended(self, job: Job, outcome: Outcome) -> None:
        self.ended[job.task_id] = outcome


def _started(
    hooks: Hooks, monkeypatch: pytest.MonkeyPatch | None = None, seconds: float = 0.0
) -> tuple[Executor, Decision]:
    """Return a started executor of an emulated RK3588 and a tiny task's decision; with
    ``seconds``, every emulated run takes that long."""
    if monkeypatch is not None:
        monkeypatch.setattr(Emulation, "target", lambda self, job, slots: (seconds, "test"))
    fleet = build_fleet("rk3588")
    placer = Placer(fleet.devices, Policy.template("latency-first"))
    executor = Executor(fleet, placer, hooks, jitter=0.0)
    executor.start()
    return executor, placer.place_one(TaskContract(Semantics(0.001)))


async def _until(check: object, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.002)


async def test_emulated_jobs_run_by_callbacks_one_after_another() -> None:
    hooks = Hooks()
    executor, decision = _started(hooks)
    tasks_before = len(asyncio.all_tasks())
    for task_id in ("a", "b", "c"):  # one device, one slot
        executor.submit(placed_job(task_id, decision))
    assert len(asyncio.all_tasks()) == tasks_before  # no task per job
    await _until(lambda: len(hooks.ended) == 3)
    assert hooks.begun == ["a", "b", "c"] and not hooks.finished
    for outcome in hooks.ended.values():
        assert outcome.ok and outcome.emulated and outcome.latency_s > 0
        assert outcome.result is not None and outcome.result["estimate_s"] == decision.service_s
    assert executor.backlog() == 0 and not executor.running()
    await executor.stop(1.0)


async def test_a_withdrawn_job_is_not_run_and_the_next_one_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    executor, decision = _started(hooks := Hooks(), monkeypatch, 0.05)
    first, withdrawn, last = (placed_job(t, decision) for t in ("first", "withdrawn", "last"))
    for job in (first, withdrawn, last):
        executor.submit(job)
    withdrawn.cancelled = True  # cancelled while queued behind "first"
    await _until(lambda: "last" in hooks.ended)
    assert hooks.begun == ["first", "last"] and set(hooks.ended) == {"first", "last"}
    await executor.stop(1.0)


async def test_a_run_by_callbacks_holds_its_slot_and_is_seen_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    executor, decision = _started(hooks := Hooks(), monkeypatch, 0.3)
    running, queued = placed_job("running", decision), placed_job("queued", decision)
    executor.submit(running)
    executor.submit(queued)
    await _until(lambda: hooks.begun)
    (device_id, job, started), *rest = executor.running()  # what the overrun watch reads
    assert job is running and not rest and device_id == running.device_id
    assert 0 < time.perf_counter() - started < 0.3  # its service began when it took the slot
    assert executor.is_running(running) and not executor.is_running(queued)
    assert hooks.begun == ["running"] and executor.backlog() == 2
    await _until(lambda: "queued" in hooks.begun)  # the slot passed on when the run ended
    assert "running" in hooks.ended and executor.running()[0][1] is queued
    await executor.stop(1.0)


async def test_stop_waits_for_a_run_within_its_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    executor, decision = _started(hooks := Hooks(), monkeypatch, 0.1)
    executor.submit(placed_job("t", decision))
    await _until(lambda: hooks.begun)
    await executor.stop(2.0)
    assert "t" in hooks.ended and not executor.running()


async def test_stop_cancels_a_run_past_its_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    executor, decision = _started(hooks := Hooks(), monkeypatch, 30.0)
    job = placed_job("long", decision)
    executor.submit(job)
    await _until(lambda: hooks.begun)
    async with asyncio.timeout(2.0):
        await executor.stop(0.05)
    # cancelled: no outcome (the task stays running in the store and runs after a restart)
    assert not hooks.ended and not executor.running() and executor.backlog() == 0


async def test_hooks_that_must_await_get_the_task_path() -> None:
    class Awaiting(Hooks):
        def job_begins(self, job: Job, brief: bool) -> bool | None:
            return None  # e.g. a power meter to read first

        async def job_starting(self, job: Job) -> bool:
            await asyncio.sleep(0)
            self.begun.append(job.task_id)
            return True

    hooks = Awaiting()
    executor, decision = _started(hooks)
    executor.submit(placed_job("t", decision))
    await _until(lambda: hooks.finished)
    assert hooks.begun == ["t"] and hooks.finished == ["t"] and not hooks.ended
    await executor.stop(1.0)


async def test_an_agent_counts_a_finish_run_by_callbacks_only_once_durable(
    tmp_path: Path,
) -> None:
    config = AgentConfig(data_dir=tmp_path / "data", port=0, profile="rk3588")
    agent = Agent(config)
    await agent.start()
    try:
        stored = await agent.submit([NewTask(TaskContract(Semantics(0.001)), "h")] * 40)
        ids = [row["id"] for row, _ in stored]
        await _until(lambda: agent.metrics.tasks_in("done") == 40)
        assert not any(d.runs for d in agent.executor._devices.values())  # no run tasks
        with sqlite3.connect(config.db_path) as conn:  # counted: committed
            rows = conn.execute("SELECT id, state FROM tasks").fetchall()
            (samples,) = conn.execute(
                "SELECT count(*) FROM telemetry WHERE kind = 'task'"
            ).fetchone()
            (records,) = conn.execute("SELECT count(*) FROM outbox WHERE kind = 'task'").fetchone()
        assert dict(rows) == dict.fromkeys(ids, "done")
        assert samples == 40 and records == 40
    finally:
        await agent.stop()


async def test_an_agent_stopped_mid_run_records_every_finish_it_ran(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop waits for the timers, then the run log's drain for the finishes chained on
    their starts' commits: no task is left running, none is recorded without its rows."""
    config = AgentConfig(data_dir=tmp_path / "data", port=0, profile="rk3588")
    agent = Agent(config)
    await agent.start()
    stopped = False
    try:
        await agent.submit([NewTask(TaskContract(Semantics(0.001)), "h")] * 600)
        counted = agent.metrics.tasks_in
        await _until(lambda: counted("running") + counted("done") > 0)
        with caplog.at_level(logging.ERROR):
            await agent.stop()
            stopped = True
    finally:
        if not stopped:
            await agent.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    with sqlite3.connect(config.db_path) as conn:
        states = dict(conn.execute("SELECT state, count(*) FROM tasks GROUP BY state").fetchall())
        (samples,) = conn.execute("SELECT count(*) FROM telemetry WHERE kind = 'task'").fetchone()
        (records,) = conn.execute("SELECT count(*) FROM outbox WHERE kind = 'task'").fetchone()
    assert set(states) <= {"done", "placed", "queued"} and states.get("done", 0) > 0
    assert samples == records == states["done"]
