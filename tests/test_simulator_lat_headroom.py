"""The headroom tool: latency-first as learned against latency-first given cold-start truth."""

from __future__ import annotations

import importlib
import math
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cloud_hub.simulator import slo_sweep
from cloud_hub.simulator.slo_fleet import HIDDEN_SLOWDOWN
from cloud_hub.simulator.slo_scenario import published_scenario
from edge_agent.placement.pooling import DRIFTED

ROOT = Path(__file__).resolve().parents[1]
TASKS = 300


@pytest.fixture
def headroom(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    return importlib.import_module("lat_first_headroom")


def test_paired_summary_pairs_by_seed() -> None:
    base, variant = [1.0, 1.1, 0.9, 1.2], [0.9, 1.1, 1.0, 1.0]
    s = slo_sweep.paired_summary(base, variant)
    diffs = [-0.1, 0.0, 0.1, -0.2]
    assert s["diff"] == pytest.approx(statistics.fmean(diffs))
    assert s["se"] == pytest.approx(statistics.stdev(diffs) / 2)
    assert (s["better"], s["worse"], s["n"]) == (2, 1, 4)  # the identical seed is neither
    assert s["over_1_05"] == (2, 1)
    assert s["base_mean"] == pytest.approx(1.05) and s["variant_mean"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="one figure per seed"):
        slo_sweep.paired_summary([1.0], [1.0, 2.0])


def test_true_drift_gives_a_hidden_slow_device_its_slowdown_before_any_measurement(
    headroom: ModuleType,
) -> None:
    gap = headroom.gap
    sc = published_scenario(0.8, TASKS, 1)
    index = gap.agent(sc).placer.device_ids.index("rk3588.c2/npu")
    before = {t.model: r for t, d, _c, r, _l in gap.cold_pairs(gap.agent(sc), sc) if d == index}
    assert min(before.values()) > 1.5  # 2x slower than published: every cold estimate optimistic
    given = gap.agent(sc)
    headroom.set_true_drift(given, sc)
    after = [(t.model, r, label) for t, d, _c, r, label in gap.cold_pairs(given, sc) if d == index]
    assert {m for m, _r, _l in after} == set(before)
    for model, ratio, label in after:
        assert ratio == pytest.approx(1.0, rel=0.05), model  # true mean / estimate
        assert label.endswith(DRIFTED)
    assert HIDDEN_SLOWDOWN["rk3588.c2/npu"] == 2.0
    assert not given.placer._samples  # nothing counted as measured: only the drift is known


def test_tool_prints_the_paired_figures_with_the_sweeps_baseline() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/lat_first_headroom.py"),
            *("--fix", "drift", "--scenario", "slo-published", "--tasks", str(TASKS)),
            *("--seeds", "1,3"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "slo-published at 80%, as learned -> given drift:"
    pairs = [p.split(":")[1].split("->") for p in lines[1].split()]
    base = slo_sweep.sweep(published_scenario, 0.8, TASKS, [1, 3])
    assert [float(b) for b, _f in pairs] == [round(r, 3) for r in base]
    fixed = [float(f) for _b, f in pairs]
    assert all(r > 0 and math.isfinite(r) for r in fixed)
    assert lines[2].startswith(f"mean {statistics.fmean(base):.4f} -> ")
    assert lines[2].endswith("(n 2)")


@pytest.mark.parametrize(
    ("fix", "says"),
    [
        ("cold:some", "write drift, or cold: or explored:"),
        ("cold:all:datasheet", "is not one of published"),
    ],
)
def test_tool_says_what_to_write_for_a_fix_it_cannot_read(fix: str, says: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/lat_first_headroom.py"), "--fix", fix, "--seeds", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert says in done.stderr


def test_explored_only_stops_the_probes_and_leaves_estimates_and_bounds(
    headroom: ModuleType,
) -> None:
    gap = headroom.gap
    sc = published_scenario(0.8, TASKS, 1)
    a = gap.agent(sc)
    pairs = [(c, d) for _t, d, c, _r, label in gap.cold_pairs(a, sc) if "other precision" in label]
    assert pairs  # the Orin's fp16 and the CPUs' fp32 figures for int8 tasks
    ex = a.placer.exploration
    assert all(ex.untried[c][d] > 1.0 for c, d in pairs)  # explorable before
    corrections = a.placer._ws.corrections.copy()
    bounds = ex.bound_rows.copy()
    gap.set_true_cold_start(a, sc, "all", "other-precision", explored_only=True)
    assert all(ex.untried[c][d] == 1.0 for c, d in pairs)  # never probed now
    assert (a.placer._ws.corrections == corrections).all()
    assert (ex.bound_rows == bounds).all()  # the congestion charge still counts them at bound
    assert not a.placer._samples
