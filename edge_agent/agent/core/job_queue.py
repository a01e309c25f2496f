"""One device's queued jobs and the order its slots take them in (the executor's queue).

By default a queue is ordered by (priority, deadline, arrival): a heap, O(log n) a job.
Under a deadline policy a one-slot device starts its top priority's jobs in
``edf.pop_next``'s order (the rule the Placer's estimate and the simulator share:
feasible deadlines earliest first, the rest first-come-first-served, none passed by more
than ``edf.HARD_PASSED_FACTOR`` x ``edf.MAX_PASSED`` younger jobs); the queue then keeps
each priority's jobs oldest first, as ``pop_next`` takes them. Each job waits as one
``edf.Waiting`` (its pass count), kept when the policy switches the order.

A cancelled job is dropped when it would be taken (``Executor.resume`` queues it again).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterator
from typing import cast

from edge_agent.agent.core.runners import Job
from edge_agent.placement.edf import Waiting, pop_next


def _job(waiting: Waiting) -> Job:
    return cast(Job, waiting.item)


def _seq(waiting: Waiting) -> int:
    return waiting.seq


class JobQueue:
    """A device's queued jobs: (priority, deadline, arrival) order, or edf (``by_deadline``)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Waiting]] = []
        self._levels: dict[int, list[Waiting]] | None = None  # edf: priority -> oldest first
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Job]:
        """Every queued job (cancelled ones too), in no particular order."""
        if self._levels is None:
            return (_job(e[3]) for e in self._heap)
        return (_job(w) for level in self._levels.values() for w in level)

    @property
    def by_deadline(self) -> bool:
        """Whether the top priority's jobs are taken in ``edf.pop_next``'s order."""
        return self._levels is not None

    def push(self, job: Job) -> None:
        """Queue ``job`` (its place: its priority, deadline and arrival ``seq``)."""
        waiting = Waiting(job.seq, job.deadline_at, job.decision.service_s, item=job)
        self._count += 1
        if self._levels is None:
            heapq.heappush(self._heap, (-job.priority, job.deadline_at, job.seq, waiting))
            return
        level = self._levels.setdefault(job.priority, [])
        if level and level[-1].seq > job.seq:  # an older job queued again (resumed)
            bisect.insort(level, waiting, key=_seq)
        else:
            level.append(waiting)

    def order_by_deadline(self, on: bool) -> None:
        """Switch between the two orders; every job stays queued with its pass count."""
        if on == (self._levels is not None):
            return
        if on:
            levels: dict[int, list[Waiting]] = {}
            for priority, _, _, waiting in sorted(self._heap, key=lambda e: e[2]):
                levels.setdefault(-priority, []).append(waiting)
            self._levels, self._heap = levels, []
            return
        assert self._levels is not None
        self._heap = [
            (-priority, w.deadline, w.seq, w)
            for priority, level in self._levels.items()
            for w in level
        ]
        heapq.heapify(self._heap)
        self._levels = None

    def pop(self, now: float) -> Job | None:
        """Remove and return the job a free slot starts next (``now``: the epoch clock)."""
        if self._levels is None:
            while self._heap:
                job = _job(heapq.heappop(self._heap)[3])
                self._count -= 1
                if not job.cancelled:
                    return job
            return None
        while self._levels:
            top = max(self._levels)
            level = self._levels[top]
            if any(_job(w).cancelled for w in level):
                live = [w for w in level if not _job(w).cancelled]
                self._count -= len(level) - len(live)
                level[:] = live
            if not level:
                del self._levels[top]
                continue
            self._count -= 1
            job = _job(pop_next(level, now))
            if not level:
                del self._levels[top]
            return job
        return None

    def candidates(self) -> Iterator[Job]:
        """Yield the queued jobs in the queue's order (multi-slot devices: never edf).

        The head first; the rest are sorted only when the head cannot start.
        """
        if self._levels is not None:
            raise RuntimeError("candidates: an edf queue is taken with pop")
        while self._heap and _job(self._heap[0][3]).cancelled:
            heapq.heappop(self._heap)
            self._count -= 1
        if not self._heap:
            return
        yield _job(self._heap[0][3])
        for entry in sorted(self._heap)[1:]:
            if not _job(entry[3]).cancelled:
                yield _job(entry[3])

    def take(self, job: Job) -> None:
        """Remove ``job`` (one of ``candidates``) from the queue."""
        if self._heap and self._heap[0][3].item is job:
            heapq.heappop(self._heap)
        else:
            at = next(i for i, e in enumerate(self._heap) if e[3].item is job)
            self._heap[at] = self._heap[-1]
            self._heap.pop()
            heapq.heapify(self._heap)
        self._count -= 1
