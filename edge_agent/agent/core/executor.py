"""Runs placed tasks on their devices: onnxruntime for real, emulation for board profiles.

Each device has a priority queue and one or more slots. Most devices have one slot and run
one job at a time. An FPGA whose profile gives partial-reconfiguration slots (``pr_slots``
N, 2..4) runs up to N jobs side by side, one per slot, each slot holding one configuration
and 1/N of the fabric (the kernel's model: a job takes N times as long). A job needing
configuration C runs in the slot holding C (waiting for it when busy, no reconfiguration),
else in a free slot, which loads C first (the profile's ``reconfig_s``; emulated: slept).
The placer is told the slot count at start and what each slot holds after every load.

ONNX inference and session loading run in a thread pool, never on the event loop; an
emulated device sleeps the profile's published latency for the model (the kernel's roofline
when none is published) with lognormal jitter. A command task runs its (allowlisted) argv.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from edge_agent.agent.core.emulation import Emulation
from edge_agent.agent.core.fleet import Fleet
from edge_agent.agent.core.runners import (
    OVER_ESTIMATE,
    Job,
    Outcome,
    Sessions,
    checked,
    run_command,
)
from edge_agent.agent.core.slots import DeviceSlots, Slot, profile_slots
from edge_agent.placement import Placer
from edge_agent.resources.vocab import DeviceKind

if TYPE_CHECKING:
    from edge_agent.agent.core.roles import JobHooks

_log = logging.getLogger(__name__)
__all__ = ["OVER_ESTIMATE", "Executor", "Job", "Outcome", "Spawn", "profile_slots"]

#: how often ``Executor.stop`` looks whether the runs by callbacks have ended
STOP_POLL_S = 0.01
#: an emulated run shorter than this is brief: it ends in the loop's next turns (uvloop's
#: ``call_later`` runs a delay under half a millisecond as ``call_soon``), before the writer
#: could commit its start (a commit's fsync takes about that long): the hooks write its start
#: with its finish instead of asking for it apart (``JobHooks.job_begins``)
BRIEF_RUN_S = 0.001

Spawn = Callable[[str, Callable[[], Coroutine[Any, Any, None]]], "asyncio.Task[None]"]


class Executor:
    """Per-device job queues and slots; reports starts and outcomes to its ``JobHooks``.

    ``hooks.job_starting`` returns False when the job must not run after all (it was
    cancelled); it decides from memory (``Job.cancelled``), not from a commit.
    ``hooks.job_finished`` runs after the slot is freed.
    An emulated job runs as loop callbacks when ``hooks.job_begins`` can start it without
    awaiting anything; its outcome then goes to ``hooks.job_ended``. ``job_begins`` is told
    whether the run is brief (``BRIEF_RUN_S``).
    ``busy_s`` counts fabric time: a job in one of N slots adds its time / N.
    """

    def __init__(self, fleet: Fleet, placer: Placer, hooks: JobHooks, jitter: float) -> None:
        self.fleet = fleet
        self.placer = placer
        self._hooks = hooks
        self._emulation = Emulation(fleet, placer, jitter)
        self._devices: dict[str, DeviceSlots] = {}
        for d in fleet.devices:
            slots = profile_slots(fleet, d.id)
            self._devices[d.id] = DeviceSlots(slots, d.live.loaded_config)
            if slots > 1:  # the placer models the slots: 1/slots of the fabric each
                placer.update_live(d.id, slots=slots, loaded_configs=self.loaded(d.id))
        self._workers: dict[str, asyncio.Task[None]] = {}
        self.busy_s: dict[str, float] = {d.id: 0.0 for d in fleet.devices}
        self._pool = ThreadPoolExecutor(
            max(1, sum(not d.emulated for d in fleet.devices)), thread_name_prefix="agent-run"
        )
        self._sessions = Sessions()
        self._stopping = False

    # --- what runs where ----------------------------------------------------------
    def slots(self, device_id: str) -> int:
        """Return how many jobs ``device_id`` runs side by side."""
        return len(self._devices[device_id].slots)

    def loaded(self, device_id: str) -> list[int]:
        """Return the configuration in each slot of ``device_id`` (0: none)."""
        return [s.config for s in self._devices[device_id].slots]

    def running_jobs(self, device_id: str) -> list[Job]:
        """Return the jobs running on ``device_id``, in slot order."""
        return [s.job for s in self._devices[device_id].slots if s.job is not None]

    def is_running(self, job: Job) -> bool:
        """Whether ``job`` has been taken off its queue into a slot (and not finished)."""
        device = self._devices.get(job.device_id)
        return device is not None and any(s.job is job for s in device.slots)

    def running(self) -> list[tuple[str, Job, float]]:
        """Return (device id, job, perf_counter its service started) for every running job."""
        return [
            (device_id, s.job, s.started)
            for device_id, device in self._devices.items()
            for s in device.slots
            if s.job is not None
        ]

    @property
    def current(self) -> dict[str, Job | None]:
        """Each device's first running job (None when idle); all of them: ``running_jobs``."""
        return {
            device_id: next((s.job for s in device.slots if s.job is not None), None)
            for device_id, device in self._devices.items()
        }

    # --- queues ---------------------------------------------------------------------
    def start(self, spawn: Spawn | None = None) -> None:
        """Start one dispatcher per device (through ``spawn``, a supervisor's, when given)."""
        for device_id in self._devices:
            name = f"agent-device-{device_id}"
            factory = functools.partial(self._dispatch, device_id)
            self._workers[device_id] = (
                asyncio.create_task(factory(), name=name) if spawn is None else spawn(name, factory)
            )

    def submit(self, job: Job) -> None:
        """Queue ``job`` on its (first) chosen device; wake its dispatcher if a slot is free.

        A device whose slots are all busy starts its next job when one frees (``_run``),
        not woken for every job queued behind them.
        """
        device = self._devices[job.device_id]
        device.queue.push(job)
        if device.busy < len(device.slots) and not device.wake.is_set():
            device.wake.set()

    def backlog(self) -> int:
        """Return the number of jobs queued or running on the devices."""
        return sum(len(d.queue) + d.busy for d in self._devices.values())

    async def stop(self, grace_s: float) -> None:
        """Stop taking jobs; wait up to ``grace_s`` for running ones, then cancel the rest.

        A cancelled run reports no outcome: its task stays running in the store and runs
        again after the restart (``Store.recover``), as after a crash.
        """
        self._stopping = True
        for worker in self._workers.values():
            worker.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        runs = [run for d in self._devices.values() for run in d.runs]
        if runs:
            await asyncio.wait(runs, timeout=grace_s)
        while self._timed() and loop.time() < deadline:  # runs by callbacks: polled
            await asyncio.sleep(min(STOP_POLL_S, max(0.0, deadline - loop.time())))
        for run in runs:
            run.cancel()
        for device in self._devices.values():
            for job, timer in list(device.timers.items()):
                timer.cancel()
                self._end_inline(device, job)
        await asyncio.gather(*runs, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _timed(self) -> int:
        """Return how many runs by callbacks are in flight."""
        return sum(len(d.timers) for d in self._devices.values())

    async def _dispatch(self, device_id: str) -> None:
        """Start queued jobs in free slots whenever woken, until stopped.

        It is woken by a job queued on an idle device; a run that ends starts the next
        job itself (``_run``), so a busy device's dispatcher sleeps.
        """
        device = self._devices[device_id]
        while not self._stopping:
            self._start_ready(device_id)
            device.wake.clear()
            await device.wake.wait()

    def _start_ready(self, device_id: str) -> None:
        """Start queued jobs in the device's free slots, each in its own run task."""
        device = self._devices[device_id]
        while not self._stopping:
            picked = self._pick(device_id)
            if picked is None:
                return
            job, k, reconfig = picked
            if not reconfig and self._begin_inline(device_id, k, job):
                continue
            run = asyncio.create_task(
                self._run(device_id, k, job, reconfig), name=f"agent-run-{job.task_id}"
            )
            device.runs.add(run)
            run.add_done_callback(device.runs.discard)

    # --- an emulated run as loop callbacks ---------------------------------------------
    def _begin_inline(self, device_id: str, k: int, job: Job) -> bool:
        """Run an emulated job in slot ``k`` by loop callbacks: its start, a timer, its end.

        No task, coroutine or sleep future per job (a tiny job's run is otherwise mostly
        that machinery). Returns False, having done nothing, when the job needs the task
        path (``_run``): a command, a real model, or hooks that must await the start.
        """
        if job.command is not None:
            return False
        device = self.fleet.device(device_id)
        if not (device.emulated or job.decision.task.model is None):
            return False
        slots = self._devices[device_id]
        try:
            target, source = self._emulation.target(job, len(slots.slots))
            begun = self._hooks.job_begins(job, target < BRIEF_RUN_S)
            if begun is None:
                return False
            if begun:
                start = time.perf_counter()
                slots.timers[job] = asyncio.get_running_loop().call_later(
                    target, self._end_emulated, device_id, k, job, start, target, source
                )
                return True
        except Exception:  # a hook failed: log it, keep the device serving
            _log.exception("device %s: task %s failed in the agent", device_id, job.task_id)
        self._free(slots, k)  # withdrawn meanwhile (cancelled), or failed: the slot is free
        return True

    def _end_emulated(
        self, device_id: str, k: int, job: Job, start: float, target: float, source: str
    ) -> None:
        """An emulated run's timer: free the slot, start the next job, report the outcome."""
        device = self._devices[device_id]
        wall = time.perf_counter() - start
        device.timers.pop(job, None)
        self.busy_s[device_id] += wall / len(device.slots)
        slot = device.slots[k]
        self._free(device, k)
        self._start_next(device_id)
        try:
            at = self._slot_index(device, slot)
            outcome = self._emulation.outcome(job, at, target, source, wall, 0.0)
            self._hooks.job_ended(job, outcome)
        except Exception:
            _log.exception("device %s: task %s failed in the agent", device_id, job.task_id)

    def _end_inline(self, device: DeviceSlots, job: Job) -> None:
        """Forget ``job``'s timer and free its slot (a run by callbacks was cancelled)."""
        device.timers.pop(job, None)
        for k, slot in enumerate(device.slots):
            if slot.job is job:
                self._free(device, k)

    def _pick(self, device_id: str) -> tuple[Job, int, float] | None:
        """Take the first queued job that can start now; return it, its slot, its load time.

        A job whose configuration another slot holds waits for that slot; the jobs behind
        it may start meanwhile. With one slot this is simply the next job of the queue
        (``JobQueue.pop``: under a deadline policy in ``edf.pop_next``'s order).
        """
        device = self._devices[device_id]
        slots = device.slots
        if not device.queue or device.busy == len(slots):
            return None
        if len(slots) == 1:
            device.queue.order_by_deadline(self.placer.policy.orders_by_deadline)
            job = device.queue.pop(time.time())
            if job is None:
                return None
            return self._take_slot(device_id, 0, job)
        for job in device.queue.candidates():
            k = self._slot_for(device_id, job)
            if k is not None:
                device.queue.take(job)
                return self._take_slot(device_id, k, job)
        return None

    def _take_slot(self, device_id: str, k: int, job: Job) -> tuple[Job, int, float]:
        """Put ``job`` in slot ``k`` (loading its configuration first where needed)."""
        reconfig = self._load(device_id, k, job.decision.task.requirements.config_id)
        device = self._devices[device_id]
        slot = device.slots[k]  # its service starts after the load
        slot.job, slot.started = job, time.perf_counter() + reconfig
        device.busy += 1
        return job, k, reconfig

    def _slot_for(self, device_id: str, job: Job) -> int | None:
        """Return the free slot ``job`` runs in, or None when it must wait."""
        fpga = self.fleet.device(device_id).kind == DeviceKind.FPGA
        config = job.decision.task.requirements.config_id if fpga else 0
        return self._devices[device_id].slot_for(config)

    def _load(self, device_id: str, k: int, config: int) -> float:
        """Load ``config`` into slot ``k`` of an FPGA; return the seconds it takes (0: there).

        The placer is told what every slot holds, so its reconfiguration costs follow the
        device, not only its own plan.
        """
        device = self.fleet.device(device_id)
        slot = self._devices[device_id].slots[k]
        if not config or device.kind != DeviceKind.FPGA or slot.config == config:
            return 0.0
        slot.config = config
        self.placer.update_live(device_id, loaded_configs=self.loaded(device_id))
        return device.capability.reconfig_s

    async def _run(self, device_id: str, k: int, job: Job, reconfig: float) -> None:
        """Run ``job`` in slot ``k``; report its start and outcome.

        The slot is held for the run only: the hooks record the start and the outcome
        through the store's group commit without the slot waiting for either commit, so the
        device serves its next job while this one's outcome becomes durable.
        """
        device = self._devices[device_id]
        start = time.perf_counter()
        held = True
        try:
            if not await self._hooks.job_starting(job):  # cancelled meanwhile
                return
            outcome = await self._execute(job, device.slots[k], reconfig)
            self.busy_s[device_id] += (time.perf_counter() - start) / len(device.slots)
            held = self._free(device, k)
            self._start_next(device_id)
            await self._hooks.job_finished(job, outcome)
        except asyncio.CancelledError:
            raise
        except Exception:  # a hook failed: log it, keep the device serving
            _log.exception("device %s: task %s failed in the agent", device_id, job.task_id)
        finally:
            if held:
                self._free(device, k)
                device.wake.set()  # the dispatcher starts the next job

    def _start_next(self, device_id: str) -> None:
        """Start the next job in the slot a run just freed, from that run (no wake-up of
        the dispatcher per job); on an error the dispatcher takes over."""
        try:
            self._start_ready(device_id)
        except Exception:
            _log.exception("device %s: starting its next job failed", device_id)
            self._devices[device_id].wake.set()

    @staticmethod
    def _free(device: DeviceSlots, k: int) -> bool:
        """Free slot ``k`` of ``device``; return False (no longer held)."""
        if device.slots[k].job is not None:
            device.slots[k].job = None
            device.busy -= 1
        return False

    def resume(self, job: Job) -> None:
        """Let a job held back (``cancelled`` while its cancel was decided) start after all."""
        job.cancelled = False
        device = self._devices[job.device_id]
        if any(queued is job for queued in device.queue):
            device.wake.set()
        else:  # _pick dropped it meanwhile
            self.submit(job)

    async def _execute(self, job: Job, slot: Slot, reconfig: float) -> Outcome:
        """Run ``job`` and return its outcome; an error of the task is an outcome, not raised."""
        try:
            if job.command is not None:
                return await run_command(job.command)
            device = self.fleet.device(job.device_id)
            model = job.decision.task.model
            if device.emulated or model is None:
                return await self._emulate(job, slot, reconfig)
            loop = asyncio.get_running_loop()
            provider = device.capability.execution_provider
            started = time.perf_counter()
            result = await loop.run_in_executor(self._pool, self._sessions.run, model, provider)
            result["wall_s"] = time.perf_counter() - started
            return checked(job, Outcome(True, result["latency_s"], result))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # onnxruntime/OS errors: the task failed, the agent did not
            _log.warning("task %s failed: %s", job.task_id, err)
            return Outcome(False, 0.0, None, f"{type(err).__name__}: {err}")

    async def _emulate(self, job: Job, slot: Slot, reconfig: float) -> Outcome:
        """Sleep the emulated service time; return it as the measured latency."""
        device = self._devices[job.device_id]
        target, source = self._emulation.target(job, len(device.slots))
        if reconfig:  # an FPGA first loads the configuration; the service starts after it
            await asyncio.sleep(reconfig)
            slot.started = time.perf_counter()
        start = time.perf_counter()
        await asyncio.sleep(target)
        wall = time.perf_counter() - start
        return self._emulation.outcome(
            job, self._slot_index(device, slot), target, source, wall, reconfig
        )

    @staticmethod
    def _slot_index(device: DeviceSlots, slot: Slot) -> int | None:
        """Return the index of ``slot`` for an outcome (None: the device has one slot)."""
        return device.slots.index(slot) if len(device.slots) > 1 else None
