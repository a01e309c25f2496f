"""Telemetry: power meters (RAPL powercap, hwmon) and the periodic sampler writing to SQLite."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.sensing.power import Meters, Reading, energy_between
from edge_agent.agent.web.api import AGENT, make_app
from edge_agent.resources.probe import probe_machine


def sysfs(root: Path, energy_uj: dict[str, int], hwmon_uw: int | None = None) -> Path:
    """Write a /sys tree in the kernel's powercap (and hwmon) file format under ``root``."""
    for domain, value in energy_uj.items():
        d = root / "class" / "powercap" / domain
        d.mkdir(parents=True, exist_ok=True)
        (d / "energy_uj").write_text(f"{value}\n")
        (d / "max_energy_range_uj").write_text("262143328850\n")
    if hwmon_uw is not None:
        h = root / "class" / "hwmon" / "hwmon0"
        h.mkdir(parents=True, exist_ok=True)
        (h / "power1_input").write_text(f"{hwmon_uw}\n")
    return root


def test_rapl_packages_are_summed_subzones_ignored_and_wraps_unwrapped(tmp_path: Path) -> None:
    cpus = tuple(d for d in probe_machine().devices if d.kind.name.startswith("CPU"))
    root = sysfs(
        tmp_path,
        {"intel-rapl:0": 1_000_000, "intel-rapl:1": 2_000_000, "intel-rapl:0:0": 5},
        hwmon_uw=7_500_000,
    )
    meters = Meters.discover(cpus, root)
    assert [p.name for p in meters.rapl] == ["intel-rapl:0", "intel-rapl:1"]
    assert meters.board_watts() == 7.5
    first = meters.read(cpus[0])
    assert first is not None and first.joules == 3.0
    sysfs(root, {"intel-rapl:0": 1_500_000, "intel-rapl:1": 2_250_000})
    assert energy_between(first, meters.read(cpus[0])) == pytest.approx(0.75)
    wrapped = Reading(1.0, 0.0, wrap_j=100.0)
    assert energy_between(Reading(99.0, 0.0, 100.0), wrapped) == pytest.approx(2.0)
    assert energy_between(first, None) is None


def test_no_power_reported_here_is_clean_absence() -> None:
    devices = probe_machine().devices
    meters = Meters.discover(devices)
    readable = [
        p
        for p in Path("/sys/class/powercap").glob("intel-rapl:*/energy_uj")
        if p.parent.name.count(":") == 1 and _readable(p)
    ]
    assert bool(meters.rapl) == bool(readable)
    if not readable:
        assert meters.package() is None
        assert all(meters.read(d) is None for d in devices if not d.kind.name.startswith("GPU"))


@pytest.mark.asyncio
async def test_sampler_writes_host_and_device_samples(
    aiohttp_client: Any, emulated_agent: Callable[..., AgentConfig]
) -> None:
    config = emulated_agent(telemetry_interval_s=0.02)
    client = await aiohttp_client(make_app(config))
    body = {"semantics": {"gflops": 2.5}, "requirements": {"kinds": ["cpu"], "model_format": None}}
    assert (await client.post("/v1/tasks", json=body)).status == 202
    agent = client.app[AGENT]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = _samples(config.db_path)
        busy = [r for r in rows if r["device"] == "rk3588/cpu" and r["utilization"] > 0]
        if busy and agent.sampler.samples >= 3:
            break
        await asyncio.sleep(0.01)
    assert busy, rows  # the emulated CPU was seen busy while it ran the task
    host = [r for r in rows if r["device"] == "host"]
    assert host and {"cpu_percent", "memory_percent"} <= set(json.loads(host[-1]["detail"]))
    assert {r["device"] for r in rows} == {"host", "rk3588/cpu", "rk3588/npu"}
    assert all(0 <= r["utilization"] <= 1 for r in rows)
    assert all(r["emulated"] == 1 for r in rows if r["device"] != "host")
    assert all(r["energy_j"] is None for r in rows if r["emulated"])  # no power for emulation


def _samples(db: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM telemetry WHERE kind = 'sample'")]
    finally:
        conn.close()


def _readable(path: Path) -> bool:
    try:
        int(path.read_text())
    except (OSError, ValueError):
        return False
    return True
