"""A task's lifecycle: one table of legal moves, enforced by the store on a real SQLite file.

Every pair of states is tried: each move the table lacks is refused by the pure check and,
through ``Store.transition``, raises with the stored row left exactly as it was; each move
it has succeeds. The named moves the mesh uses keep their "moved on meanwhile" answers, and
no module outside the store writes SQL on the ``tasks`` table.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import edge_agent
from edge_agent.agent.core import lifecycle
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.lifecycle import MOVES, STATES, IllegalTransition
from edge_agent.agent.core.store import Store
from edge_agent.placement import Semantics, TaskContract

LEGAL = sorted((b, a) for b, a in MOVES if b is not None)
ILLEGAL = sorted(set(itertools.product(STATES, STATES)) - set(MOVES))


def test_the_table_names_only_known_states_and_every_state_is_reachable() -> None:
    assert {s for pair in MOVES for s in pair if s is not None} == set(STATES)
    assert {a for _, a in MOVES} == set(STATES)  # every state can be reached
    assert not any(b in lifecycle.FINAL for b, _ in MOVES)  # and final ones never left
    assert len(ILLEGAL) + len(LEGAL) == len(STATES) ** 2


@pytest.mark.parametrize(("before", "after"), ILLEGAL)
def test_an_illegal_move_is_refused_by_the_table(before: str, after: str) -> None:
    assert not lifecycle.legal(before, after)
    with pytest.raises(IllegalTransition, match=f"cannot move from {before} to {after}"):
        lifecycle.check("t1", before, after)
    with pytest.raises(IllegalTransition):
        lifecycle.where((before,), after)


@pytest.mark.parametrize(("before", "after"), LEGAL)
def test_a_legal_move_passes_the_table(before: str, after: str) -> None:
    lifecycle.check("t1", before, after)
    assert lifecycle.where((before,), after) == f"state IN ('{before}')"


@pytest.mark.parametrize("after", [s for s in STATES if (None, s) not in MOVES])
def test_a_new_task_starts_only_queued_or_deferred(after: str) -> None:
    with pytest.raises(IllegalTransition, match="from new to"):
        lifecycle.check("t1", None, after)


def test_an_unknown_state_is_named_in_the_error() -> None:
    with pytest.raises(IllegalTransition, match="'lost' is not a task state"):
        lifecycle.check("t1", "queued", "lost")


def stored(path: Path, task_id: str) -> tuple[Any, ...]:
    """Return the task's whole row and the number of decisions and outbox rows, from disk."""
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
        (decisions,) = conn.execute("SELECT count(*) FROM decisions").fetchone()
        (records,) = conn.execute("SELECT count(*) FROM outbox").fetchone()
    return (*row, decisions, records)


async def task_in(tmp_path: Path, state: str) -> tuple[Store, str]:
    """Open a store with one task and put it in ``state`` (the test's own seeding)."""
    store = Store(tmp_path / "agent.db")
    await asyncio.to_thread(store.open)
    [(row, _)] = await store.submit([NewTask(TaskContract(Semantics(1.0)), "h")])
    await store.db.write(
        lambda db: db.execute("UPDATE tasks SET state = ? WHERE id = ?", (state, row["id"]))
    )
    return store, str(row["id"])


@pytest.mark.asyncio
@pytest.mark.parametrize(("before", "after"), ILLEGAL)
async def test_the_store_refuses_an_illegal_move_and_writes_nothing(
    tmp_path: Path, before: str, after: str
) -> None:
    store, task_id = await task_in(tmp_path, before)
    try:
        was = stored(tmp_path / "agent.db", task_id)
        with pytest.raises(IllegalTransition, match=f"cannot move from {before} to {after}"):
            await store.transition(task_id, after, error="must not be written")
        assert stored(tmp_path / "agent.db", task_id) == was
    finally:
        await asyncio.to_thread(store.close)


@pytest.mark.asyncio
@pytest.mark.parametrize(("before", "after"), LEGAL)
async def test_the_store_makes_a_legal_move(tmp_path: Path, before: str, after: str) -> None:
    store, task_id = await task_in(tmp_path, before)
    try:
        found = await store.transition(task_id, after, error="why")
        assert found is not None and found["state"] == before
        row = await store.get(task_id)
        assert row is not None and (row["state"], row["error"]) == (after, "why")
    finally:
        await asyncio.to_thread(store.close)


