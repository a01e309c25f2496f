"""Overrun watch: a task far over its estimate moves the queued work behind it."""

from __future__ import annotations

import asyncio

import pytest

from edge_agent.agent.core.executor import Job
from edge_agent.agent.core.overrun import OverrunWatch
from edge_agent.placement import (
    Capability,
    Device,
    Placer,
    Policy,
    Requirements,
    Semantics,
    TaskContract,
)
from edge_agent.resources.vocab import DeviceKind, Health, Precision
from tests.support.jobs import placed_job


def _device(dev_id: str, gops: float) -> Device:
    cap = Capability(
        peak_int8_gops=gops,
        peak_fp16_gops=gops,
        peak_fp32_gops=gops,
        memory_bytes=8e9,
        memory_bw_gbs=50.0,
        idle_power_w=1.0,
        max_power_w=5.0,
        precision_mask=(1 << Precision.INT8) | (1 << Precision.FP32),
    )
    return Device(dev_id, DeviceKind.NPU, dev_id, cap)


def _contract() -> TaskContract:
    return TaskContract(Semantics(gflops=2.0, precision="int8"), Requirements(model_format=None))


def _job(placer: Placer, seq: int) -> Job:
    return placed_job(f"t{seq}", placer.place_one(_contract()), seq=seq)


class _Running:
    """The executor's view OverrunWatch reads: running jobs by device and their starts."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Job, float]] = []

    def running(self) -> list[tuple[str, Job, float]]:
        return list(self.jobs)


class _Harness:
    """A placer, an executor's running/started view, and a requeue that records.

    One clock for both, as in the agent (the Placer's ``time.monotonic`` and the executor's
    ``perf_counter`` both measure the same run): ``now``.
    """

    def __init__(self) -> None:
        self.now = 0.0
        # "fast" wins every placement until it is suspect; "slow" is the fallback (8x
        # slower: at 4x, latency-first's congestion charge sent a third queued job there)
        self.placer = Placer(
            [_device("fast", 4000.0), _device("slow", 500.0)],
            Policy.template("latency-first"),
            clock=lambda: self.now,
        )
        self.executor = _Running()
        self.queued: list[Job] = []
        self.requeued: list[Job] = []
        self.watch = OverrunWatch(
            self.executor, self.placer, lambda: self.queued, self._requeue, min_overrun_s=0.0
        )

    async def _requeue(self, jobs: list[Job]) -> None:
        for job in jobs:
            self.placer.release(job.decision)
            self.queued.remove(job)
        self.requeued += jobs

    def start(self, device_id: str, job: Job, at: float) -> None:
        """Run ``job`` on ``device_id`` since ``at``, told to the placer as ``jobs.py`` does."""
        self.executor.jobs.append((device_id, job, at))
        self.placer.started(job.decision, now=at)

    def check(self, at: float) -> list[Job]:
        """The watch's check at ``at``."""
        self.now = at
        return asyncio.run(self.watch.check(at))

    def queue_placed_against(self, device_id: str) -> float:
        """Return ``device_id``'s queued seconds as the next placement sees them."""
        self.placer.preview(_contract())  # credits the running work, commits nothing
        return self.placer.live(device_id)["queued_s"]


def test_an_overrun_marks_the_device_suspect_and_moves_its_queue() -> None:
    """Queued jobs behind a 4x overrun are re-placed, and land on the other device."""
    h = _Harness()
    running = _job(h.placer, 0)
    assert running.decision.device_id == "fast"
    h.queued = [_job(h.placer, i) for i in range(1, 3)]
    assert {j.decision.device_id for j in h.queued} == {"fast"}
    h.start("fast", running, 100.0)
    estimate = running.decision.service_s

    assert h.check(100.0 + 2 * estimate) == []  # slow, not yet overrunning
    moved = h.check(100.0 + 5 * estimate)
    assert moved == h.requeued and {j.task_id for j in moved} == {"t1", "t2"}
    assert h.placer.live("fast")["health"] == Health.SUSPECT
    assert h.watch.flagged == {"fast": running} and h.watch.moved == 2
    again = h.placer.place_one(running.decision.task)  # what re-placing one of them does
    assert again.device_id == "slow"
    assert h.check(100.0 + 9 * estimate) == []  # flagged once only

    charged = h.placer.live("fast")["queued_s"]
    h.watch.finished(running)
    assert h.placer.live("fast")["health"] == Health.ONLINE
    assert h.placer.live("fast")["queued_s"] == charged  # the placer's to return, not the watch's
    assert h.watch.flagged == {}


