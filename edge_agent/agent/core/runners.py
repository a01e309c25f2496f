"""How one job runs: its ``Job`` and ``Outcome``, an onnxruntime session, an allowlisted command.

The executor (executor.py) owns the device queues and slots; what runs in a slot is here.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge_agent.agent.core.waiting import Waiting
from edge_agent.placement import Decision

_log = logging.getLogger(__name__)

#: A run this many times over its estimate (``Decision.service_s``) is flagged in its result,
#: and ``overrun.OverrunWatch`` (past ``MIN_OVERRUN_S`` too) marks its device suspect and
#: re-places the work queued behind it. Not the Placer's ``running.OVERRUN_EVIDENCE`` (2x
#: the charge): that one only raises the task's class's correction to a lower bound of
#: the run's own time (what its feedback will say anyway), so it may fire early; this one
#: judges the whole device (a penalty for every class there, queued jobs withdrawn and their
#: inputs sent again), so it waits for stronger evidence. They also read different estimates
#: (the charge adds reconfiguration to the service). Both are kept as they are: moving the
#: re-placing to 2x, 3x or 4x was noise in the simulator (docs/simulator.md, "Work queued
#: behind an overrunning task, placed again").
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
    """A placed task waiting for, or running on, its device: the task as it waited, where.

    It carries its ``Waiting`` (not a copy of its fields): a preempted job waits again as
    that same ``Waiting``.
    """

    waiting: Waiting
    decision: Decision
    cancelled: bool = False
    energy_start: Any = None  # power.Reading at start, where a meter covers the device
    # the store's record of the start (True once committed; False: the task was no longer
    # placed); None until started. Its finish is recorded only after it.
    started: asyncio.Future[bool] | None = None
    #: when a brief run began (epoch seconds), its start not asked for apart: it is written
    #: with its finish (``JobHooks.job_begins``); None otherwise
    begun_at: float | None = None
    seq: int = field(default_factory=itertools.count().__next__)
    #: the (first) chosen device; read on every step of the run, so taken from the
    #: decision once (``Decision.device_ids`` builds its tuple on each call)
    device_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.device_id = self.decision.device_ids[0]

    @property
    def task_id(self) -> str:
        return self.waiting.task_id

    @property
    def command(self) -> tuple[str, ...] | None:
        return self.waiting.command

    @property
    def priority(self) -> int:
        return self.waiting.contract.priority

    @property
    def deadline_at(self) -> float:
        return self.waiting.deadline_at  # epoch seconds; inf = none

    @property
    def submitted_at(self) -> float:
        return self.waiting.submitted_at


@dataclass
class Outcome:
    """How a run went: measured seconds, result document or error, how it ran."""

    ok: bool
    latency_s: float
    result: dict[str, Any] | None = None
    error: str | None = None
    emulated: bool = False


class Sessions:
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


async def run_command(argv: tuple[str, ...]) -> Outcome:
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


def checked(job: Job, outcome: Outcome) -> Outcome:
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
