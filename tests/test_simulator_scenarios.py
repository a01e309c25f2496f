"""Scenarios (b) and (c): inline devices, Gavel and openb loaders, GPU sharing, progress."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cloud_hub.simulator import SimulationInputError, parse_fleet, run
from cloud_hub.simulator.cli import progress_printer
from cloud_hub.simulator.gavel import (
    gavel_fleet,
    load_throughputs,
    load_trace,
    profiled_corrections,
)
from cloud_hub.simulator.openb import Fragmentation, Pod, gpu_devices, load_nodes, load_pods
from cloud_hub.simulator.sharing import (
    BinpackShare,
    FgdShare,
    HetmeshShare,
    SpreadShare,
    arrivals,
    simulate_sharing,
)
from cloud_hub.simulator.truth import GroundTruth
from edge_agent.placement import Policy

JOBS = ("ResNet-50 (batch size 64)", "Recommendation (batch size 1024)")
RATES = {  # steps/s, shaped like Gavel's: ResNet-50 fastest on V100, Recommendation on K80
    "v100": {JOBS[0]: 20.0, JOBS[1]: 10.0},
    "p100": {JOBS[0]: 12.0, JOBS[1]: 20.0},
    "k80": {JOBS[0]: 3.0, JOBS[1]: 15.0},
}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _throughput_csv(tmp_path: Path) -> Path:
    lines = ["worker_type,job_type,scale_factor,steps_per_sec_isolated"]
    lines += [f"{g},{j},1,{r}" for g, jobs in RATES.items() for j, r in jobs.items()]
    lines += [f"v100,{JOBS[0]},2,35.0", f"k80_unconsolidated,{JOBS[0]},1,1.0"]
    return _write(tmp_path, "thr.csv", "\n".join(lines) + "\n")


def _trace(rows: list[tuple[str, int, float, int]]) -> str:
    """Gavel's msr format: type, command, steps arg, needs data, steps, arrival, scale."""
    return "".join(f"{j}\tpython3 x.py\t-n\t1\t{s}\t{t:.6f}\t{k}\n" for j, s, t, k in rows)


# --- inline devices -----------------------------------------------------------------
def test_inline_devices_and_their_errors() -> None:
    gpu = {"id": "gpu", "kind": "gpu_nvidia", "count": 3, "peak_gops": {"fp32": 1000},
           "memory_gb": 8, "max_power_w": 100, "rates": {"resnet50": 50.0}}  # fmt: skip
    fleet = parse_fleet({"boxes": [{"id": "c", "devices": [gpu]}]}, "f.json")
    assert [sd.device.id for sd in fleet.devices] == ["c/gpu-1", "c/gpu-2", "c/gpu-3"]
    assert (
        fleet.devices[0].profile is None
        and fleet.devices[0].device.capability.memory_bytes == 8 * 2**30
    )
    truth = GroundTruth(fleet, [("resnet50", "fp32")], 1, 0.0, 1)
    assert truth.base[("resnet50", "fp32")][0] == pytest.approx(1 / 50)
    assert truth.source[("resnet50", "fp32")][0] == "measured-rate"
    for bad, field in [
        ({**gpu, "kind": "tpu"}, "boxes[0].devices[0].kind"),
        ({**gpu, "peak_gops": {"fp64": 1}}, "boxes[0].devices[0].peak_gops"),
        ({k: v for k, v in gpu.items() if k != "memory_gb"}, "boxes[0].devices[0]"),
        ({**gpu, "rates": {"resnet50": -1}}, "boxes[0].devices[0].rates.resnet50"),
    ]:
        with pytest.raises(SimulationInputError) as err:
            parse_fleet({"boxes": [{"id": "c", "devices": [bad]}]}, "f.json")
        assert err.value.field == field
    with pytest.raises(SimulationInputError, match="exactly one of profile or devices"):
        parse_fleet({"boxes": [{"id": "c", "profile": "rpi5", "devices": [gpu]}]}, "f.json")


# --- Gavel --------------------------------------------------------------------------
def test_gavel_loaders_keep_single_gpu_jobs(tmp_path: Path) -> None:
    thr = load_throughputs(_throughput_csv(tmp_path))
    assert thr["v100"][JOBS[0]] == 20.0 and set(thr) == {"v100", "p100", "k80"}
    rows = [(JOBS[0], 7200, 0.0, 1), (JOBS[1], 3000, 5.0, 2), (JOBS[1], 3000, 9.0, 1)]
    wl, multi = load_trace(_write(tmp_path, "a.trace", _trace(rows)), thr, slo_x=2.0)
    assert multi == 1 and wl.count() == 2
    first = wl.rows[0]
    assert first["work"] == 7200 and first["precision"] == "fp32"
    assert first["max_latency_ms"] == pytest.approx(2.0 * 7200 / 20.0 * 1e3)
    fleet = gavel_fleet(thr, "1:1:2")
    assert [sd.device.id for sd in fleet.devices] == [
        "cluster/v100", "cluster/p100", "cluster/k80-1", "cluster/k80-2"
    ]  # fmt: skip
    with pytest.raises(SimulationInputError, match="unknown Gavel job"):
        load_trace(_write(tmp_path, "b.trace", _trace([("AlexNet", 1, 0.0, 1)])), thr)
    with pytest.raises(SimulationInputError, match=r"b2\.trace:1: .*7 or 10"):
        load_trace(_write(tmp_path, "b2.trace", "ResNet-50\t1\n"), thr)
    with pytest.raises(SimulationInputError, match="V100:P100:K80"):
        gavel_fleet(thr, "1:1")


