"""Supervised loops restart after an error with back-off, and their state shows until stable."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_agent import loops
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.service import Agent
from edge_agent.placement import Semantics, TaskContract
from edge_agent.storage import db

pytestmark = pytest.mark.asyncio


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loops, "RESTART_FIRST_S", 0.01)
    monkeypatch.setattr(loops, "RESTART_MAX_S", 0.04)
    monkeypatch.setattr(loops, "STABLE_S", 0.3)


async def test_a_failing_loop_restarts_with_back_off_and_recovers(
    until: Callable[..., Any],
) -> None:
    calls: list[float] = []
    loop = asyncio.get_running_loop()

    async def flaky() -> None:
        calls.append(loop.time())
        if len(calls) <= 4:
            raise OSError(28, "No space left on device")
        await asyncio.sleep(3600)

    sup = loops.Supervisor()
    sup.spawn("flaky", flaky)
    await until(lambda: len(calls) == 5, timeout=5)
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[0] >= 0.01 and gaps[2] >= 0.04 * 0.9  # doubled, capped at the most
    status = sup.status()["flaky"]
    assert status["state"] == "running" and status["restarts"] == 4
    assert "No space left on device" in status["last_error"]
    (problem,) = sup.problems()
    assert problem.startswith("loop flaky restarted after OSError")
    await until(lambda: not sup.problems(), timeout=5)  # up STABLE_S since: healthy again
    await sup.stop()


async def test_a_loop_that_ends_is_finished_not_a_problem() -> None:
    sup = loops.Supervisor()

    async def once() -> None:
        return None

    await sup.spawn("once", once)
    assert sup.status()["once"]["state"] == "finished" and sup.problems() == []


async def test_scheduler_error_keeps_the_batch_and_restarts(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    until: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A placement that fails for another reason than storage drops nothing: the tasks wait
    again, the scheduler loop restarts, health says so, and they are placed once it works."""
    monkeypatch.setattr(db, "RETRY_MAX_S", 0.02)
    agent = Agent(emulated_agent())
    await agent.start()
    try:
        real = agent.store.placed
        failures = 0

        async def broken(*args: Any, **kwargs: Any) -> None:
            nonlocal failures
            if failures < 2:
                failures += 1
                raise RuntimeError("placement write refused")
            await real(*args, **kwargs)

        monkeypatch.setattr(agent.store, "placed", broken)
        rows = await agent.submit(
            [NewTask(TaskContract(Semantics(0.01)), f"h{i}") for i in range(5)]
        )
        ids = [row["id"] for row, _ in rows]
        await until(lambda: agent.loops.status()["agent-scheduler"]["restarts"] >= 1)
        assert any("agent-scheduler" in p for p in agent.health()["problems"])

        async def all_done() -> bool:
            rows = [await agent.store.get(i) for i in ids]
            return all(row is not None and row["state"] == "done" for row in rows)

        await until(all_done, timeout=10)
        assert failures == 2
        assert agent.scheduler.depth() == 0
        await until(lambda: agent.health()["status"] == "ok", timeout=5)
    finally:
        await agent.stop()
