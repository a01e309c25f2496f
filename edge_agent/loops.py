"""Supervised background loops: each restarts after an error, with back-off, and reports its state.

A daemon's loops (scheduler, device dispatchers, telemetry, hub sync, mesh heartbeat, ...)
must not die quietly on one error, a full disk say: ``Supervisor.spawn`` runs a loop's
factory, and when the loop raises, logs it, waits (``RESTART_FIRST_S``, doubled up to
``RESTART_MAX_S``) and calls the factory again. ``problems`` lists the loops that failed
within ``STABLE_S``, for the health document; ``status`` gives each loop's counts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

_log = logging.getLogger(__name__)

#: Back-off before a failed loop's restart: the first, then doubled up to the most.
RESTART_FIRST_S = 0.5
RESTART_MAX_S = 60.0
#: A loop up this long since its last failure counts as healthy again (and its back-off resets).
STABLE_S = 30.0

LoopFactory = Callable[[], Coroutine[Any, Any, Any]]


@dataclass
class LoopState:
    """One supervised loop: running, waiting to restart, or finished; its failures."""

    state: str = "running"  # running | restarting | finished
    restarts: int = 0
    last_error: str | None = None
    failed_at: float | None = None  # monotonic

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "restarts": self.restarts, "last_error": self.last_error}


class Supervisor:
    """Owns a daemon's loops; ``spawn`` each, ``stop`` them all once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.loops: dict[str, LoopState] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, name: str, factory: LoopFactory) -> asyncio.Task[None]:
        """Run ``factory()`` as loop ``name`` until cancelled, restarting it after an error."""
        self.loops[name] = LoopState()
        task = asyncio.create_task(self._supervise(name, factory), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _supervise(self, name: str, factory: LoopFactory) -> None:
        loop = self.loops[name]
        delay = RESTART_FIRST_S
        while True:
            started = self.clock()
            try:
                await factory()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                if self.clock() - started >= STABLE_S:
                    delay = RESTART_FIRST_S
                repeated = loop.last_error == _describe(err) and loop.state == "running"
                loop.restarts += 1
                loop.last_error, loop.failed_at = _describe(err), self.clock()
                loop.state = "restarting"
                if repeated:  # the same error again: once with its traceback is enough
                    _log.warning("loop %s failed again (%s); restart in %.2g s", name, err, delay)
                else:
                    _log.error("loop %s failed; restart in %.2g s", name, delay, exc_info=err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RESTART_MAX_S)
                loop.state = "running"
                continue
            loop.state = "finished"
            return

    def problems(self) -> list[str]:
        """Return one line per loop that is restarting or failed within ``STABLE_S``."""
        now = self.clock()
        return [
            f"loop {name} {'restarting' if loop.state == 'restarting' else 'restarted'} "
            f"after {loop.last_error} ({loop.restarts} restarts)"
            for name, loop in sorted(self.loops.items())
            if loop.failed_at is not None
            and (loop.state == "restarting" or now - loop.failed_at < STABLE_S)
        ]

    def status(self) -> dict[str, dict[str, Any]]:
        """Return every loop's state, restart count and last error."""
        return {name: loop.to_dict() for name, loop in sorted(self.loops.items())}

    async def stop(self) -> None:
        """Cancel every loop and wait for them."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:300]
