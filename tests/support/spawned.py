"""A real service process (``cloud-hub run``, ``edge-agent run``) started for a crash test."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def spawn(argv: list[str], env: dict[str, str], state: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m argv`` that records ``{"pid", "port"}`` in ``state``; return it and
    its URL."""
    proc = subprocess.Popen([sys.executable, "-m", *argv], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{argv[0]} exited with {proc.returncode}"
        try:
            doc = json.loads(state.read_text())
            if doc["pid"] == proc.pid:
                return proc, f"http://127.0.0.1:{int(doc['port'])}"
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"{argv[0]} did not start within 30 s")
