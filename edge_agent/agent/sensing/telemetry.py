"""The telemetry sampler: every interval, host and device load (psutil, NVML) and power to SQLite.

One ``sample`` row per device (utilization; energy where a meter covers it) and one for the
host (CPU and memory use, RAPL package energy, hwmon board power). An emulated device's
utilization is its busy share in the agent over the interval. Real devices' utilization also
goes to the placer's live state, so the next decisions see it. psutil and NVML are blocking:
a sample is taken in a thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import psutil

from edge_agent.agent.core.fleet import Fleet
from edge_agent.agent.core.store import Store
from edge_agent.agent.sensing.power import Meters, Reading, energy_between
from edge_agent.errors import InvalidInput
from edge_agent.placement import Placer
from edge_agent.resources.vocab import DeviceKind

_log = logging.getLogger(__name__)

CPU_KINDS = (DeviceKind.CPU_X86, DeviceKind.CPU_ARM)


class Sampler:
    """Takes a sample every ``interval_s`` and stores it; ``run`` until cancelled."""

    def __init__(
        self,
        fleet: Fleet,
        placer: Placer,
        store: Store,
        meters: Meters,
        busy_s: Callable[[str], float],
        interval_s: float,
    ) -> None:
        self.fleet, self.placer, self.store, self.meters = fleet, placer, store, meters
        self._busy_s, self.interval_s = busy_s, interval_s
        self._last_at = time.monotonic()
        self._last_busy = {d.id: 0.0 for d in fleet.devices}
        self._last_package: Reading | None = None
        self.samples = 0

    def prime(self) -> None:
        """Start the interval counters (blocking): psutil's CPU share, the RAPL counter."""
        psutil.cpu_percent(None)
        self._last_package = self.meters.package()
        self._last_at = time.monotonic()
        self._last_busy = {d.id: self._busy_s(d.id) for d in self.fleet.devices}

    async def run(self) -> None:
        """Sample forever (until cancelled)."""
        await asyncio.to_thread(self.prime)
        while True:
            await asyncio.sleep(self.interval_s)
            await self.sample_once()

    async def sample_once(self) -> list[dict[str, Any]]:
        """Take one sample, feed real utilizations to the placer, store it; return the rows."""
        busy = {d.id: self._busy_s(d.id) for d in self.fleet.devices}  # read on the loop
        rows = await asyncio.to_thread(self._take, busy)
        live = [
            row
            for row in rows
            if row["device"] != "host" and not row["emulated"] and row["utilization"] is not None
        ]
        try:  # one vectorised write for every device
            self.placer.update_live_many(
                [row["device"] for row in live], utilization=[row["utilization"] for row in live]
            )
        except InvalidInput:  # one bad value: the others still go in, one at a time
            for row in live:
                try:
                    self.placer.update_live(row["device"], utilization=row["utilization"])
                except InvalidInput as err:
                    _log.debug("live utilization of %s refused: %s", row["device"], err)
        await self.store.samples(rows)
        self.samples += 1
        return rows

    def _take(self, busy: dict[str, float]) -> list[dict[str, Any]]:
        """Return this interval's rows (blocking: psutil, sysfs, NVML)."""
        now = time.monotonic()
        span = max(now - self._last_at, 1e-9)
        cpu = psutil.cpu_percent(None) / 100
        package = self.meters.package()
        watts = self.meters.board_watts()
        host_detail = {
            "cpu_percent": round(cpu * 100, 2),
            "memory_percent": psutil.virtual_memory().percent,
            "interval_s": round(span, 6),
            "board_watts": watts,
        }
        package_j = energy_between(self._last_package, package)
        if package_j is None and watts is not None:
            package_j = watts * span
        rows = [_row("host", cpu, package_j, False, host_detail)]
        for device in self.fleet.devices:
            if device.emulated:
                share = (busy[device.id] - self._last_busy.get(device.id, 0.0)) / span
                rows.append(_row(device.id, min(1.0, max(0.0, share)), None, True, {}))
            elif device.kind in CPU_KINDS:
                rows.append(_row(device.id, cpu, package_j, False, {}))
            else:
                gpu = self.meters.gpu_sample(device.id)
                util, energy = (None, None) if gpu is None else (gpu[0], gpu[1] * span)
                rows.append(_row(device.id, util, energy, False, {}))
        self._last_at, self._last_busy, self._last_package = now, busy, package
        return rows


def _row(
    device: str, util: float | None, energy: float | None, emulated: bool, detail: dict[str, Any]
) -> dict[str, Any]:
    return {
        "kind": "sample",
        "device": device,
        "utilization": util,
        "energy_j": energy,
        "emulated": int(emulated),
        "detail": json.dumps(detail) if detail else None,
    }
