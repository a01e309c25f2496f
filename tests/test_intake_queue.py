"""The intake coalescer (edge_agent/agent/core/intake_queue.py): single submissions of one
loop iteration go to the store as one group, and each caller, by future (``enqueue``) or by
callback (``then``, the express lane's), hears its own outcome only once the group's write
returned; one bad request in a group fails alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.intake_queue import Stored, SubmitCoalescer
from edge_agent.agent.core.store import IdempotencyConflict
from edge_agent.tasks.contract import Semantics, TaskContract

pytestmark = pytest.mark.asyncio


def _task(key: str) -> NewTask:
    return NewTask(TaskContract(Semantics(0.001)), f"hash-{key}", key)


class _Store:
    """``Agent.submit`` stand-in: records each group; refuses a group holding key "bad"
    (as the store rolls back a reused key), or fails every group with ``broken``."""

    def __init__(self, broken: Exception | None = None) -> None:
        self.groups: list[list[str]] = []
        self.committed: list[str] = []
        self.broken = broken

    async def submit(self, tasks: list[NewTask]) -> list[Stored]:
        keys = [str(t.idempotency_key) for t in tasks]
        self.groups.append(keys)
        await asyncio.sleep(0)  # the commit
        if self.broken is not None:
            raise self.broken
        if "bad" in keys:
            raise IdempotencyConflict("Idempotency-Key 'bad' was already used")
        self.committed += keys
        return [({"idempotency_key": k}, True) for k in keys]


async def test_callers_of_one_iteration_share_a_group_and_hear_after_its_write() -> None:
    store = _Store()
    coalescer = SubmitCoalescer(store.submit)
    heard: list[tuple[str, Any, Any]] = []

    def done(key: str) -> Any:
        return lambda stored, err: heard.append((key, stored, err))

    coalescer.then(_task("a"), done("a"))
    future = coalescer.enqueue(_task("b"))
    coalescer.then(_task("c"), done("c"))
    assert heard == [] and store.groups == []  # nothing before the loop turns
    row, created = await future
    await asyncio.sleep(0)
    assert store.groups == [["a", "b", "c"]] and coalescer.groups == 1
    assert row == {"idempotency_key": "b"} and created
    assert heard == [
        ("a", ({"idempotency_key": "a"}, True), None),
        ("c", ({"idempotency_key": "c"}, True), None),
    ]


async def test_a_bad_request_fails_alone_and_a_broken_store_fails_everyone() -> None:
    store = _Store()
    coalescer = SubmitCoalescer(store.submit)
    heard: dict[str, tuple[Any, Any]] = {}

    def done(key: str) -> Any:
        return lambda stored, err: heard.__setitem__(key, (stored, err))

    for key in ("a", "bad", "c"):
        coalescer.then(_task(key), done(key))
    await coalescer.drain()
    assert store.groups[0] == ["a", "bad", "c"]  # refused as a group, then one by one
    assert sorted(store.committed) == ["a", "c"]
    assert heard["a"] == (({"idempotency_key": "a"}, True), None)
    assert heard["c"] == (({"idempotency_key": "c"}, True), None)
    assert heard["bad"][0] is None and isinstance(heard["bad"][1], IdempotencyConflict)

    broken = _Store(OSError("disk gone"))
    coalescer = SubmitCoalescer(broken.submit)
    errors: list[Any] = []
    coalescer.then(_task("x"), lambda s, e: errors.append(e))
    coalescer.then(_task("y"), lambda s, e: errors.append(e))
    await coalescer.drain()
    assert broken.groups == [["x", "y"]]  # not retried: every caller's failure
    assert len(errors) == 2 and all(isinstance(e, OSError) for e in errors)
