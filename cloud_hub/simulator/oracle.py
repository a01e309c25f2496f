"""Earliest-finish baselines for the deadline benchmark: clairvoyant, and datasheet-only.

``ClairvoyantOracle`` knows every device's true mean speed (hidden slowdowns included) and
the true remaining work in every queue (``FleetState.free_at``: the real draws of the work
already committed, run in the device's own order), but not the random draw of the task it
is placing: it expects the mean, behind that work. ``DatasheetGreedy`` believes the
datasheet (the published figure without any hidden slowdown) for the task and for the work
queued ahead of it. Both pick the earliest expected finish, ties to the lower device
index; neither learns.
"""

from __future__ import annotations

import math

from cloud_hub.simulator.baselines import _Base
from cloud_hub.simulator.engine import FleetState
from cloud_hub.simulator.slo_scenario import datasheet_s
from cloud_hub.simulator.workload import Task


class ClairvoyantOracle(_Base):
    """Earliest expected finish from true speeds and true queues (not the task's own draw)."""

    name = "oracle"

    def expected_finish(self, task: Task, dev: int, now: float, state: FleetState) -> float:
        """Return when ``task`` would finish on ``dev``, expecting the mean service time."""
        tt = (task.model, task.precision)
        mean = state.truth.base[tt][dev] * math.exp(state.truth.sigma**2 / 2) * task.work
        start = max(state.free_at[dev], state.ready_at(task, dev, now))
        return start + state.reconfig_s(task, dev) + mean

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return the feasible device with the earliest expected finish."""
        devs = self.feasible(task, state)
        if not devs:
            return None
        return min(devs, key=lambda d: (self.expected_finish(task, d, now, state), d))


class DatasheetGreedy(_Base):
    """Earliest finish believing the datasheet, for the task and for every queued job."""

    name = "datasheet-greedy"

    def queued_s(self, dev: int, now: float, state: FleetState) -> float:
        """Return the datasheet's idea of the work still ahead on ``dev`` at ``now``."""
        total = 0.0
        for job in state.pending[dev]:
            promised = datasheet_s(state.truth, (job.task.model, job.task.precision), dev)
            promised *= job.task.work
            total += max(0.0, promised - (now - job.start))  # running
        for task in state.queued_tasks(dev):  # not started, input in or not
            total += datasheet_s(state.truth, (task.model, task.precision), dev) * task.work
        return total

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        """Return the feasible device the datasheet says finishes ``task`` first."""
        devs = self.feasible(task, state)
        if not devs:
            return None
        tt = (task.model, task.precision)

        def finish(d: int) -> float:
            start = max(now + self.queued_s(d, now, state), state.ready_at(task, d, now))
            return start + datasheet_s(state.truth, tt, d) * task.work

        return min(devs, key=lambda d: (finish(d), d))
