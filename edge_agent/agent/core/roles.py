"""The small interfaces the agent's parts are wired through (``service.Agent`` wires them).

The executor reports a job's start and end to its ``JobHooks``; the scheduler hands placed
jobs to its ``Dispatcher`` and offers the tasks it would run here to its ``Offload`` (the
mesh's origin side, ``agent.mesh.origin.MeshHandoff``). Each is given to its user when that is
built, never assigned from outside afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from edge_agent.agent.core.executor import Job, Outcome
    from edge_agent.agent.core.waiting import Waiting
    from edge_agent.placement import Decision


class JobHooks(Protocol):
    """What the executor tells about the jobs it runs."""

    async def job_starting(self, job: Job) -> bool:
        """The job takes its slot; False: it was withdrawn meanwhile (not run)."""

    async def job_finished(self, job: Job, outcome: Outcome) -> None:
        """The job left its slot with ``outcome``."""

    def job_begins(self, job: Job, brief: bool) -> bool | None:
        """``job_starting`` without awaiting; None (nothing done): use ``job_starting``.

        ``brief``: the run ends within about one commit of the store's writer (executor's
        ``BRIEF_RUN_S``), so its start may be written with its finish, not asked for apart."""

    def job_ended(self, job: Job, outcome: Outcome) -> None:
        """``job_finished`` for a job ``job_begins`` started; what it waits for, it chains."""


class Dispatcher(Protocol):
    """Where the scheduler sends placed jobs, and what it asks of the jobs sent."""

    def dispatch(self, job: Job) -> None:
        """Queue a placed job on its device."""

    def busy(self) -> int:
        """Return the jobs dispatched or being placed and not finished."""

    def queued(self) -> list[Job]:
        """Return the dispatched jobs that have not started (preemption candidates)."""

    def withdraw(self, job: Job) -> None:
        """Take a preempted job off its device queue."""


class Offload(Protocol):
    """Where the scheduler offers a placed (or unplaceable) task before running it here."""

    def take(self, task: Waiting, decision: Decision) -> bool:
        """True: the mesh takes ``task`` (it is not dispatched here)."""
