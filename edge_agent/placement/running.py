"""Queue accounting that separates waiting from running work.

A committed task's charge stays in its devices' queues until ``feedback``/``release``.
Once ``Placer.started`` reports it running, its remaining work shrinks with time: before
each placement the queue is credited with the elapsed run time, so the next decision sees
running work as it is, not in full.

A task still running past its charge was under-estimated, and it is not done: it counts
for as long again as it has overrun so far (its remaining work is ``|charge - elapsed|``;
a run time's tail is longer the longer it has lasted), so a device held by an estimate
that was far too low is not taken for free. When it has run ``OVERRUN_EVIDENCE`` times its
charge, its elapsed time is also a lower bound on its class's ratio there: ``credit`` hands
it to the Placer (``overrun``), which raises that correction at once rather than at the
completion, which under load can come after many more tasks were sent there on the old
estimate (``pooling.DevicePooling._overrun``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from edge_agent.placement import layout as L
from edge_agent.placement.decision import Decision

#: a running task past this many times its charge shows its estimate wrong beyond noise: its
#: elapsed time then raises its class's correction on its devices to the lower bound it proves
#: (``pooling._overrun``). Lower than the agent's overrun watch (``runners.OVER_ESTIMATE``,
#: 4x ``service_s`` and at least ``overrun.MIN_OVERRUN_S``), a different rule: a lower bound
#: of the run's own time only anticipates what its feedback will say, while the watch's
#: verdict (the device suspect, its queued work placed again) costs every class there.
OVERRUN_EVIDENCE = 2.0


def remaining_s(charge: float, elapsed: float, *, unmeasured: bool = False) -> float:
    """Return the queue seconds a task charged ``charge`` still holds after running ``elapsed``.

    ``charge - elapsed`` while within its estimate; past it, the overrun so far again. A
    task whose estimate nobody has measured (``first_flights``) holds at least as long
    again as it has run: its estimate may be off by several times either way, so reaching
    it says little about the end (and a device running it is not free for the next task).
    """
    if unmeasured:
        return max(charge - elapsed, elapsed)
    return abs(charge - elapsed)


class RunningWork:
    """The started, unfinished decisions of one Placer and the run time credited so far."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        # decision -> (start, run time credited per device; below 0: overrun counted)
        self.entries: dict[Decision, tuple[float, list[float]]] = {}
        self._unmeasured: set[Decision] = set()  # running on an estimate nobody measured

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def start(self, decision: Decision, now: float | None, *, unmeasured: bool = False) -> None:
        """Record ``decision`` as running since ``now`` (the clock when None); idempotent.

        ``unmeasured``: its estimate is one nobody has measured (``remaining_s``).
        """
        if decision not in self.entries:
            at = self.clock() if now is None else now
            self.entries[decision] = (at, [0.0] * len(decision.device_indices))
            if unmeasured:
                self._unmeasured.add(decision)

    def is_running(self, decision: Decision) -> bool:
        """Return True when ``decision`` was started and not yet finished."""
        return decision in self.entries

    def credit(
        self,
        devices: npt.NDArray[np.float64],
        overrun: Callable[[Decision, float], None] | None = None,
        *,
        record: bool = True,
    ) -> None:
        """Bring the running tasks' queue charges to their remaining work as of now.

        ``overrun(decision, elapsed)`` is called for each task past ``OVERRUN_EVIDENCE``
        times its charge. ``record=False``: the credit is not remembered (``queued_now``'s
        reading on a copy of ``devices``).
        """
        now = self.clock()
        unmeasured = self._unmeasured
        for decision, (start, credited) in self.entries.items():
            elapsed = max(0.0, now - start)
            charges = decision.charges
            doubt = decision in unmeasured if unmeasured else False
            for j, (d, charge) in enumerate(zip(decision.device_indices, charges, strict=True)):
                # no longer ahead in the queue
                due = charge - remaining_s(charge, elapsed, unmeasured=doubt)
                if due != credited[j]:
                    q = devices[d, L.DEV_QUEUE_S]
                    devices[d, L.DEV_QUEUE_S] = max(0.0, q - (due - credited[j]))
                    if record:
                        credited[j] = due
            if overrun is not None and elapsed > OVERRUN_EVIDENCE * max(charges, default=0.0):
                overrun(decision, elapsed)

    def queued_now(self, devices: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Return every device's queue seconds as ``credit`` would leave them now (a copy;
        ``devices`` and the credits so far are untouched, no overrun is reported).

        What an operator reads between placements (``Placer.live``): the stored column holds
        the running work as of the last placement.
        """
        now = devices.copy()
        self.credit(now, record=False)
        return now[:, L.DEV_QUEUE_S]

    def finish(self, decision: Decision) -> list[float]:
        """Forget ``decision``; return the run time already credited per device (0s if none)."""
        entry = self.entries.pop(decision, None)
        self._unmeasured.discard(decision)
        return entry[1] if entry is not None else [0.0] * len(decision.device_indices)
