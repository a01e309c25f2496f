"""A task's lifecycle: its states and the one table of the moves between them.

Every change of a stored task's ``state`` is one of ``MOVES`` (``None``: the row does not
exist yet). The store checks each move it makes against this table: a move written as SQL
(``where``) is checked when its statement is built, at import, and a single row's move
(``check``) as it happens, inside the write's transaction, so an illegal one raises
``IllegalTransition`` and writes nothing.

A "duplicate" (a lost attempt that completed on a peer too) is not a state: it is a link
appended to the task's decision chain (``Store.record_duplicate``); the state stays final.
"""

from __future__ import annotations

from collections.abc import Iterable

from edge_agent.errors import HetmeshError

#: Task states; ``WAITING`` ones are the scheduler's, ``FINAL`` ones never change again.
STATES = (
    "queued",
    "placed",
    "running",
    "done",
    "failed",
    "cancelled",
    "interrupted",
    "offloaded",  # handed to the mesh (edge_agent/agent/mesh/origin.py): a peer may run it
    "deferred",  # held until a low-carbon hour before its deadline (agent/core/deferral.py)
)
WAITING = ("queued", "interrupted")
FINAL = ("done", "failed", "cancelled")

#: Each legal move (state before -> state after) and who makes it.
MOVES: dict[tuple[str | None, str], str] = {
    (None, "queued"): "accepted (Store.submit)",
    (None, "deferred"): "accepted, held for a low-carbon hour (Store.submit)",
    ("deferred", "queued"): "its hour came (Store.release_deferred)",
    ("deferred", "cancelled"): "cancelled (Store.cancel)",
    ("queued", "placed"): "placed on a device here (Store.placed; from a peer: place_forwarded)",
    ("interrupted", "placed"): "placed again after a restart (Store.placed)",
    ("queued", "failed"): "no device could ever run it (Store.placed, Store.fail)",
    ("interrupted", "failed"): "no device could ever run it (Store.placed, Store.fail)",
    ("queued", "offloaded"): "handed to the mesh (Store.mark_offloaded)",
    ("interrupted", "offloaded"): "handed to the mesh (Store.mark_offloaded)",
    ("queued", "cancelled"): "cancelled (Store.cancel)",
    ("interrupted", "cancelled"): "cancelled (Store.cancel)",
    ("placed", "queued"): "preempted before it started (Store.placed requeued)",
    ("placed", "running"): "took its device slot (Store.started)",
    ("placed", "cancelled"): "cancelled before it started (Store.cancel)",
    ("placed", "failed"): "a peer's task refused by its pool here (Store.refuse_forwarded); "
    "a peer's task cut by a restart (Store.recover); ran and failed before its start was "
    "written: both in one row write (Store.finished with started_at)",
    ("placed", "done"): "ran before its start was written: start and finish in one row write "
    "(Store.finished with started_at)",
    ("placed", "interrupted"): "cut by a restart (Store.recover)",
    ("running", "done"): "ran (Store.finished)",
    ("running", "failed"): "ran and failed (Store.finished); a peer's task cut by a restart",
    ("running", "interrupted"): "cut by a restart (Store.recover)",
    ("offloaded", "placed"): "the bids did not beat this box: runs here (Store.take_back)",
    ("offloaded", "done"): "ran on a peer (Store.record_peer_result)",
    ("offloaded", "failed"): "failed on the mesh (Store.record_peer_result)",
    ("offloaded", "interrupted"): "cut by a restart (Store.recover)",
}


class IllegalTransition(HetmeshError):
    """A task was asked to move between two states the lifecycle does not connect."""


def legal(before: str | None, after: str) -> bool:
    """Whether a task may move from ``before`` (None: new) to ``after``."""
    return (before, after) in MOVES


def sources_of(after: str) -> tuple[str, ...]:
    """Return the states a task may move to ``after`` from (a new one's excepted)."""
    return tuple(before for before, to in MOVES if to == after and before is not None)


def check(task_id: str, before: str | None, after: str) -> None:
    """Raise IllegalTransition unless ``task_id`` may move from ``before`` to ``after``."""
    if after not in STATES:
        raise IllegalTransition(
            f"task {task_id}: {after!r} is not a task state (one of {', '.join(STATES)})"
        )
    if not legal(before, after):
        sources = sources_of(after)
        was = "new" if before is None else before
        raise IllegalTransition(
            f"task {task_id}: cannot move from {was} to {after} "
            f"(a task reaches {after} only from {', '.join(sources) or 'submission'})"
        )


def where(sources: Iterable[str], after: str, *, by_state: bool = True) -> str:
    """Return the SQL condition ``state IN (...)`` of a move to ``after`` from ``sources``.

    Raises IllegalTransition if any of those moves is illegal (called when a statement is
    built, so a wrong one fails at import, never on a task). ``by_state`` False keeps
    SQLite from searching the ``state`` index for it (``+state``): for a statement that
    names its rows by id, where that index would visit every task in those states.
    """
    sources = tuple(sources)
    for before in sources:
        check("(statement)", before, after)
    column = "state" if by_state else "+state"
    return f"{column} IN ({', '.join(repr(s) for s in sources)})"
