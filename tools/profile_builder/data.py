"""The public data set: devices.json figures and the CSV latency tables beside it."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from .figures import GIB, VIA, Fig, fig, map_status


class Data:
    """The data set: devices.json plus the CSV latency tables."""

    def __init__(self, root: Path) -> None:
        self.root = root
        doc = json.loads((root / "devices.json").read_text(encoding="utf-8"))
        self.boards = {b["id"]: b for b in doc["boards"]}
        self.latencies: list[dict[str, Any]] = doc["latencies"]

    def raw(self, board: str, device: str | None, field: str) -> dict[str, Any]:
        b = self.boards[board]
        if device is None:
            return dict(b["board"][field])
        dev = next(d for d in b["devices"] if d["id"] == f"{board}.{device}")
        return dict(dev[field])

    def fig(
        self,
        board: str,
        device: str | None,
        field: str,
        unit: str,
        scale: float = 1.0,
        value: float | None = None,
        note: str | None = None,
    ) -> Fig:
        """Convert a devices.json figure (``value`` picks one of a list, e.g. a SKU)."""
        f = self.raw(board, device, field)
        raw_value = f["value"] if value is None else value
        notes = []
        if scale != 1.0:
            notes.append(f"converted from {raw_value} {f.get('unit', '')}".strip())
        if f.get("note"):
            notes.append(str(f["note"]))
        if note:
            notes.append(note)
        where = f"{board}.{device}.{field}" if device else f"{board}.board.{field}"
        source = str(f["source"])
        if source.startswith("derived - formula"):
            source = "derived; formula in note"
        return fig(
            raw_value * scale,
            unit,
            map_status(f["status"]),
            f"{source} [{VIA}: {where}]",
            "; ".join(notes) or None,
            f["status"],
        )

    def memory(self, board: str, gib: int, note: str) -> Fig:
        """Board memory in bytes: devices.json states it as text, so the size is given here."""
        source = self.raw(board, None, "memory")["source"]
        return fig(gib * GIB, "bytes", "official", f"{source} [{VIA}]", f"{note} (x 2^30)")

    def csv(self, rel: str) -> list[dict[str, str]]:
        with (self.root / rel).open(encoding="utf-8-sig", newline="") as fh:
            return list(csv.DictReader(fh))