def test_work_on_other_devices_stays_where_it_is() -> None:
    """Only the overrunning device's queue moves."""
    h = _Harness()
    running = _job(h.placer, 0)
    busy = h.placer.live("fast")["queued_s"]
    h.placer.update_live("fast", queued_s=busy + 1.0)  # so this one goes to "slow"
    elsewhere = _job(h.placer, 1)
    h.placer.update_live("fast", queued_s=busy)
    assert elsewhere.decision.device_id == "slow"
    h.queued = [elsewhere]
    h.executor.jobs = [("fast", running, 0.0)]
    moved = asyncio.run(h.watch.check(10 * running.decision.service_s))
    assert moved == [] and h.queued == [elsewhere]
    assert h.placer.live("fast")["health"] == Health.SUSPECT


def test_jobs_side_by_side_flag_their_device_once_each_in_turn() -> None:
    """Two jobs running at once on one device (FPGA slots): the overrunning one flags it."""
    h = _Harness()
    first, second = _job(h.placer, 0), _job(h.placer, 1)
    estimate = first.decision.service_s
    h.executor.jobs = [("fast", first, 100.0), ("fast", second, 100.0 + 3 * estimate)]
    asyncio.run(h.watch.check(100.0 + 5 * estimate))  # only the first is 4x over
    assert h.watch.flagged == {"fast": first}
    asyncio.run(h.watch.check(100.0 + 9 * estimate))  # the second too, the device already is
    assert h.watch.flagged == {"fast": first}
    h.watch.finished(first)
    h.executor.jobs = [("fast", second, 100.0 + 3 * estimate)]
    assert h.placer.live("fast")["health"] == Health.ONLINE
    asyncio.run(h.watch.check(100.0 + 9 * estimate))  # still running 6x over: flagged again
    assert h.watch.flagged == {"fast": second}
    assert h.placer.live("fast")["health"] == Health.SUSPECT


@pytest.mark.parametrize("measured", [True, False])
def test_an_overrun_is_charged_once_by_the_placers_rule(measured: bool) -> None:
    """A flagged task's device holds what ``running.remaining_s`` says, once.

    The Placer, told the task started (``jobs.py``), counts a task past its charge as its
    overrun so far again (at least as long again as it has run when nobody measured its
    estimate); the watch adding the overrun to the device's queue as well would make the
    device look about twice as busy as that rule says. When the task ends, all of it is
    returned.
    """
    h = _Harness()
    if measured:  # one earlier task measured the pair at its estimate
        first = _job(h.placer, 9)
        h.placer.feedback(first.decision, latency_s=first.decision.service_s)
    running = _job(h.placer, 0)
    charge = running.decision.charges[0]
    h.start("fast", running, 100.0)
    assert h.check(100.0 + 5 * charge) == []
    assert h.watch.flagged == {"fast": running}
    held = 4 * charge if measured else 5 * charge  # |charge - elapsed|, or elapsed
    assert h.queue_placed_against("fast") == pytest.approx(held)

    h.watch.finished(running)  # as jobs.py ends it: the watch, then the placer
    h.placer.feedback(running.decision, latency_s=6 * charge)
    assert h.placer.live("fast")["health"] == Health.ONLINE
    assert h.queue_placed_against("fast") == pytest.approx(0.0)
