"""Overrun watch: a task running far over its estimate moves the work queued behind it.

A running task is never stopped. When one has run ``OVER_ESTIMATE`` times its estimated
service time (and at least ``MIN_OVERRUN_S``), its device is marked suspect in the placer
(the kernel adds a penalty to a suspect device's score), and every job queued on that
device but not started is withdrawn, released and placed again, elsewhere if another
device now scores better. When the slow task finishes, the device is online again; its
feedback corrects the estimates. A device running several jobs side by side (FPGA slots)
is flagged for the first of them that overruns; once that one ends, another still
overrunning flags it again.

The watch charges no queue time itself. What the overrunning task still holds on its device
is the Placer's to count, for every started task (``jobs.py`` tells it ``started``): past
its charge a task holds its overrun so far again (at least as long again as it has run when
nobody measured its estimate), growing with the run and returned whole by its
``feedback``/``release`` (``placement.running``). The placements that re-place the queued
jobs credit that running work first, so they see it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from edge_agent.agent.core.executor import OVER_ESTIMATE, Job
from edge_agent.placement import Placer
from edge_agent.resources.vocab import Health

_log = logging.getLogger(__name__)

#: How often running tasks are checked.
CHECK_INTERVAL_S = 0.05
#: An overrun shorter than this is not worth moving work for (scheduling noise, I/O): a
#: millisecond task runs 4x over on a GC pause. The Placer's ``running.OVERRUN_EVIDENCE``
#: has no such floor: what it does (a correction raised to a lower bound of the run's own
#: time) anticipates what that run's feedback will say anyway (see ``runners.OVER_ESTIMATE``).
MIN_OVERRUN_S = 0.25

Requeue = Callable[[list[Job]], Awaitable[None]]


class Running(Protocol):
    """What the watch reads of the executor: every running job, its device, its start."""

    def running(self) -> Sequence[tuple[str, Job, float]]:
        """Return (device id, job, perf_counter its service started) per running job."""


class OverrunWatch:
    """Flags overrunning tasks and re-places the work queued behind them."""

    def __init__(
        self,
        executor: Running,
        placer: Placer,
        queued: Callable[[], list[Job]],
        requeue: Requeue,
        factor: float = OVER_ESTIMATE,
        min_overrun_s: float = MIN_OVERRUN_S,
    ) -> None:
        self._executor, self._placer = executor, placer
        self._queued, self._requeue = queued, requeue
        self._factor, self._min_overrun = factor, min_overrun_s
        self.flagged: dict[str, Job] = {}  # device id -> its overrunning job
        self.moved = 0  # jobs re-placed because of an overrun

    async def run(self) -> None:
        """Check the running tasks every CHECK_INTERVAL_S (until cancelled).

        A check that comes more than an interval late is skipped: the event loop was
        blocked (a large batch being placed on a loaded box), and an emulated run's elapsed
        time then measures that stall, not the device; the next check on time judges it.
        """
        last = time.perf_counter()
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            now = time.perf_counter()
            if now - last <= 2 * CHECK_INTERVAL_S:
                await self.check(now)
            last = time.perf_counter()

    async def check(self, now: float) -> list[Job]:
        """Flag newly overrunning tasks; re-place their devices' queued jobs; return those."""
        moved: list[Job] = []
        for device_id, job, started in self._executor.running():
            if device_id in self.flagged:  # already suspect, its queue already moved
                continue
            estimate = job.decision.service_s
            elapsed = now - started
            if estimate <= 0 or elapsed <= max(self._factor * estimate, self._min_overrun):
                continue
            self.flagged[device_id] = job
            # its overrun is already in the device's queue: the Placer's running work
            self._placer.update_live(device_id, health=Health.SUSPECT)
            behind = [j for j in self._queued() if j.decision.device_ids[0] == device_id]
            _log.warning(
                "task %s on %s has run %.3fs, %.1fx its estimate: re-placing %s queued tasks",
                job.task_id,
                device_id,
                elapsed,
                elapsed / estimate,
                len(behind),
            )
            if behind:
                await self._requeue(behind)
                moved += behind
        self.moved += len(moved)
        return moved

    def finished(self, job: Job) -> None:
        """Bring a flagged device back online when its overrunning job ends."""
        if not self.flagged:  # the usual case, once per finished task: nothing to copy
            return
        for device_id, flagged in list(self.flagged.items()):
            if flagged is job:
                del self.flagged[device_id]
                self._placer.update_live(device_id, health=Health.ONLINE)
