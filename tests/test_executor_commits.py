"""A device slot is held for the run only; starts and finishes are group-committed.

The executor frees a slot as soon as the job's run ends, so the device serves its next job
while the last outcome is being committed; the store writes every start (finish) asked for
in one loop turn as one op, and a task reads ``done`` in the file only once its finish has
committed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import sqlite3
import threading
from pathlib import Path

import pytest

from edge_agent.agent.core import outbox, store_runs
from edge_agent.agent.core.executor import Executor, Job, Outcome
from edge_agent.agent.core.fleet import build_fleet
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.store import Store
from edge_agent.agent.core.store_runs import Finish
from edge_agent.placement import Placer, Policy, Semantics, TaskContract
from edge_agent.storage.db import Database, StoreClosed
from tests.support.jobs import placed_job

pytestmark = pytest.mark.asyncio


async def placed_store(path: Path, n: int) -> tuple[Store, list[str]]:
    """Return an open store holding ``n`` placed tasks, and their ids."""
    store = Store(path)
    await asyncio.to_thread(store.open)
    rows = [r for r, _ in await store.submit([NewTask(TaskContract(Semantics(1.0)), "h")] * n)]
    decision = {"placed": 1, "device": "cpu0", "summary": "cpu0"}
    await store.placed([(r["id"], decision, False) for r in rows])
    return store, [r["id"] for r in rows]


def count_persists(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count ``Database.persist`` calls from now on (in the one-item list returned)."""
    ops = [0]
    persist = Database.persist

    async def counted(db: Database, op):  # type: ignore[no-untyped-def]
        ops[0] += 1
        return await persist(db, op)

    monkeypatch.setattr(Database, "persist", counted)
    return ops


async def test_the_next_job_runs_while_the_last_outcome_is_committed() -> None:
    fleet = build_fleet("rk3588")
    placer = Placer(fleet.devices, Policy.template("latency-first"))
    decision = placer.place_one(TaskContract(Semantics(0.001)))
    commit = asyncio.get_running_loop().create_future()  # the first outcome's commit, held
    done: list[str] = []

    class Hooks:  # the executor's JobHooks: the first outcome's commit is held
        def job_begins(self, job: Job, brief: bool) -> bool | None:
            return None  # these hooks await: every job takes the executor's task path

        def job_ended(self, job: Job, outcome: Outcome) -> None:
            raise AssertionError("job_begins declines: job_finished is called instead")

        async def job_starting(self, job: Job) -> bool:
            return True

        async def job_finished(self, job: Job, outcome: Outcome) -> None:
            done.append(job.task_id)
            if job.task_id == "first":
                await commit

    executor = Executor(fleet, placer, Hooks(), jitter=0.0)
    executor.start()
    for task_id in ("first", "second"):  # one device, one slot: one after the other
        executor.submit(placed_job(task_id, decision))
    async with asyncio.timeout(5):
        while "second" not in done:
            await asyncio.sleep(0.005)
    assert not commit.done() and executor.backlog() == 0  # served while "first" commits
    commit.set_result(None)
    await executor.stop(1.0)


async def test_starts_and_finishes_are_written_a_group_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, ids = await placed_store(tmp_path / "a.db", 20)
    ops = count_persists(monkeypatch)
    assert await asyncio.gather(*(store.started(i) for i in ids)) == [True] * 20
    assert ops[0] == 1
    assert await store.started(ids[0]) is False  # no longer placed: running

    def states() -> set[str]:
        with sqlite3.connect(tmp_path / "a.db") as conn:
            return {s for (s,) in conn.execute("SELECT state FROM tasks").fetchall()}

    telemetry = {"kind": "task", "device": "cpu0", "latency_s": 0.001}
    finishes = [store.runs.finished(Finish(i, "done", {"ok": 1}, None, telemetry)) for i in ids]
    assert states() == {"running"}  # asked for, not yet committed: not acknowledged
    await asyncio.gather(*finishes)
    assert states() == {"done"} and ops[0] == 3
    with sqlite3.connect(tmp_path / "a.db") as conn:
        (samples,) = conn.execute("SELECT count(*) FROM telemetry WHERE kind = 'task'").fetchone()
        (records,) = conn.execute(
            "SELECT count(*) FROM outbox WHERE kind = 'task' AND payload LIKE '%\"done\"%'"
        ).fetchone()
    assert samples == 20 and records == 20
    await asyncio.to_thread(store.close)


