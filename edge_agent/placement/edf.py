"""Earliest-deadline-first order of a device's waiting work, and the Placer's view of it.

Under a policy with a deadline objective (``Policy.orders_by_deadline``: the ``slo-first``
template, or a blend with a deadline weight > 0) a device starts its waiting (not yet
started) tasks in this order, never pre-empting a running one (``next_index``):

1. the earliest deadline among the *feasible* tasks (their expected run, from when they
   can start, still ends by their deadline) that the most-deadlines-met order keeps
   (``_most_met``: Moore-Hodgson, which sets the longest aside while the deadline
   order makes one late; plain earliest-deadline-first let one short tight task push a
   longer one past its deadline. bench_sim_slo at 80%, seeds 1-3, edge-mixed 83.9/81.6/
   90.7 -> 84.2/83.1/91.5% met, slo-published 90.3/89.5/87.7 -> 90.1/90.5/88.2; off
   the tuned points, at 65% / 95% load, seeds 1 and 4, with rule 3's check below: edge-
   mixed -0.7/+0.2 and -1.1/+3.4 points, slo-published +0.1/-0.8 and +2.2/+0.8);
   ties keep arrival order;
2. else the oldest: tasks without a deadline and hopeless ones (already unable to meet it)
   run first-come-first-served among themselves, after the feasible deadline work;
3. except that the oldest waiting task goes first once ``MAX_PASSED`` younger tasks have
   started before it (the starvation bound), unless running it first would make one of
   the deadlines rule 1 keeps miss: then rule 1's task goes and the oldest waits on, up
   to ``HARD_PASSED_FACTOR`` x ``MAX_PASSED`` passes, then it goes first regardless. A
   starved task is usually hopeless already; forcing it in front of feasible work traded
   a deadline that could still be met for one already lost (bench_sim_slo at 80%, seeds
   1-3: edge-mixed 77.1/73.5/78.8 -> 81.6/77.0/83.1% met, its mean latency 178/210/147 ->
   159/188/127 ms; slo-published and edge-mixed-published a little up too). Checking
   every kept deadline rather than the first: edge-mixed 84.2/83.1/91.5 -> 85.1/83.1/
   90.8, slo-published 90.1/90.5/88.2 -> 91.0/90.4/88.4.

The Placer estimates a new task's finish the same way (``WaitingWork``): with a deadline,
only the waiting work with an earlier deadline is ahead of it (plus what runs), less the
work estimated hopeless; without one, everything is. The starvation bound is not in it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from edge_agent.placement import layout as L
from edge_agent.placement.decision import Decision

#: Younger tasks that may start before a waiting one; then it goes first (no starvation).
#: Forcing a hopeless task early spends the device on a deadline already lost: at 80% load
#: in bench_sim_slo (edge-mixed, 3000 tasks) slo-first met 62.9% with 4, 69.6% with 32,
#: 73.2% with 128 and 76.1% unbounded. 128 bounds a 10 ms model's extra wait near 1.3 s.
MAX_PASSED = 128
#: The hard starvation bound, in ``max_passed``: past it the oldest goes first even at a
#: feasible task's cost (a 10 ms model's extra wait then stays near 5 s).
HARD_PASSED_FACTOR = 4


@dataclass(slots=True)
class Waiting:
    """One waiting task of a device: ``deadline`` absolute on the device's clock (inf: none)."""

    seq: int  # arrival order on the device
    deadline: float = math.inf
    expected_s: float = 0.0  # expected run time once started
    ready: float = 0.0  # earliest start (its input has arrived)
    passed: int = 0  # younger tasks started before it
    item: object = None  # what the caller queues (a job)

    def feasible(self, now: float) -> bool:
        """Return True when it has a deadline that starting it now still meets."""
        return max(now, self.ready) + self.expected_s <= self.deadline


def next_index(waiting: Sequence[Waiting], now: float, max_passed: int = MAX_PASSED) -> int:
    """Return the index in ``waiting`` (oldest first) of the task to start now (module doc)."""
    if not waiting:
        raise ValueError("next_index: nothing is waiting")
    oldest = waiting[0]
    if oldest.passed >= HARD_PASSED_FACTOR * max_passed:
        return 0
    kept = _most_met(waiting, now)
    best = kept[0] if kept else 0
    if best == 0 or oldest.passed < max_passed:
        return best
    return best if _costs_deadline(oldest, [waiting[i] for i in kept], now) else 0


