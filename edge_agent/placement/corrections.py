"""A Placer's learned-factor table: export, import and read (the ``CorrectionTable`` mixin)."""

from __future__ import annotations

import math
from collections.abc import Callable

from edge_agent.errors import InvalidInput
from edge_agent.placement import learning
from edge_agent.placement.explore import Explorer
from edge_agent.placement.workspace import Workspace


class CorrectionTable:
    """The correction-table methods of ``Placer``, over its workspace's correction rows."""

    _ws: Workspace
    _classes: dict[str, int]
    _index: dict[str, int]
    _imported: set[tuple[int, int]]  # (class, device) pairs whose factor came from outside
    device_ids: tuple[str, ...]
    exploration: Explorer

    class_index: Callable[[str], int]  # Placer's: the class row, added when new
    _device: Callable[[str], int]  # LiveState's: a device's row, InvalidInput if unknown
    _imported_factor: Callable[[int], None]  # DevicePooling's: re-pool the device next time

    def export_corrections(self) -> dict[str, dict[str, float]]:
        """Return the learned factors as {task class: {device id: factor}} (JSON-ready)."""
        ws = self._ws
        return {
            cls: dict(zip(self.device_ids, ws.corrections[idx].tolist(), strict=True))
            for cls, idx in self._classes.items()
        }

    def import_corrections(self, table: dict[str, dict[str, float]]) -> int:
        """Adopt learned factors (e.g. saved, or from a peer); return how many were set.

        Devices this fleet does not have are skipped; factors are clamped to the learning
        range. A non-finite or non-positive factor raises and changes nothing.
        """
        updates: list[tuple[str, int, float]] = []
        for cls, row in table.items():
            if not isinstance(cls, str) or not isinstance(row, dict):
                raise InvalidInput("import_corrections: expected {task class: {device: factor}}")
            for device_id, factor in row.items():
                if isinstance(factor, bool) or not isinstance(factor, (int, float)):
                    raise InvalidInput(f"import_corrections: {cls}/{device_id}: not a number")
                if not (math.isfinite(factor) and factor > 0):
                    raise InvalidInput(f"import_corrections: {cls}/{device_id}: must be > 0")
                if device_id in self._index:
                    clamped = learning.clamp(float(factor))
                    updates.append((cls, self._index[device_id], clamped))
        for cls, d, factor in updates:
            idx = self.class_index(cls)
            self._ws.corrections[idx, d] = factor
            self._imported.add((idx, d))  # measured elsewhere: not a first flight's guess
            self._imported_factor(d)  # a cold pair's import is still re-pooled (as before)
            self.exploration.tried(idx, d)
        return len(updates)

    def correction(self, task_class: str, device_id: str) -> float:
        """Return the learned factor (measured / roofline) for a class on a device."""
        idx = self._classes.get(task_class)
        return 1.0 if idx is None else float(self._ws.corrections[idx, self._device(device_id)])