async def test_finishes_arriving_while_the_writer_commits_are_one_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, ids = await placed_store(tmp_path / "a.db", 3)
    assert await asyncio.gather(*(store.started(i) for i in ids)) == [True] * 3
    ops = count_persists(monkeypatch)
    gate = threading.Event()  # the writer is busy (an fsync, another op) until it is set
    busy = store.db.write(lambda db: gate.wait(5))
    finishes = []
    for task_id in ids:  # one per loop turn, as jobs end one after another
        finishes.append(store.runs.finished(Finish(task_id, "done", {"n": 1}, None, None)))
        await asyncio.sleep(0.01)
    assert not any(f.done() for f in finishes)  # nothing acknowledged before its commit
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert {s for (s,) in conn.execute("SELECT state FROM tasks")} == {"running"}
    gate.set()
    await busy
    await asyncio.gather(*finishes)
    assert ops[0] == 1  # the three waited for the writer together
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert {s for (s,) in conn.execute("SELECT state FROM tasks")} == {"done"}
    await asyncio.to_thread(store.close)


async def test_a_finish_told_by_callback_hears_once_durable_in_the_order_asked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``finished_then`` (the executor's callbacks): no future; each callback is called once,
    after its group's commit (the row reads done in the file), in the order asked, with
    (moved, None); one that raises is logged and the others are still told; after the store
    closed, a callback hears (None, the error)."""
    store, ids = await placed_store(tmp_path / "a.db", 4)
    assert await asyncio.gather(*(store.started(i) for i in ids)) == [True] * 4
    told: list[tuple[str, bool | None, BaseException | None, str]] = []

    def then(task_id: str, moved: bool | None, error: BaseException | None) -> None:
        with sqlite3.connect(tmp_path / "a.db") as conn:
            (state,) = conn.execute("SELECT state FROM tasks WHERE id = ?", (task_id,)).fetchone()
        told.append((task_id, moved, error, state))
        if task_id == ids[1]:
            raise RuntimeError("a callback's own failure")

    gate = threading.Event()  # the writer is busy until set: the four go in one group
    busy = store.db.write(lambda db: gate.wait(5))
    for task_id in ids[:3]:
        finish = Finish(task_id, "done", {"ok": 1}, None, None)
        assert store.finished_then(finish, functools.partial(then, task_id)) is None
    await asyncio.sleep(0.05)
    assert told == []  # nothing told before its commit
    gate.set()
    await busy
    await store.runs.drain(5)
    assert told == [(i, True, None, "done") for i in ids[:3]]
    assert "a run record's callback failed" in caplog.text
    await asyncio.to_thread(store.close)
    heard: list[tuple[bool | None, BaseException | None]] = []
    store.finished_then(
        Finish(ids[3], "done", None, None, None), lambda moved, err: heard.append((moved, err))
    )
    await store.runs.drain(5)
    assert len(heard) == 1 and heard[0][0] is None and isinstance(heard[0][1], StoreClosed)


async def test_a_finish_encodes_its_result_once_into_the_same_record() -> None:
    sample = {"kind": "task", "device": "rk3588/cpu", "latency_s": 0.002, "energy_j": None}
    cases = [
        Finish("t1", "done", {"latency_s": 0.002, "outputs": [[1, 10]]}, None, sample),
        Finish("t2", "failed", None, "boom", None),
        Finish("t3", "done", {"estimate_s": math.inf}, None, {"kind": "task", "x": math.nan}),
        Finish('t"4\\é', "done", {"ok": 1}, None, sample),  # an id the encoder must escape
    ]
    for finish in cases:
        row, record = store_runs._encoded(finish)
        assert record == outbox.encode(store_runs.task_record(finish))  # byte for byte
        assert row == (None if finish.result is None else json.dumps(finish.result))
    assert json.loads(store_runs._encoded(cases[2])[1])["result"] == {"estimate_s": None}


async def test_a_group_of_starts_finds_its_rows_by_id_not_by_state(tmp_path: Path) -> None:
    # by the state index it would visit every placed task (a backlog) for each group
    store, ids = await placed_store(tmp_path / "a.db", 200)
    await asyncio.to_thread(store.close)
    with sqlite3.connect(tmp_path / "a.db") as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + store_runs.start_statement(50), [0.0, *ids[:50]]
        ).fetchall()
    details = " ".join(str(row[-1]) for row in plan)
    assert "(id=?)" in details and "state" not in details, details