def _most_met(waiting: Sequence[Waiting], now: float) -> list[int]:
    """Return the indices of the most deadlines ``waiting`` can meet, in the order to run.

    Moore-Hodgson over the feasible tasks: in deadline order (ties: arrival), each time the
    one added ends late, the longest kept is set aside; what is left all meets its deadline
    run in deadline order, and no order meets more.
    """
    feasible = sorted(
        (w.deadline, i) for i, w in enumerate(waiting) if w.deadline < math.inf and w.feasible(now)
    )
    kept: list[tuple[float, int]] = []  # (-expected_s, index): the longest on top
    end = now
    for deadline, i in feasible:
        w = waiting[i]
        end = max(end, w.ready) + w.expected_s
        heapq.heappush(kept, (-w.expected_s, i))
        if end > deadline:
            end += heapq.heappop(kept)[0]
    return [i for _, i in sorted((waiting[i].deadline, i) for _, i in kept)]


def _costs_deadline(first: Waiting, then: Sequence[Waiting], now: float) -> bool:
    """Return True when running ``first`` now makes one of ``then`` (run after, in order) late."""
    end = max(now, first.ready) + first.expected_s
    for w in then:
        end = max(end, w.ready) + w.expected_s
        if end > w.deadline:
            return True
    return False


def pop_next(waiting: list[Waiting], now: float, max_passed: int = MAX_PASSED) -> Waiting:
    """Remove and return the task to start now; count the pass on every older one."""
    i = next_index(waiting, now, max_passed)
    for older in waiting[:i]:
        older.passed += 1
    return waiting.pop(i)


class WaitingWork:
    """A Placer's committed, not yet started decisions: deadline and estimated slack.

    A new task with a deadline counts ahead of it the waiting work due earlier, unless
    that work is estimated hopeless (the device runs it after feasible work): its slack
    is negative, or it is still waiting past its latest start (its deadline less its
    estimated service: started now, it would miss); and it counts the work due later that
    could not absorb it (its estimated slack is under the new task's deadline window):
    EDF would run the new task first, but letting it pass work that then misses its own
    deadline trades one deadline for another. Each task let pass takes its charge off
    the slack of the work it passes.
    """

    def __init__(self) -> None:
        # decision -> [absolute deadline (inf: none), estimated slack at its deadline,
        # latest start (deadline - estimated service; inf: none)]
        self.entries: dict[Decision, list[float]] = {}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def add(self, decision: Decision, deadline: float, window: float, now: float) -> None:
        """Record a placed decision waiting on its devices; charge its passing to later work."""
        charge = dict(zip(decision.device_indices, decision.charges, strict=True))
        for other, entry in self.entries.items():
            if entry[0] > deadline and entry[1] >= window:
                shared = [charge[d] for d in other.device_indices if d in charge]
                if shared:
                    entry[1] -= max(shared)
        slack = deadline - (now + decision.latency_s)
        self.entries[decision] = [deadline, slack, deadline - decision.service_s]

    def discard(self, decision: Decision) -> None:
        """Forget a decision (started, finished or released); a no-op when unknown."""
        self.entries.pop(decision, None)

    def behind(
        self, n_devices: int, deadline: float, window: float, now: float = -math.inf
    ) -> npt.NDArray[np.float64]:
        """Return, per device, the waiting charge a task due at ``deadline`` runs before.

        ``window``: the task's relative deadline, the slack later work needs to let it pass;
        ``now``: the clock, past which work still waiting after its latest start is hopeless.
        """
        out = np.zeros(n_devices)
        for decision, (due, slack, latest) in self.entries.items():
            if (due > deadline and slack >= window) or slack < 0 or latest < now:
                for d, charge in zip(decision.device_indices, decision.charges, strict=True):
                    out[d] += charge
        return out

    def lift(
        self,
        devices: npt.NDArray[np.float64],
        deadline: float,
        window: float,
        now: float = -math.inf,
    ) -> npt.NDArray[np.float64]:
        """Take the work that would run after the task off the queues; return it to restore."""
        lifted = self.behind(devices.shape[0], deadline, window, now)
        lifted = np.minimum(lifted, devices[:, L.DEV_QUEUE_S])
        devices[:, L.DEV_QUEUE_S] -= lifted
        return lifted
