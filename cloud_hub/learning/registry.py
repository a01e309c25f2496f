"""The hub's model registry: exported ONNX versions with their metrics, in a directory."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from edge_agent.errors import InvalidInput
from edge_agent.predictor.onnx_export import digest, read_metadata

INDEX = "index.json"


@dataclass(frozen=True)
class ModelVersion:
    """One registered model: version number, sha256, file name, metrics and time added."""

    version: int
    sha256: str
    file: str
    metrics: dict[str, float]
    added_at: float


class ModelRegistry:
    """Append-only versions under root/; index.json is replaced atomically on each add."""

    def __init__(self, root: Path) -> None:
        """Open (creating if needed) the registry directory."""
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def versions(self) -> list[ModelVersion]:
        """Every version, oldest first."""
        path = self.root / INDEX
        if not path.exists():
            return []
        try:
            rows = json.loads(path.read_text())
            return [ModelVersion(**row) for row in rows]
        except (ValueError, TypeError) as err:
            raise InvalidInput(f"model registry index {path} is corrupt: {err}") from err

    def latest(self) -> ModelVersion | None:
        """The newest version, or None if nothing is registered."""
        rows = self.versions()
        return rows[-1] if rows else None

    def read(self, entry: ModelVersion) -> bytes:
        """The ONNX bytes of a version, checked against its sha256."""
        data = (self.root / entry.file).read_bytes()
        if digest(data) != entry.sha256:
            raise InvalidInput(f"model file {entry.file} does not match its sha256")
        return data

    def add(self, data: bytes, metrics: dict[str, float]) -> ModelVersion:
        """Register a checked ONNX model with its metrics; returns the new version."""
        read_metadata(data)  # refuses bytes that are not a valid ONNX model
        clean = {str(k): float(v) for k, v in metrics.items()}
        with self._lock:
            rows = self.versions()
            version = rows[-1].version + 1 if rows else 1
            entry = ModelVersion(version, digest(data), f"load-v{version}.onnx", clean, time.time())
            _atomic_write(self.root / entry.file, data)
            index = json.dumps([asdict(r) for r in [*rows, entry]], indent=1).encode()
            _atomic_write(self.root / INDEX, index)
        return entry


def _atomic_write(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
