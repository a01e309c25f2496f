"""Queue accounting that separates waiting from running work.

A committed task's charge stays in its devices' queues until ``feedback``/``release``.
Once ``Placer.started`` reports it running, its remaining work shrinks with time: before
each placement the queue is credited with the elapsed run time (never more than the
charge), so the next decision sees running work as it is, not in full.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from edge_agent.placement import layout as L
from edge_agent.placement.decision import Decision


class RunningWork:
    """The started, unfinished decisions of one Placer and the run time credited so far."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        # decision -> (start, run time credited per device)
        self.entries: dict[Decision, tuple[float, list[float]]] = {}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def start(self, decision: Decision, now: float | None) -> None:
        """Record ``decision`` as running since ``now`` (the clock when None); idempotent."""
        if decision not in self.entries:
            at = self.clock() if now is None else now
            self.entries[decision] = (at, [0.0] * len(decision.device_indices))

    def is_running(self, decision: Decision) -> bool:
        """Return True when ``decision`` was started and not yet finished."""
        return decision in self.entries

    def credit(self, devices: npt.NDArray[np.float64]) -> None:
        """Take the run time elapsed since the last credit off the running tasks' queues."""
        now = self.clock()
        for decision, (start, credited) in self.entries.items():
            elapsed = max(0.0, now - start)
            for j, (d, charge) in enumerate(
                zip(decision.device_indices, decision.charges, strict=True)
            ):
                due = min(charge, elapsed)
                if due > credited[j]:
                    q = devices[d, L.DEV_QUEUE_S]
                    devices[d, L.DEV_QUEUE_S] = max(0.0, q - (due - credited[j]))
                    credited[j] = due

    def finish(self, decision: Decision) -> list[float]:
        """Forget ``decision``; return the run time already credited per device (0s if none)."""
        entry = self.entries.pop(decision, None)
        return entry[1] if entry is not None else [0.0] * len(decision.device_indices)
