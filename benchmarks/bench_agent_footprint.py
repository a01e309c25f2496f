"""Footprint benchmark: resident memory of an idle running agent; the last line is JSON.

    python benchmarks/bench_agent_footprint.py [--settle-s 3]

Starts a real agent process (emulated RK3588, loopback), waits until it answers
``/v1/health``, runs one task through it (so the lazily built paths are loaded), lets it
settle, then reads VmRSS (and VmHWM, the peak) from ``/proc/PID/status``. Also reports the
figure for an agent probing this machine (no profile), which loads the device probes.
Target (issue 3): idle_rss_mb <= 80.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from pathlib import Path

from bench_agent_harness import burst, get, spawn, workdir


def status_mb(pid: int) -> dict[str, float]:
    """Return VmRSS and VmHWM of ``pid`` in MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def measure(profile: str | None, settle_s: float) -> dict[str, float]:
    """Start an agent, run one task, settle, return its memory figures."""
    with workdir() as tmp:
        proc, port = spawn(Path(tmp) / "data", profile)
        try:
            asyncio.run(burst(port, 1, "warm"))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if get(port, "/v1/tasks")["tasks"][0]["state"] in ("done", "failed"):
                    break
                time.sleep(0.05)
            get(port, "/v1/health")
            time.sleep(settle_s)
            return status_mb(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settle-s", type=float, default=3.0)
    args = parser.parse_args()
    emulated = measure("rk3588", args.settle_s)
    probed = measure(None, args.settle_s)
    result = {
        "idle_rss_mb": emulated["VmRSS"],
        "peak_rss_mb": emulated["VmHWM"],
        "probed_idle_rss_mb": probed["VmRSS"],
        "target_idle_rss_mb": 80,
    }
    for key, value in result.items():
        print(f"{key:>20}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
