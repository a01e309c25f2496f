"""A device's slots and queue in the executor, and how many slots a profile gives it.

Most devices have one slot. An FPGA whose profile gives partial-reconfiguration slots
(``pr_slots`` N, 2..4) runs up to N jobs side by side, one per slot, each slot holding one
configuration; a job needing configuration C runs in the slot holding C (waiting for it
when busy), else in a free slot, which loads C first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from edge_agent.agent.core.fleet import Fleet
from edge_agent.agent.core.job_queue import JobQueue
from edge_agent.agent.core.runners import Job
from edge_agent.errors import InvalidInput
from edge_agent.resources.vocab import DeviceKind


@dataclass(eq=False)
class Slot:
    """One slot of a device: the job it runs, when its service started, its configuration."""

    job: Job | None = None
    started: float = 0.0  # perf_counter when the running job's service began
    config: int = 0  # FPGA configuration loaded here (0: none)


class DeviceSlots:
    """A device's queue and slots (one slot unless an FPGA has partial reconfiguration)."""

    def __init__(self, slots: int, loaded: int) -> None:
        self.queue = JobQueue()
        self.slots = [Slot(config=loaded if k == 0 else 0) for k in range(slots)]
        self.busy = 0  # slots holding a job (kept by _take_slot and _free)
        self.next_victim = 0  # the slot a new configuration replaces when none is empty
        self.wake = asyncio.Event()
        self.runs: set[asyncio.Task[None]] = set()
        #: emulated runs driven by loop callbacks (``Executor._begin_inline``): job -> timer
        self.timers: dict[Job, asyncio.TimerHandle] = {}

    def slot_for(self, config: int) -> int | None:
        """Return the free slot a job needing FPGA ``config`` (0: none) runs in, or None
        when it must wait: the slot holding it, else an empty one, else round-robin."""
        slots = self.slots
        free = [k for k, s in enumerate(slots) if s.job is None]
        if not config:
            return free[0] if free else None
        holding = [k for k, s in enumerate(slots) if s.config == config]
        if holding:  # loaded: that slot, no reconfiguration (waits while it is busy)
            return next((k for k in holding if slots[k].job is None), None)
        empty = [k for k in free if slots[k].config == 0]
        if empty:
            return empty[0]
        n = len(slots)
        for step in range(n):  # round-robin over the slots, the first free one
            k = (self.next_victim + step) % n
            if slots[k].job is None:
                self.next_victim = (k + 1) % n
                return k
        return None


def profile_slots(fleet: Fleet, device_id: str) -> int:
    """Return the partial-reconfiguration slots of an FPGA's profile (``pr_slots``), else 1."""
    device = fleet.device(device_id)
    if device.kind != DeviceKind.FPGA or fleet.profile is None:
        return 1
    try:
        spec = fleet.profile.device_spec(device_id.rsplit("/", 1)[-1])
    except InvalidInput:
        return 1
    figure = spec.get("pr_slots")
    return 1 if figure is None else int(figure["value"])  # 1..4, checked with the profile