def test_gavel_jct_is_steps_over_measured_rate_and_profiling_helps(tmp_path: Path) -> None:
    thr = load_throughputs(_throughput_csv(tmp_path))
    fleet = gavel_fleet(thr, "1:1:1")
    rows = [(JOBS[i % 2], 3600, 7200.0 * i, 1) for i in range(12)]
    wl, _ = load_trace(_write(tmp_path, "c.trace", _trace(rows)), thr)
    pols = [Policy.template("latency-first")]
    cold = run(fleet, wl, pols, sigma=0.0, baselines=["oracle"])["policies"]
    # no queueing (jobs 2 h apart, each <= 1.2 h): the oracle's JCT is the best GPU's time
    best = [3600 / 20.0, 3600 / 20.0]  # ResNet-50 on V100, Recommendation on P100
    assert cold["oracle"]["latency_ms"]["mean"] == pytest.approx(np.mean(best) * 1e3)
    table = profiled_corrections(fleet)
    assert set(table) == {f"{j}:fp32" for j in JOBS}
    warm = run(fleet, wl, pols, sigma=0.0, baselines=[], corrections=table)["policies"]
    assert warm["latency-first"]["latency_ms"]["mean"] == pytest.approx(
        cold["oracle"]["latency_ms"]["mean"]
    )


# --- openb --------------------------------------------------------------------------
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1,2,P100\nn1,32000,1,0,\nn2,96000,1,1,T4\n"
PODS = (
    "name,num_gpu,gpu_milli,creation_time\n"
    "p0,1,500,10\np1,0,0,1\np2,8,1000,2\np3,1,1000,3\np4,1,250,4\n"
)


def test_openb_loaders(tmp_path: Path) -> None:
    nodes = load_nodes(_write(tmp_path, "n.csv", NODES))
    assert nodes == [("n0", 2, "P100"), ("n2", 1, "T4")]
    pods, multi = load_pods(_write(tmp_path, "p.csv", PODS))
    assert [p.name for p in pods] == ["p3", "p4", "p0"] and multi == 1
    devices, node_of = gpu_devices(nodes)
    assert [d.id for d in devices] == ["n0/gpu0", "n0/gpu1", "n2/gpu0"] and node_of == [0, 0, 1]
    bad = PODS.replace("p4,1,250", "p4,1,2500")
    with pytest.raises(SimulationInputError, match=r"p\.csv:\d: field 'gpu_milli'"):
        load_pods(_write(tmp_path, "p.csv", bad))


def test_fragmentation_rate_follows_fgd_definition() -> None:
    frag = Fragmentation([Pod("a", 500, 0), Pod("b", 1000, 1)])  # half the pods want 500
    # GPU 0: 300 free -> fragment for both (300); GPU 1: 600 free -> only for 1000 (0.5*600)
    free = np.array([300.0, 600.0, 0.0])
    assert frag.rate(free) == pytest.approx((300 + 0.5 * 600) / 900)
    assert frag.rate(np.array([1000.0])) == 0.0 and frag.rate(np.zeros(2)) == 0.0


def test_sharing_never_overbooks_and_binpack_fragments_less_than_spread() -> None:
    pods = [Pod(str(i), m, i) for i, m in enumerate([300, 700, 500, 1000, 250] * 8)]
    nodes = [(f"n{i}", 4, "G") for i in range(5)]
    devices, _ = gpu_devices(nodes)
    frag = Fragmentation(pods)
    requests = arrivals(pods, 1000.0 * len(devices), seed=2)
    assert sum(requests) >= 1000.0 * len(devices) > sum(requests[:-1])
    out: dict[str, Any] = {}
    for chooser in (
        HetmeshShare(devices, Policy.from_dict({"weights": {"fragmentation": 1}})),
        SpreadShare(1),
        BinpackShare(1),
        FgdShare(1, frag),
    ):
        out[chooser.name] = simulate_sharing(len(devices), requests, chooser, frag)
    for r in out.values():
        assert 0.0 <= r["allocated_share"] <= 1.0 and set(r["frag_rate_by_arrived"]) >= {"90%"}
    binpack, spread = out["k8s-binpack"], out["k8s-spread"]
    assert binpack["frag_rate_by_arrived"]["80%"] < spread["frag_rate_by_arrived"]["80%"]
    assert out["custom"]["allocated_share"] >= spread["allocated_share"]


def test_progress_printer_only_on_tty_or_forced() -> None:
    plain = io.StringIO()
    assert progress_printer(plain) is None
    show = progress_printer(plain, force=True)
    assert show is not None
    for done in range(0, 101, 5):
        show("oracle", done, 100)
    lines = plain.getvalue().splitlines()
    assert len(lines) == 11 and lines[-1].endswith("100/100")  # one line per tenth

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    bar = progress_printer(tty)
    assert bar is not None
    bar("random", 1, 2)
    bar("random", 2, 2)
    assert tty.getvalue().count("\r") == 2 and tty.getvalue().endswith("2/2\n")
