"""Runs placed tasks on their devices: onnxruntime for real, emulation for board profiles.

One worker coroutine per device takes jobs from that device's priority queue, one at a time.
ONNX inference and session loading run in a thread pool, never on the event loop; an
emulated device sleeps the profile's published latency for the model (the kernel's roofline
when none is published) with lognormal jitter. A command task runs its (allowlisted) argv.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.agent.fleet import Fleet
from edge_agent.placement import Decision, Placer
from edge_agent.resources.vocab import DeviceKind

_log = logging.getLogger(__name__)

#: A run this many times over its estimate is flagged in its result.
OVER_ESTIMATE = 4.0
COMMAND_TIMEOUT_S = 300.0
_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


@dataclass(eq=False)
class Job:
    """A placed task waiting for, or running on, its device."""

    task_id: str
    decision: Decision
    command: tuple[str, ...] | None
    priority: int
    deadline_at: float
    cancelled: bool = False
    submitted_at: float = 0.0
    energy_start: Any = None  # power.Reading at start, where a meter covers the device
    seq: int = field(default_factory=itertools.count().__next__)


@dataclass
class Outcome:
    """How a run went: measured seconds, result document or error, how it ran."""

    ok: bool
    latency_s: float
    result: dict[str, Any] | None = None
    error: str | None = None
    emulated: bool = False


class _Sessions:
    """onnxruntime sessions and their sample inputs, one per (model, provider)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[str, str], tuple[Any, dict[str, np.ndarray]]] = {}

    def run(self, model: str, provider: str) -> dict[str, Any]:
        """Run one inference of ``model`` (blocking); return timing and output shapes."""
        # imported on first use: an agent that never runs a model (an emulated board, opaque
        # or command tasks) does not carry onnxruntime's ~30 MB
        import onnxruntime as ort  # type: ignore[import-untyped]  # no type information shipped

        note = None
        if provider not in ort.get_available_providers():
            note = f"{provider} is not available in this onnxruntime build; ran on CPU"
            provider = "CPUExecutionProvider"
        with self._lock:
            found = self._sessions.get((model, provider))
        if found is None:
            opts = ort.SessionOptions()
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(model, opts, providers=[provider])
            feeds = {i.name: _sample(i.shape, i.type) for i in session.get_inputs()}
            found = (session, feeds)
            with self._lock:
                self._sessions[(model, provider)] = found
        session, feeds = found
        start = time.perf_counter()
        outputs = session.run(None, feeds)
        elapsed = time.perf_counter() - start
        result: dict[str, Any] = {
            "execution_provider": provider,
            "outputs": [list(np.shape(o)) for o in outputs],
            "latency_s": elapsed,
        }
        if note:
            result["provider_fallback"] = note
        return result


def _sample(shape: list[Any], type_name: str) -> np.ndarray:
    """Return a seeded random input of ``shape`` (symbolic dimensions as 1)."""
    dims = [d if isinstance(d, int) and d > 0 else 1 for d in shape]
    dtype = _DTYPES.get(type_name, np.float32)
    rng = np.random.default_rng(0)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(dims).astype(dtype)
    return rng.integers(0, 2, size=dims).astype(dtype)


StartHook = Callable[[Job], Awaitable[bool]]
DoneHook = Callable[[Job, Outcome], Awaitable[None]]


