"""Each device's log factors per class, and their mean over it or its twins (``DeviceLogs``).

``pooling`` keeps three of these (learned, published, drift) and asks, whenever it re-pools,
for a device's mean, else (while the device has none) the mean over its twins. Both are
cached: a device's mean is recomputed when its own logs change, a group's when a member's
do, and only when asked, by one pass over the group's logs in the same order a plain sum
over the twins takes (the same floats, so the same decisions, as summing afresh), so a
re-pool no longer sums a whole group of identical devices once per member.
"""

from __future__ import annotations

from collections.abc import Sequence


class DeviceLogs:
    """Log factors by device and class, with cached means per device and per twin group."""

    def __init__(self, groups: Sequence[tuple[int, ...]]) -> None:
        """``groups[d]``: ``d`` and its twins (identical devices), ascending."""
        self.logs: dict[int, dict[int, float]] = {}  # device -> {class: log}
        self._groups = groups
        self._own: dict[int, tuple[float, int]] = {}  # device -> (mean, classes), while valid
        self._shared: dict[int, tuple[float, int] | None] = {}  # group's first device -> ...
        # group's first device -> its members with no logs, and the classes it has logged
        firsts = [g for d, g in enumerate(groups) if g[0] == d]  # each group once
        self._bare = {g[0]: set(g) for g in firsts}
        self._classes: dict[int, set[int]] = {g[0]: set() for g in firsts}

    def get(self, d: int, cls: int) -> float | None:
        """Return ``d``'s log for ``cls``, or None."""
        logs = self.logs.get(d)
        return None if logs is None else logs.get(cls)

    def set(self, d: int, cls: int, value: float) -> tuple[int, ...]:
        """Set ``d``'s log for ``cls``; return the devices whose ``mean`` this changes.

        They are ``d`` and its twins with no logs of their own (theirs is the group's).
        """
        first = self._groups[d][0]
        bare = self._bare[first]
        logs = self.logs.get(d)
        if logs is None:
            logs = self.logs[d] = {}
            bare.discard(d)
        if cls not in logs:
            self._classes[first].add(cls)
        logs[cls] = value
        self._own.pop(d, None)
        self._shared.pop(first, None)
        return (d, *bare) if bare else (d,)

    def own_mean(self, d: int) -> float | None:
        """Return the mean of ``d``'s own logs, or None when it has none."""
        own = self._own_mean(d)
        return None if own is None else own[0]

    def _own_mean(self, d: int) -> tuple[float, int] | None:
        own = self._own.get(d)
        if own is None:
            logs = self.logs.get(d)
            if not logs:
                return None
            own = self._own[d] = (sum(logs.values()) / len(logs), len(logs))
        return own

    def mean(self, d: int) -> tuple[float, int] | None:
        """Return (mean, classes) over ``d``'s logs, else over its twins', else None."""
        own = self._own_mean(d)
        if own is not None:
            return own
        group = self._groups[d]
        if group[0] in self._shared:
            return self._shared[group[0]]
        # ``d`` has none: the group's logs are its twins', in the twins' order
        values = [v for j in group for v in self.logs.get(j, {}).values()]
        shared = None
        if values:
            shared = (sum(values) / len(values), len(self._classes[group[0]]))
        self._shared[group[0]] = shared
        return shared
