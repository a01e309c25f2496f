"""Weighted tenant fair share: which waiting task the scheduler takes next.

Higher priority always goes first. Among the tenants whose best waiting task has the top
priority, the one with the least weighted service (tasks taken / its share) goes next, and
within a tenant the earliest deadline, then the oldest. A tenant that was idle starts at the
least weighted service of the busy tenants, so idling banks no credit (start-time fair
queueing with unit cost per task). Shares come from the policy rule ``tenant_shares``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping

#: Smallest share a tenant can have (a rule of 0 or less would starve it for ever).
MIN_SHARE = 1e-3


class FairQueue:
    """Task ids keyed by (priority, deadline) per tenant, taken in weighted fair order.

    ``alive(task_id)`` tells whether an entry still stands (cancelled ones are skipped
    lazily when they reach the front).
    """

    def __init__(self, alive: Callable[[str], bool], shares: Mapping[str, float]) -> None:
        self._alive = alive
        self._heaps: dict[str, list[tuple[int, float, int, str]]] = {}
        self._served: dict[str, float] = {}  # weighted service of each tenant
        self._order = itertools.count()
        self.shares: dict[str, float] = {}
        self.set_shares(shares)

    def set_shares(self, shares: Mapping[str, float]) -> None:
        """Use ``shares`` (tenant -> weight; unnamed tenants weigh 1) from now on."""
        self.shares = {t: max(float(w), MIN_SHARE) for t, w in shares.items()}

    def share(self, tenant: str) -> float:
        """Return the weight of ``tenant``."""
        return self.shares.get(tenant, 1.0)

    def __bool__(self) -> bool:
        return any(self._heaps.values())

    def push(self, task_id: str, tenant: str, priority: int, deadline_at: float) -> None:
        """Make ``task_id`` wait in its tenant's queue."""
        heap = self._heaps.setdefault(tenant, [])
        if not heap:  # (re)activated: catch up with the busy tenants, keep no credit
            busy = [self._served[t] for t, h in self._heaps.items() if h and t != tenant]
            floor = min(busy, default=self._served.get(tenant, 0.0))
            self._served[tenant] = max(self._served.get(tenant, 0.0), floor)
        heapq.heappush(heap, (-priority, deadline_at, next(self._order), task_id))

    def pop(self) -> str | None:
        """Return the next task id in fair order (charging its tenant), or None when empty."""
        best: tuple[int, float] | None = None
        chosen = None
        for tenant, heap in self._heaps.items():
            while heap and not self._alive(heap[0][3]):
                heapq.heappop(heap)
            if not heap:
                continue
            key = (heap[0][0], self._served[tenant])
            if best is None or key < best:
                best, chosen = key, tenant
        if chosen is None:
            return None
        self._served[chosen] += 1.0 / self.share(chosen)
        return heapq.heappop(self._heaps[chosen])[3]

    def served(self) -> dict[str, float]:
        """Return each tenant's weighted service so far (for status and tests)."""
        return dict(self._served)