class Executor:
    """Per-device job queues and workers; reports starts and outcomes through hooks.

    ``on_start`` returns False when the job must not run after all (it was cancelled).
    """

    def __init__(
        self, fleet: Fleet, placer: Placer, on_start: StartHook, on_done: DoneHook, jitter: float
    ) -> None:
        self.fleet = fleet
        self.placer = placer
        self._on_start, self._on_done = on_start, on_done
        self._jitter = jitter
        self._rng = random.Random()
        self._queues: dict[str, asyncio.PriorityQueue[tuple[int, float, int, Job]]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self.current: dict[str, Job | None] = {d.id: None for d in fleet.devices}
        self.started_at: dict[str, float] = {d.id: 0.0 for d in fleet.devices}  # perf_counter
        self.busy_s: dict[str, float] = {d.id: 0.0 for d in fleet.devices}
        self._pool = ThreadPoolExecutor(
            max(1, sum(not d.emulated for d in fleet.devices)), thread_name_prefix="agent-run"
        )
        self._sessions = _Sessions()
        self._stopping = False
        self.loaded: dict[str, list[int]] = {}  # emulated FPGA: configuration in each slot
        self._next_slot: dict[str, int] = {}

    def start(self) -> None:
        """Start one worker per device."""
        for device in self.fleet.devices:
            self._queues[device.id] = asyncio.PriorityQueue()
            self._workers[device.id] = asyncio.create_task(
                self._worker(device.id), name=f"agent-device-{device.id}"
            )

    def submit(self, job: Job) -> None:
        """Queue ``job`` on its (first) chosen device."""
        device = job.decision.device_ids[0]
        self._queues[device].put_nowait((-job.priority, job.deadline_at, job.seq, job))

    def backlog(self) -> int:
        """Return the number of jobs queued or running on the devices."""
        waiting = sum(q.qsize() for q in self._queues.values())
        return waiting + sum(job is not None for job in self.current.values())

    async def stop(self, grace_s: float) -> None:
        """Stop taking jobs; wait up to ``grace_s`` for running ones, then cancel the rest."""
        self._stopping = True
        busy = []
        for device_id, worker in self._workers.items():
            if self.current[device_id] is None:
                worker.cancel()
            else:
                busy.append(worker)
        if busy:
            await asyncio.wait(busy, timeout=grace_s)
        for worker in self._workers.values():
            worker.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _worker(self, device_id: str) -> None:
        queue = self._queues[device_id]
        while not self._stopping:
            job = (await queue.get())[3]
            if job.cancelled:
                continue
            self.current[device_id] = job
            start = self.started_at[device_id] = time.perf_counter()
            try:
                if not await self._on_start(job):  # cancelled meanwhile
                    continue
                outcome = await self._execute(job)
                self.busy_s[device_id] += time.perf_counter() - start
                await self._on_done(job, outcome)
            except asyncio.CancelledError:
                raise
            except Exception:  # a hook failed: log it, keep the device serving
                _log.exception("device %s: task %s failed in the agent", device_id, job.task_id)
            finally:
                self.current[device_id] = None

    async def _execute(self, job: Job) -> Outcome:
        """Run ``job`` and return its outcome; an error of the task is an outcome, not raised."""
        try:
            if job.command is not None:
                return await self._command(job.command)
            device = self.fleet.device(job.decision.device_ids[0])
            model = job.decision.task.model
            if device.emulated or model is None:
                return await self._emulate(job)
            loop = asyncio.get_running_loop()
            provider = device.capability.execution_provider
            started = time.perf_counter()
            result = await loop.run_in_executor(self._pool, self._sessions.run, model, provider)
            result["wall_s"] = time.perf_counter() - started
            return self._checked(job, Outcome(True, result["latency_s"], result))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # onnxruntime/OS errors: the task failed, the agent did not
            _log.warning("task %s failed: %s", job.task_id, err)
            return Outcome(False, 0.0, None, f"{type(err).__name__}: {err}")

    async def _emulate(self, job: Job) -> Outcome:
        """Sleep the emulated service time; return it as the measured latency."""
        d = job.decision
        device_id = d.device_ids[0]
        contract = d.task
        name = Path(contract.model).stem if contract.model else contract.task_class
        published = self.fleet.published_ms(device_id, name, contract.precision().name.lower())
        if published is not None:
            base, source = published / 1e3, "published latency"
        else:
            correction = self.placer.correction(contract.task_class, device_id)
            base, source = d.service_s / max(correction, 1e-9), "roofline estimate"
        sigma = self._jitter
        target = base * self._rng.lognormvariate(-sigma * sigma / 2, sigma) if sigma else base
        reconfig = self._reconfigure(device_id, contract.requirements.config_id)
        if reconfig:  # an FPGA first loads the configuration; the service starts after it
            await asyncio.sleep(reconfig)
            self.started_at[device_id] = time.perf_counter()
        start = time.perf_counter()
        await asyncio.sleep(target)
        wall = time.perf_counter() - start
        target = max(target, 1e-9)  # the emulated device's service time, not the loop's pacing
        result = {"emulated": True, "service_source": source, "latency_s": target, "wall_s": wall}
        if contract.requirements.config_id:
            result["reconfig_s"] = reconfig
        if contract.model is None:
            result["note"] = "opaque task (no model, no command): service time emulated"
        return self._checked(job, Outcome(True, target, result, emulated=True))

    def _reconfigure(self, device_id: str, config_id: int) -> float:
        """Return the seconds an emulated FPGA spends loading ``config_id`` (0: loaded).

        Slots fill like the kernel's (first empty, else round-robin); the Placer is told
        what is loaded, so its reconfiguration costs follow the device, not only the plan.
        """
        device = self.fleet.device(device_id)
        if not config_id or device.kind != DeviceKind.FPGA:
            return 0.0
        slots = int(self.placer.live(device_id)["slots"])
        loaded = self.loaded.setdefault(device_id, [device.live.loaded_config])
        loaded[:] = (loaded + [0] * slots)[:slots]
        if config_id in loaded:
            return 0.0
        if 0 in loaded:
            loaded[loaded.index(0)] = config_id
        else:
            victim = self._next_slot.get(device_id, 0) % slots
            loaded[victim] = config_id
            self._next_slot[device_id] = (victim + 1) % slots
        self.placer.update_live(device_id, loaded_configs=loaded)
        return device.capability.reconfig_s

    async def _command(self, argv: tuple[str, ...]) -> Outcome:
        """Run an allowlisted command; its exit status decides the outcome."""
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return Outcome(False, time.perf_counter() - start, None, "command timed out")
        elapsed = max(time.perf_counter() - start, 1e-9)
        result = {
            "exit_status": proc.returncode,
            "stdout": out[-4096:].decode(errors="replace"),
            "stderr": err[-4096:].decode(errors="replace"),
            "latency_s": elapsed,
        }
        ok = proc.returncode == 0
        return Outcome(ok, elapsed, result, None if ok else f"exit status {proc.returncode}")

    @staticmethod
    def _checked(job: Job, outcome: Outcome) -> Outcome:
        """Flag a run far over its estimate (the estimate is in the result)."""
        estimate = job.decision.service_s
        if outcome.result is not None:
            outcome.result["estimate_s"] = estimate
            if math.isfinite(estimate) and outcome.latency_s > OVER_ESTIMATE * max(estimate, 1e-6):
                outcome.result["over_estimate"] = True
                _log.debug(
                    "task %s ran %.3g s, estimate %.3g s", job.task_id, outcome.latency_s, estimate
                )
        return outcome
