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


def _job(placer: Placer, seq: int) -> Job:
    contract = TaskContract(
        Semantics(gflops=2.0, precision="int8"), Requirements(model_format=None)
    )
    return placed_job(f"t{seq}", placer.place_one(contract), seq=seq)


class _Running:
    """The executor's view OverrunWatch reads: running jobs by device and their starts."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Job, float]] = []

    def running(self) -> list[tuple[str, Job, float]]:
        return list(self.jobs)


class _Harness:
    """A placer, an executor's running/started view, and a requeue that records."""

    def __init__(self) -> None:
        # "fast" wins every placement until it is suspect; "slow" is the fallback
        self.placer = Placer(
            [_device("fast", 4000.0), _device("slow", 1000.0)], Policy.template("latency-first")
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


def test_an_overrun_marks_the_device_suspect_and_moves_its_queue() -> None:
    """Queued jobs behind a 4x overrun are re-placed, and land on the other device."""
    h = _Harness()
    running = _job(h.placer, 0)
    assert running.decision.device_id == "fast"
    h.queued = [_job(h.placer, i) for i in range(1, 3)]
    assert {j.decision.device_id for j in h.queued} == {"fast"}
    h.executor.jobs = [("fast", running, 100.0)]
    estimate = running.decision.service_s

    assert asyncio.run(h.watch.check(100.0 + 2 * estimate)) == []  # slow, not yet overrunning
    moved = asyncio.run(h.watch.check(100.0 + 5 * estimate))
    assert moved == h.requeued and {j.task_id for j in moved} == {"t1", "t2"}
    assert h.placer.live("fast")["health"] == Health.SUSPECT
    assert h.watch.flagged == {"fast": running} and h.watch.moved == 2
    again = h.placer.place_one(running.decision.task)  # what re-placing one of them does
    assert again.device_id == "slow"
    assert asyncio.run(h.watch.check(100.0 + 9 * estimate)) == []  # flagged once only

    charged = h.placer.live("fast")["queued_s"]
    h.watch.finished(running)
    assert h.placer.live("fast")["health"] == Health.ONLINE
    assert h.placer.live("fast")["queued_s"] == pytest.approx(charged - 4 * estimate)  # returned
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
