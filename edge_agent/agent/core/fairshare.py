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
from collections.abc import Callable, Mapping, Sequence

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
        self.push_many([(task_id, tenant, priority, deadline_at)])

    def push_many(self, entries: Sequence[tuple[str, str, int, float]]) -> None:
        """``push`` each (task id, tenant, priority, deadline) in turn, a tenant's heap
        rebuilt once (``heapify``) when the batch is at least as long as what it held."""
        added: dict[str, list[tuple[int, float, int, str]]] = {}
        for task_id, tenant, priority, deadline_at in entries:
            items = added.get(tenant)
            if items is None:
                items = added[tenant] = []
                heap = self._heaps.setdefault(tenant, [])
                if not heap:  # (re)activated: catch up with the busy tenants, keep no credit
                    busy = [
                        self._served[t]
                        for t, h in self._heaps.items()
                        if (h or added.get(t)) and t != tenant
                    ]
                    floor = min(busy, default=self._served.get(tenant, 0.0))
                    self._served[tenant] = max(self._served.get(tenant, 0.0), floor)
            items.append((-priority, deadline_at, next(self._order), task_id))
        for tenant, items in added.items():
            heap = self._heaps[tenant]
            if len(items) >= len(heap):
                heap += items
                heapq.heapify(heap)
            else:
                for item in items:
                    heapq.heappush(heap, item)

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

    def pop_many(self, n: int) -> list[str]:
        """Return up to ``n`` task ids, as ``n`` calls of ``pop`` would (fewer when it runs
        dry); with one tenant waiting, taken straight off its heap."""
        live = [tenant for tenant, heap in self._heaps.items() if heap]
        out: list[str] = []
        if len(live) != 1:
            while len(out) < n and (task_id := self.pop()) is not None:
                out.append(task_id)
            return out
        tenant = live[0]
        heap, alive, step = self._heaps[tenant], self._alive, 1.0 / self.share(tenant)
        served = self._served[tenant]
        while heap and len(out) < n:
            task_id = heapq.heappop(heap)[3]
            if alive(task_id):
                out.append(task_id)
                served += step  # as pop charges it: once per task taken
        self._served[tenant] = served
        return out

    def served(self) -> dict[str, float]:
        """Return each tenant's weighted service so far (for status and tests)."""
        return dict(self._served)
