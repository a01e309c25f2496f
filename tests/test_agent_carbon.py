"""Carbon in the agent: the [carbon] config, the series parser, the placer feed, grams per task."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from edge_agent.agent.config import AgentConfig, ConfigError, load_config, render_default
from edge_agent.agent.sensing.carbon import CarbonFeed, CarbonSource, task_carbon
from edge_agent.agent.web.api import AGENT, make_app
from edge_agent.carbon_series import SeriesError, grams, load_series
from edge_agent.placement import Placer, devices_from_profiles
from edge_agent.placement import layout as L

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "carbon_intensity"


def write_series(path: Path, start: datetime, values: list[float]) -> Path:
    """Write an hourly series from ``start`` (a whole UTC hour)."""
    rows = ["timestamp,avg_ci_g_per_kwh"]
    t0 = start.timestamp()
    for i, v in enumerate(values):
        stamp = datetime.fromtimestamp(t0 + 3600 * i, UTC).isoformat(sep=" ")
        rows.append(f"{stamp},{v}")
    path.write_text("\n".join(rows) + "\n")
    return path


def this_hour() -> datetime:
    now = time.time()
    return datetime.fromtimestamp(now - now % 3600, UTC)


def test_real_series_parse_and_replay_in_later_years() -> None:
    ciso = load_series(DATA / "CISO_hourly_2022.csv")
    assert len(ciso.values) == 8760 and ciso.values[0] == pytest.approx(222.3)
    start = ciso.start_s
    assert ciso.at_epoch(start + 2 * 3600 + 59) == ciso.values[2]
    # one series length later (2023-01-01 00:00 UTC), the series repeats
    assert ciso.at_epoch(start + 8760 * 3600) == ciso.values[0]


def test_series_column_and_errors_name_file_and_line(tmp_path: Path) -> None:
    wide = tmp_path / "wide.csv"
    wide.write_text("timestamp,ng,avg\n2022-01-01 00:00:00+00:00,1,300\n")
    assert load_series(wide, "avg").values == (300.0,)
    with pytest.raises(SeriesError, match="no column 'x'"):
        load_series(wide, "x")
    with pytest.raises(SeriesError, match=r"wide\.csv:1.*name a column"):
        load_series(wide)
    bad = tmp_path / "bad.csv"
    bad.write_text("t,g\n2022-01-01 00:00:00+00:00,1\n2022-01-01 01:00:00,2\n")
    with pytest.raises(SeriesError, match=r"bad\.csv:3.*UTC offset") as err:
        load_series(bad)
    assert err.value.line == 3 and err.value.field == "timestamp"


def test_config_carbon_section(tmp_path: Path) -> None:
    series = write_series(tmp_path / "grid.csv", this_hour(), [100.0, 200.0])
    toml = tmp_path / "agent.toml"
    toml.write_text(f'[carbon]\nseries = "{series}"\nregion = "CISO"\nupdate_s = 5\n')
    config = load_config(toml, env={})
    assert config.carbon_series == series and config.carbon_region == "CISO"
    assert config.carbon_update_s == 5.0 and config.carbon_intensity_g_per_kwh is None
    env = {"EDGE_AGENT_CARBON_INTENSITY_G_PER_KWH": "321"}
    assert load_config(None, env=env | {"EDGE_AGENT_CONFIG": "/nonexistent"}).replace(
        data_dir=tmp_path
    ).carbon_intensity_g_per_kwh == pytest.approx(321.0)
    # the rendered default file loads back and leaves carbon unset
    (tmp_path / "default.toml").write_text(render_default())
    assert load_config(tmp_path / "default.toml", env={}).carbon_series is None


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ('series = "{bad}"', r"\[carbon\] series: .*bad\.csv:3: field 'g_per_kwh'"),
        ('series = "{missing}"', r"missing\.csv.*cannot be read"),
        ('series = "{good}"\nintensity_g_per_kwh = 5', "not both"),
        ("intensity_g_per_kwh = -1", "intensity_g_per_kwh must be a number >= 0"),
        ('column = "avg"', "column is set but series is not"),
        ("update_s = 0", "update_s must be"),
        ("bogus = 1", "unknown key 'bogus'"),
    ],
)
def test_config_carbon_errors(tmp_path: Path, body: str, match: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("t,g\n2022-01-01 00:00:00+00:00,1\n2022-01-01 01:00:00+00:00,oops\n")
    good = write_series(tmp_path / "good.csv", this_hour(), [1.0])
    text = body.format(bad=bad, missing=tmp_path / "missing.csv", good=good)
    toml = tmp_path / "agent.toml"
    toml.write_text(f"[carbon]\n{text}\n")
    with pytest.raises(ConfigError, match=match):
        load_config(toml, env={})


def test_feed_writes_the_current_intensity_into_the_kernel(tmp_path: Path) -> None:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    series = load_series(write_series(tmp_path / "s.csv", start, [100.0, 400.0]))
    placer = Placer(devices_from_profiles(["rk3588"]))
    clock = [start.timestamp() + 10]
    feed = CarbonFeed(CarbonSource(0.0, series), placer, 60.0, lambda: clock[0])
    assert feed.update() == 100.0
    from edge_agent.placement import Semantics, TaskContract

    task = TaskContract(Semantics(gflops=2.0))
    low = placer.preview(task)
    clock[0] += 3600
    assert feed.update() == 400.0
    high = placer.preview(task)
    assert low.carbon_g == pytest.approx(grams(low.energy_j, 100.0))
    assert high.carbon_g == pytest.approx(grams(high.energy_j, 400.0))
    assert placer._ws.devices[0, L.DEV_CARBON] == 400.0


def test_task_carbon_uses_measured_energy_when_there_is_one() -> None:
    device = devices_from_profiles(["rk3588"])[0]
    source = CarbonSource(500.0)
    assert task_carbon(source, device, 7.2e6, 1.0) == {"g_per_kwh": 500.0, "carbon_g": 1000.0}
    assert task_carbon(source, device, None, 3.6e6)["carbon_g"] == pytest.approx(500.0)
    assert task_carbon(None, device, None, 3.6e6)["g_per_kwh"] == device.carbon_g_per_kwh


@pytest.mark.asyncio
async def test_agent_records_grams_per_decision_and_task(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    series = write_series(tmp_path / "grid.csv", this_hour(), [250.0] * 3)
    config = AgentConfig(
        data_dir=tmp_path / "data",
        port=0,
        shutdown_grace_s=0.0,
        profile="rk3588",
        carbon_series=series,
        carbon_update_s=0.05,
    ).replace()
    client = await aiohttp_client(make_app(config))
    body = {"semantics": {"gflops": 0.5}, "requirements": {"model_format": None}}
    resp = await client.post("/v1/tasks", json=body)
    task_id = (await resp.json())["task"]["id"]
    for _ in range(500):
        state = (await (await client.get(f"/v1/tasks/{task_id}")).json())["task"]["state"]
        if state == "done":
            break
        await asyncio.sleep(0.01)
    assert state == "done"
    explain = await (await client.get(f"/v1/tasks/{task_id}/explain")).json()
    energy = explain["estimate"]["energy_j"]
    assert explain["estimate"]["carbon_g"] == pytest.approx(grams(energy, 250.0))
    agent = client.app[AGENT]
    assert all(agent.placer._ws.devices[:, L.DEV_CARBON] == 250.0)
    db = sqlite3.connect(config.db_path)
    g, carbon, est = db.execute(
        "SELECT g_per_kwh, carbon_g, energy_j FROM telemetry WHERE task_id = ?", (task_id,)
    ).fetchone()
    assert est is None  # emulated: no measured energy, so the estimate's is used
    assert g == 250.0 and carbon == pytest.approx(grams(energy, 250.0))
    payloads = [json.loads(p) for (p,) in db.execute("SELECT payload FROM outbox")]
    assert any(p.get("carbon_g") == pytest.approx(carbon) for p in payloads)
    db.close()


def test_the_real_series_ship_inside_the_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed agent (or the demo) started anywhere finds the 2022 series by bare name."""
    from cloud_hub.demo import sites
    from edge_agent.carbon_series import shipped_series_dir

    monkeypatch.chdir("/")
    folder = shipped_series_dir()
    assert "site-packages" in str(folder)  # the installed copy, not the checkout's
    names = {p.name for p in folder.glob("*.csv")}
    assert names >= {"CISO_hourly_2022.csv", "BPAT_hourly_2022.csv"}
    assert (folder / "ORIGIN.txt").is_file() and (folder / "LICENSE").is_file()
    four, missing = sites(4)
    assert missing == "" and all(s.series is not None for s in four)
    toml = tmp_path / "agent.toml"
    toml.write_text('[carbon]\nseries = "ERCO_hourly_2022.csv"\n')
    config = load_config(toml, env={})
    assert config.carbon_series == folder / "ERCO_hourly_2022.csv"
    toml.write_text('[carbon]\nseries = "NOPE_hourly_2022.csv"\n')
    with pytest.raises(ConfigError, match=r"NOPE_hourly_2022\.csv"):
        load_config(toml, env={})
