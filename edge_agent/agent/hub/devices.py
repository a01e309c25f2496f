"""The device entries of a hub heartbeat: live state per device, utilization since the last one."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from edge_agent.agent.core.fleet import Fleet
from edge_agent.placement import Placer
from edge_agent.resources.vocab import Health

#: Most devices one heartbeat carries (the hub's limit).
MAX_DEVICES = 256


class DeviceReporter:
    """Builds heartbeat device entries; an emulated device's utilization is its busy share."""

    def __init__(self, fleet: Fleet, placer: Placer, busy_s: Callable[[str], float]) -> None:
        self.fleet, self.placer, self.busy_s = fleet, placer, busy_s
        self._busy: dict[str, float] = {}
        self._at = time.monotonic()

    def entries(self) -> list[dict[str, Any]]:
        """Return one entry per device (id, kind, name, utilization 0..1, queued_s, health)."""
        now = time.monotonic()
        span = max(now - self._at, 1e-9)
        out = []
        lives = self.placer.lives()
        for device in self.fleet.devices[:MAX_DEVICES]:
            live = lives[device.id]
            util = live["utilization"]
            if device.emulated:
                busy = self.busy_s(device.id)
                util = (busy - self._busy.get(device.id, 0.0)) / span
                self._busy[device.id] = busy
            health = Health(int(live["health"])) if live["health"] in (0, 1, 2) else None
            out.append(
                {
                    "id": device.id,
                    "kind": device.kind.name.lower(),
                    "name": device.name[:200],
                    "utilization": min(1.0, max(0.0, util)) if math.isfinite(util) else None,
                    "queued_s": live["queued_s"] if math.isfinite(live["queued_s"]) else None,
                    "health": None if health is None else health.name.lower(),
                }
            )
        self._at = now
        return out
