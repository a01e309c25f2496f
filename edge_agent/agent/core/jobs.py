"""The agent's dispatched jobs: from placed to recorded, for the scheduler and the mesh.

``Jobs`` is the scheduler's ``Dispatcher`` and the executor's ``JobHooks`` (roles.py): it
keeps the jobs handed to the executor, records their start (the store's group commit) and
their finish (placer feedback, energy, telemetry, the store, the metrics, the tenant's pool
given back), and runs the jobs the mesh placed outside the scheduler (``run_job``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

from edge_agent.agent.core.executor import Job, Outcome
from edge_agent.agent.core.store_runs import Finish
from edge_agent.agent.sensing.carbon import task_carbon
from edge_agent.agent.sensing.power import energy_between
from edge_agent.errors import InvalidInput

if TYPE_CHECKING:
    from edge_agent.agent.service import Agent

_log = logging.getLogger(__name__)


class Jobs:
    """The jobs dispatched to the agent's executor and what happens when they run."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._jobs: dict[str, Job] = {}
        self.finish_waiters: dict[str, asyncio.Future[Outcome]] = {}  # task id -> outcome
        self.slo_misses = 0  # failed, or over the contract's latency bound

    def get(self, task_id: str) -> Job | None:
        """Return the dispatched job of ``task_id``, if any."""
        return self._jobs.get(task_id)

    def forget(self, task_id: str) -> None:
        """Drop a job withdrawn before it started (cancelled)."""
        self._jobs.pop(task_id, None)

    # --- Dispatcher (the scheduler's) -------------------------------------------------
    def dispatch(self, job: Job) -> None:
        """Queue a placed job on its device."""
        self._jobs[job.task_id] = job
        self.agent.executor.submit(job)

    def busy(self) -> int:
        """Return the jobs dispatched or being placed and not finished."""
        return self.agent.executor.backlog() + len(self.agent.scheduler.placing)

    def queued(self) -> list[Job]:
        """Return the dispatched jobs that have not started (preemption candidates)."""
        running = self.agent.executor.is_running
        return [job for job in self._jobs.values() if not job.cancelled and not running(job)]

    def withdraw(self, job: Job) -> None:
        """Take a preempted job off its device queue (the scheduler places it again)."""
        job.cancelled = True
        self._jobs.pop(job.task_id, None)

    async def requeue(self, jobs: list[Job]) -> None:
        """Withdraw queued jobs from their device, release them, and place them again."""
        agent = self.agent
        for job in jobs:
            self.withdraw(job)
            agent.placer.release(job.decision)
        await agent.store.placed([], [job.task_id for job in jobs])
        for job in jobs:
            agent.scheduler.requeue(job)

    async def run_job(self, job: Job) -> Outcome:
        """Run a job placed outside the scheduler (the mesh); return its outcome.

        Cancelled before the job starts, it is withdrawn (the task cancelled, its devices
        released); once started it runs to its end, as every run does.
        """
        waiter: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.finish_waiters[job.task_id] = waiter
        self.dispatch(job)
        try:
            return await asyncio.shield(waiter)
        except asyncio.CancelledError:
            self.finish_waiters.pop(job.task_id, None)
            if not self.agent.executor.is_running(job):
                await asyncio.shield(self.agent.cancel(job.task_id))
            raise

    # --- JobHooks (the executor's) ----------------------------------------------------
    async def job_starting(self, job: Job) -> bool:
        """Start ``job`` unless cancelled (in memory: ``cancel`` marks it before its commit);
        its start is recorded through the store's group commit, not waited for here."""
        if job.cancelled:
            return False
        self._begin(job)
        agent = self.agent
        device = agent.fleet.device(job.device_id)
        if agent.meters.measures(device):
            job.energy_start = await asyncio.to_thread(agent.meters.read, device)
        return True

    def job_begins(self, job: Job, brief: bool) -> bool | None:
        """``job_starting`` without a task: None (nothing done) when a power meter must be
        read first, which only ``job_starting`` awaits.

        A brief run's start is not asked for: it ends before the writer could commit it, so
        its finish writes it (one row write, placed -> done or failed, as a start taken back
        is), with no start future, no take-back and no start op left with nothing to write.
        """
        if job.cancelled:
            return False
        agent = self.agent
        if agent.meters.measures(agent.fleet.device(job.device_id)):
            return None
        if brief:
            job.begun_at = time.time()
            agent.placer.started(job.decision)  # its queue charge now shrinks as it runs
        else:
            self._begin(job)
        return True

    def _begin(self, job: Job) -> None:
        agent = self.agent
        job.started = agent.store.started(job.task_id)
        job.started.add_done_callback(self._start_recorded)
        agent.placer.started(job.decision)  # its queue charge now shrinks as it runs

    def _start_recorded(self, started: asyncio.Future[bool]) -> None:
        if not started.cancelled() and started.exception() is None and started.result():
            self.agent.metrics.move("placed", "running")

    async def job_finished(self, job: Job, outcome: Outcome) -> None:
        """Feed the outcome back to the placer and record it (durably) with its telemetry.

        A start the writer has not taken yet is written with the finish (``job_ended``)."""
        self._jobs.pop(job.task_id, None)
        started = job.started
        asked = None if started is None or started.done() else self._take_back(started)
        if started is not None and asked is None and not await started:
            self._dropped(job)
            return
        energy = None
        if job.energy_start is not None and not outcome.emulated:
            device = self.agent.fleet.device(job.device_id)
            energy = energy_between(
                job.energy_start, await asyncio.to_thread(self.agent.meters.read, device)
            )
        try:
            finish = self._finish(job, outcome, energy, asked)
            moved = await self.agent.store.finished(*finish)
        except BaseException:
            if started is not None and asked is not None:
                started.cancel()  # nobody waits for it: the task stays placed in the file
            raise
        if started is not None and asked is not None:
            self._combined(job, outcome, finish.state, started, moved)
        else:
            self._recorded(job, outcome, finish.state)

    def job_ended(self, job: Job, outcome: Outcome) -> None:
        """``job_finished`` by callbacks (a job ``job_begins`` started: no energy reading):
        after its start's commit, the finish is recorded; after the finish's, the rest.

        A start the writer has not taken yet is taken back and written with the finish
        (write-combining: one row write, placed -> done or failed, one commit waited on).
        """
        self._jobs.pop(job.task_id, None)
        started = job.started
        if started is None and job.begun_at is not None:  # brief: never asked for apart
            self._end_with_start(job, outcome, None, job.begun_at)
            return
        if started is None or started.done():
            self._end_started(job, outcome, started)
            return
        asked = self._take_back(started)
        if asked is None:  # being written: the finish follows its commit
            started.add_done_callback(functools.partial(self._end_started, job, outcome))
            return
        self._end_with_start(job, outcome, started, asked)

    def _end_with_start(
        self,
        job: Job,
        outcome: Outcome,
        started: asyncio.Future[bool] | None,
        started_at: float,
    ) -> None:
        """Record the finish with its start (asked at ``started_at``; ``started``: its future,
        taken back, or None for a brief run's, never asked for apart)."""
        try:
            finish = self._finish(job, outcome, None, started_at)
            self.agent.store.finished_then(
                finish, functools.partial(self._end_combined, job, outcome, finish.state, started)
            )
        except Exception:
            if started is not None:
                started.cancel()  # nobody waits for it: the task stays placed in the file
            _log.exception("task %s failed in the agent", job.task_id)

    def _end_started(
        self, job: Job, outcome: Outcome, started: asyncio.Future[bool] | None
    ) -> None:
        try:
            if started is not None and not started.result():
                self._dropped(job)
                return
            finish = self._finish(job, outcome, None)
            self.agent.store.finished_then(
                finish, functools.partial(self._end_recorded, job, outcome, finish.state)
            )
        except Exception:  # the store closed, a hook's step failed: as a run task logs it
            _log.exception("task %s failed in the agent", job.task_id)

    def _end_recorded(
        self,
        job: Job,
        outcome: Outcome,
        state: str,
        moved: bool | None,
        error: BaseException | None,
    ) -> None:
        """A finish (its start written apart) has committed (or failed): what follows it."""
        if error is None:
            try:
                self._recorded(job, outcome, state)
                return
            except Exception as err:
                error = err
        _log.error("task %s failed in the agent", job.task_id, exc_info=error)

    def _end_combined(
        self,
        job: Job,
        outcome: Outcome,
        state: str,
        started: asyncio.Future[bool] | None,
        moved: bool | None,
        error: BaseException | None,
    ) -> None:
        """A finish written with its start has committed (or failed)."""
        if error is None:
            try:
                self._combined(job, outcome, state, started, bool(moved))
                return
            except Exception as err:
                error = err
        if started is not None and not started.done():
            started.cancel()  # nobody waits for it: the task stays placed in the file
        _log.error("task %s failed in the agent", job.task_id, exc_info=error)

    def _take_back(self, started: asyncio.Future[bool]) -> float | None:
        """Take a start the writer has not taken back, to write it with the finish; return
        when it was asked (None: being or already written). Its count moves with the finish."""
        asked = self.agent.store.take_back_start(started)
        if asked is not None:
            started.remove_done_callback(self._start_recorded)
        return asked

    def _combined(
        self,
        job: Job,
        outcome: Outcome,
        state: str,
        started: asyncio.Future[bool] | None,
        moved: bool,
    ) -> None:
        """A finish written with its start has committed: resolve the start's future (if
        any) as its own write would have, then what follows a finish."""
        if started is not None:
            started.set_result(moved)
        if not moved:  # never expected (write_finished logged it); whoever moved it owns it
            _log.error("task %s ran but was no longer placed; its outcome is dropped", job.task_id)
            return
        self._recorded(job, outcome, state, "placed")

    def _dropped(self, job: Job) -> None:
        # never expected: cancel and preemption take a job back before their commit;
        # whoever moved the task owns it
        _log.error("task %s ran but was no longer placed; its outcome is dropped", job.task_id)
        self.agent.placer.release(job.decision)

    def _finish(
        self, job: Job, outcome: Outcome, energy: float | None, started_at: float | None = None
    ) -> Finish:
        """Feed the outcome back; return the record to ask for (the caller asks the store).
        ``started_at``: its start is written with it."""
        agent = self.agent
        agent.overrun.finished(job)
        d = job.decision
        try:
            if outcome.ok:
                agent.placer.feedback(d, latency_s=max(outcome.latency_s, 1e-9), energy_j=energy)
            else:
                agent.placer.release(d)
        except InvalidInput as err:
            _log.warning("feedback for task %s refused: %s", job.task_id, err)
            agent.placer.release(d)
        state = "done" if outcome.ok else "failed"
        bound = d.task.requirements.max_latency_s
        if not outcome.ok or (bound > 0 and outcome.latency_s > bound):
            self.slo_misses += 1
        agent.deferrer.ran(d.service_s)
        telemetry = self._telemetry(job, outcome, energy)
        return Finish(job.task_id, state, outcome.result, outcome.error, telemetry, started_at)

    def _recorded(self, job: Job, outcome: Outcome, state: str, before: str = "running") -> None:
        """What follows a durable finish: metrics, the mesh's waiter, the tenant's pool.

        ``before``: the state the row left (placed for a finish written with its start)."""
        agent = self.agent
        agent.metrics.move(before, state)
        waiter = self.finish_waiters.pop(job.task_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(outcome)
        if outcome.ok:
            agent.metrics.served(outcome.latency_s, outcome.emulated)
        if outcome.result and outcome.result.get("over_estimate"):
            agent.metrics.over_estimate.inc()
        agent.scheduler.pools.release(job.task_id)
        agent.scheduler.poke()

    def _telemetry(self, job: Job, outcome: Outcome, energy: float | None) -> dict[str, Any]:
        d = job.decision
        device = self.agent.fleet.device(job.device_id)
        return {
            "kind": "task",
            "device": job.device_id,  # the decision builds its id tuple per call
            "task_class": d.task.task_class,
            "latency_s": outcome.latency_s,
            "estimate_s": d.service_s,
            "energy_j": energy,  # None: the platform reports no power for this device
            "emulated": int(outcome.emulated),
            **task_carbon(self.agent.carbon, device, energy, d.energy_j),
        }
