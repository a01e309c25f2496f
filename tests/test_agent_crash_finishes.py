"""Group-committed finishes under ``kill -9``: each is whole or absent, and runs exactly once.

A flood of tiny tasks keeps many starts and finishes waiting for the writer at any moment
(``store_runs.Gather``). Killed mid-flood, the file holds every finished task with its
result, its telemetry row and its one outbox record (the same transaction), and no record
of a task it does not hold as finished; after the restart every task ends done with exactly
one outbox record: none lost, none run twice past its recorded finish. Most of those tiny
tasks end before the writer takes their start (write-combining: one row write, placed ->
done); a trigger logs each row's moves, and every one of them is a legal move.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest

from edge_agent.agent.core.lifecycle import legal
from tests.test_agent_restart import call, spawn, stop
from tests.test_run_write_combining import log_moves, moves

TINY = {"semantics": {"gflops": 0.001}, "task_class": "tiny"}
N_TASKS = 1500
BATCH = 500


def _snapshot(db_path: Path) -> tuple[dict[str, str], dict[str, list[str]], dict[str, int]]:
    """Return task states, each task's outbox ``task`` record states, telemetry rows by task."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        states = dict(db.execute("SELECT id, state FROM tasks").fetchall())
        records: dict[str, list[str]] = {}
        for task_id, state in db.execute(
            "SELECT json_extract(payload, '$.id'), json_extract(payload, '$.state') "
            "FROM outbox WHERE kind = 'task' ORDER BY seq"
        ):
            records.setdefault(task_id, []).append(state)
        samples = dict(
            db.execute(
                "SELECT task_id, count(*) FROM telemetry WHERE kind = 'task' GROUP BY task_id"
            ).fetchall()
        )
    finally:
        db.close()
    return states, records, samples


@pytest.mark.slow
def test_a_kill_9_mid_flood_leaves_each_finish_whole_and_runs_the_rest_once(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "data" / "agent.db"
    proc, port = spawn(tmp_path)
    log_moves(db_path)  # the agent has made its schema
    try:
        accepted = []
        for _ in range(N_TASKS // BATCH):  # within the batch limit (openapi.MAX_BATCH)
            answer = call(port, "POST", "/v1/tasks:batch", {"tasks": [TINY] * BATCH})
            accepted += [t["id"] for t in answer["tasks"]]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # kill once finishes are flowing
            with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
                (done,) = db.execute("SELECT count(*) FROM tasks WHERE state = 'done'").fetchone()
            if done >= 50:
                break
            time.sleep(0.005)
        # a last batch, acknowledged just before the kill: on a fast box the first ones may
        # all be done by the time 50 are seen, and the kill must still land mid-flood
        answer = call(port, "POST", "/v1/tasks:batch", {"tasks": [TINY] * BATCH})
        accepted += [t["id"] for t in answer["tasks"]]
    finally:
        stop(proc, signal.SIGKILL)
    states, records, samples = _snapshot(db_path)
    finished = {i for i, s in states.items() if s == "done"}
    assert finished and len(finished) < len(accepted), "the kill did not land mid-flood"
    assert {i for i, r in records.items() if r} == finished  # a record exactly when finished
    assert all(records[i] == ["done"] and samples.get(i) == 1 for i in finished)
    logged = moves(db_path)
    assert all(legal(before, after) for _, before, after, _, _ in logged)
    into_done = [(i, b, start, end) for i, b, a, start, end in logged if a == "done"]
    assert sorted(i for i, _, _, _ in into_done) == sorted(finished)  # once each
    assert any(b == "placed" for _, b, _, _ in into_done)  # start written with its finish
    assert all(
        start is not None and end is not None and start <= end for *_, start, end in into_done
    )

    proc, port = spawn(tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states, records, samples = _snapshot(db_path)
            if set(states.values()) == {"done"}:
                break
            time.sleep(0.1)
    finally:
        stop(proc, signal.SIGTERM)
    states, records, samples = _snapshot(db_path)
    assert sorted(states) == sorted(accepted) and set(states.values()) == {"done"}
    assert all(records.get(i) == ["done"] for i in accepted)  # exactly one record each
    assert all(samples.get(i) == 1 for i in accepted)
    logged = moves(db_path)
    assert all(legal(before, after) for _, before, after, _, _ in logged)
    assert sorted(i for i, _, a, _, _ in logged if a == "done") == sorted(accepted)  # once each