@pytest.mark.asyncio
async def test_a_named_move_the_table_lacks_raises_and_writes_nothing(tmp_path: Path) -> None:
    store, task_id = await task_in(tmp_path, "running")
    try:
        was = stored(tmp_path / "agent.db", task_id)
        with pytest.raises(IllegalTransition, match="cannot move from running to cancelled"):
            await store.cancel(task_id, ("queued", "running"))  # running cannot be cancelled
        assert stored(tmp_path / "agent.db", task_id) == was
    finally:
        await asyncio.to_thread(store.close)


@pytest.mark.asyncio
async def test_the_mesh_moves_answer_moved_on_meanwhile_without_writing(tmp_path: Path) -> None:
    store, task_id = await task_in(tmp_path, "cancelled")
    decision = {"placed": 1, "device": "cpu0", "summary": "cpu0"}
    try:
        was = stored(tmp_path / "agent.db", task_id)
        assert await store.mark_offloaded(task_id, decision) is False
        assert await store.take_back(task_id, "cpu0", False, decision) is False
        assert await store.refuse_forwarded(task_id, "full") is False
        assert await store.release_deferred(task_id) is False
        assert stored(tmp_path / "agent.db", task_id) == was
        assert await store.transition("no-such-task", "queued") is None
    finally:
        await asyncio.to_thread(store.close)


@pytest.mark.asyncio
async def test_an_offloaded_task_settles_once_with_its_chain(tmp_path: Path) -> None:
    store, task_id = await task_in(tmp_path, "queued")
    decision = {"placed": 0, "device": None, "summary": "no device here"}
    outcome = {"state": "done", "result": {"y": 1}, "error": None, "device": "b:cpu0"}
    chain = [{"node": "b", "action": "ran", "devices": ["cpu0"]}]
    try:
        assert await store.mark_offloaded(task_id, decision) is True
        assert await store.record_peer_result(task_id, outcome, "b", chain) is True
        again = {**outcome, "state": "failed"}
        assert await store.record_peer_result(task_id, again, "b", []) is False
        row = await store.get(task_id)
        assert row is not None
        assert (row["state"], row["ran_on"], row["device"]) == ("done", "b", "b:cpu0")
        assert row["result"] == {"y": 1} and row["chain"] == []  # chain: the last word
        link = {"node": "c", "action": "duplicate"}
        await store.record_duplicate(task_id, link)
        row = await store.get(task_id)
        assert row is not None and row["state"] == "done" and row["chain"] == [link]
    finally:
        await asyncio.to_thread(store.close)


def test_no_module_outside_the_store_writes_sql_on_tasks() -> None:
    root = Path(edge_agent.__file__).parent
    store = ("store.py", "store_batch.py", "store_runs.py", "store_moves.py")
    owners = {f"agent/core/{name}" for name in store} | {"storage/agent_schema.py"}
    sql = re.compile(r"\b(FROM|UPDATE|INTO|JOIN)\s+tasks\b")
    found = [
        rel
        for path in root.rglob("*.py")
        if (rel := path.relative_to(root).as_posix()) not in owners
        and sql.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []


@pytest.mark.asyncio
async def test_a_task_taken_back_from_the_mesh_is_a_decision_the_hub_sees(tmp_path: Path) -> None:
    """Seen in the demo once the bid gate asked peers more often: a task offered to the mesh
    whose bids lost ran here, but the hub's decision log never heard of its placement."""
    store, task_id = await task_in(tmp_path, "queued")
    offered = {"placed": 1, "device": "cpu0", "summary": "cpu0 (peers asked)"}
    here = {"placed": 1, "device": "cpu0", "summary": "cpu0: no bid beat it"}
    try:
        assert await store.mark_offloaded(task_id, offered) is True
        assert await store.take_back(task_id, "cpu0", False, here) is True
        conn = sqlite3.connect(tmp_path / "agent.db")
        try:
            kinds = conn.execute(
                "SELECT kind, payload FROM outbox WHERE kind = 'decision'"
            ).fetchall()
        finally:
            conn.close()
        assert any(task_id in payload and "no bid beat it" in payload for _, payload in kinds)
    finally:
        await asyncio.to_thread(store.close)
