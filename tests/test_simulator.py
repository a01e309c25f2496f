"""The what-if simulator: file validation, determinism, oracle sanity, feedback, accounting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cloud_hub.simulator import SimulationInputError, load_fleet, load_workload, parse_fleet, run
from cloud_hub.simulator.agents import AgentChooser
from cloud_hub.simulator.engine import FleetState, Job, simulate
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.runner import prepare_run
from edge_agent.placement import Policy

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _generator(tmp_path: Path, tasks: int, load: float, mix: list[dict[str, Any]]) -> Path:
    doc = {
        "schema": "hetmesh.sim.workload/1",
        "generator": {"load": load, "tasks": tasks, "mix": mix},
    }
    return _write(tmp_path, "wl.json", doc)


MIX = [
    {"model": "mobilenet_v2", "precision": "int8", "weight": 2, "max_latency_ms": 50},
    {"model": "resnet50", "precision": "int8", "weight": 1, "max_latency_ms": 100},
]


def _numbers(doc: dict[str, Any]) -> dict[str, Any]:
    """Return the metrics without the wall-clock timing fields."""
    timing = {"decision_us", "chooser_us", "overhead_pct"}
    return {
        name: {k: v for k, v in m.items() if k not in timing} for name, m in doc["policies"].items()
    }


# --- formats ------------------------------------------------------------------------
def test_examples_load() -> None:
    fleet = load_fleet(EXAMPLES / "fleet_edge_mixed.json")
    assert len(fleet.boxes) == 10 and fleet.link_s[0][1] == pytest.approx(0.002)
    assert fleet.devices_from(0)[-1].capability.link_latency_s == pytest.approx(0.015)
    assert load_workload(EXAMPLES / "workload_edge_mix.json").count() == 4000
    assert load_workload(EXAMPLES / "trace_small.jsonl").count() > 0
    assert load_workload(EXAMPLES / "trace_small.csv").count() > 0


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"boxes": [{"id": "a", "profile": "no_such_board"}]}, "boxes[0].profile"),
        (
            {"boxes": [{"id": "a", "profile": "rk3588", "slowdown": {"gpu": 2}}]},
            "boxes[0].slowdown.gpu",
        ),
        ({"boxes": [{"id": "a", "profile": "rk3588", "count": 0}]}, "boxes[0].count"),
        (
            {"boxes": [{"id": "a", "profile": "rk3588", "links_ms": {"b": 1}}]},
            "boxes[0].links_ms.b",
        ),
        ({"boxes": [{"id": "a", "profile": "rk3588", "colour": "red"}]}, "boxes[0]"),
        ({"boxes": []}, "boxes"),
        ({"default_link_ms": -1, "boxes": [{"id": "a", "profile": "rpi5"}]}, "default_link_ms"),
    ],
)
def test_fleet_errors_name_the_field(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(SimulationInputError) as err:
        parse_fleet(doc, "fleet.json")
    assert err.value.field == field and str(err.value).startswith("fleet.json")


def test_trace_errors_name_file_line_and_field(tmp_path: Path) -> None:
    good = '{"t": 0, "model": "resnet50", "max_latency_ms": 100}\n'
    path = _write(
        tmp_path, "t.jsonl", good + '{"t": 1, "model": "resnet50", "max_latency_ms": -3}\n'
    )
    with pytest.raises(SimulationInputError, match=r"t\.jsonl:2: field 'max_latency_ms'"):
        load_workload(path)
    path = _write(tmp_path, "u.jsonl", good + '{"t": 1, "model": "alexnet", "max_latency_ms": 3}\n')
    with pytest.raises(SimulationInputError, match=r"u\.jsonl:2: field 'model': unknown model"):
        load_workload(path)
    path = _write(tmp_path, "v.jsonl", good + "{oops\n")
    with pytest.raises(SimulationInputError, match=r"v\.jsonl:2: .*not valid JSON"):
        load_workload(path)
    path = _write(tmp_path, "w.csv", "t,model,max_latency_ms\n0,resnet50,100\n0.5,resnet50,x\n")
    with pytest.raises(SimulationInputError, match=r"w\.csv:3: field 'max_latency_ms'"):
        load_workload(path)
    path = _write(tmp_path, "x.csv", "t,model\n0,resnet50\n")
    with pytest.raises(SimulationInputError, match="max_latency_ms"):
        load_workload(path)


def test_generator_errors(tmp_path: Path) -> None:
    with pytest.raises(SimulationInputError, match=r"generator\.load"):
        load_workload(_generator(tmp_path, 10, 0, MIX))
    bad = [{"model": "resnet50", "precision": "int3", "max_latency_ms": 5}]
    with pytest.raises(SimulationInputError, match=r"generator\.mix\[0\]\.precision"):
        load_workload(_generator(tmp_path, 10, 0.5, bad))


# --- behaviour ----------------------------------------------------------------------
SMALL_FLEET = {
    "boxes": [
        {"id": "pi", "profile": "rpi5"},
        {"id": "rock", "profile": "rk3588"},
        {"id": "nano", "profile": "jetson_orin_nano"},
    ]
}


def test_same_seed_same_metrics(tmp_path: Path) -> None:
    fleet = parse_fleet(SMALL_FLEET, "small")
    wl = load_workload(_generator(tmp_path, 300, 0.6, MIX))
    pols = [Policy.template("latency-first")]
    a = run(fleet, wl, pols, seed=3, baselines=["random", "oracle"])
    b = run(fleet, wl, pols, seed=3, baselines=["random", "oracle"])
    c = run(fleet, wl, pols, seed=4, baselines=["random", "oracle"])
    assert _numbers(a) == _numbers(b)
    assert _numbers(a) != _numbers(c)


def test_oracle_no_worse_than_random(tmp_path: Path) -> None:
    fleet = parse_fleet(SMALL_FLEET, "small")
    wl = load_workload(_generator(tmp_path, 400, 0.5, MIX))
    doc = run(fleet, wl, [], seed=1, baselines=["random", "oracle"])
    pol = doc["policies"]
    assert pol["oracle"]["latency_ms"]["mean"] <= pol["random"]["latency_ms"]["mean"]


def test_slow_device_loses_work_under_latency_first(tmp_path: Path) -> None:
    boxes = [
        {"id": "a", "profile": "rk3588", "slowdown": {"npu": 5.0}},
        {"id": "b", "profile": "rk3588"},
    ]
    fleet = parse_fleet({"default_link_ms": 0.0, "boxes": boxes}, "two")
    wl = load_workload(_generator(tmp_path, 600, 0.3, MIX[1:]))
    tasks, truth, feasible, _ = prepare_run(fleet, wl, 1, 0.1)
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in truth.types}
    slow = next(sd.index for sd in fleet.devices if sd.device.id == "a/npu")
    chooser = AgentChooser(fleet, Policy.template("latency-first"))
    out = simulate(tasks, FleetState(fleet, truth, feasible, memory), chooser)
    on_slow = [d == slow for d in out.device]
    early, late = on_slow[:60], on_slow[-300:]
    assert sum(early) / len(early) > sum(late) / len(late)
    assert sum(late) / len(late) < 0.1
    assert chooser.placers[0].correction("resnet50:int8", "a/npu") > 3.0


def test_every_task_ends_exactly_once(tmp_path: Path) -> None:
    fleet = parse_fleet(SMALL_FLEET, "small")
    mix = [*MIX, {"model": "yolov8n", "precision": "int8", "max_latency_ms": 0.001}]
    wl = load_workload(_generator(tmp_path, 400, 0.7, mix))
    tasks, truth, feasible, _ = prepare_run(fleet, wl, 2, 0.2)
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in truth.types}
    ended: list[int] = []

    class Counting(AgentChooser):
        def finished(self, job: Job, now: float) -> None:
            ended.append(job.task.index)
            super().finished(job, now)

    chooser = Counting(fleet, Policy.template("latency-first"), admission=True)
    out = simulate(tasks, FleetState(fleet, truth, feasible, memory), chooser)
    rejected = [i for i, d in enumerate(out.device) if d == -1]
    assert rejected, "the 1 us SLO must make admission control reject some tasks"
    assert sorted(ended + rejected) == [t.index for t in tasks]
    assert not chooser._open  # every placed task got its feedback
    for t in tasks:
        if out.device[t.index] >= 0:
            assert out.finish_s[t.index] - t.t == pytest.approx(out.latency_s[t.index])
            assert out.latency_s[t.index] >= out.service_s[t.index] - 1e-12 > 0


def test_unplaceable_task_is_rejected_by_every_baseline(tmp_path: Path) -> None:
    fleet = parse_fleet({"boxes": [{"id": "c", "profile": "coral_edgetpu_host"}]}, "c")
    rows = [
        {"t": i / 10, "model": "vit_base", "precision": "fp16", "max_latency_ms": 100}
        for i in range(20)
    ]
    path = _write(tmp_path, "vit.jsonl", "\n".join(json.dumps(r) for r in rows))
    doc = run(fleet, load_workload(path), [Policy.template("latency-first")], seed=1)
    assert {m["rejected"] for m in doc["policies"].values()} == {20}
    with pytest.raises(SimulationInputError, match="no device"):
        mix = [{k: v for k, v in rows[0].items() if k != "t"}]
        prepare_run(fleet, load_workload(_generator(tmp_path, 5, 0.5, mix)), 1, 0.1)


def test_cli_json_chart_and_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xml.etree import ElementTree

    from cloud_hub.simulator.cli import main

    chart = tmp_path / "c.svg"
    argv = [
        "--fleet",
        str(EXAMPLES / "fleet_edge_mixed.json"),
        "--workload",
        str(EXAMPLES / "trace_small.jsonl"),
        "--policy",
        "energy-first",
    ]
    assert main([*argv, "--json", "--chart", str(chart)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policies"]["energy-first"]["tasks"] == 8 and "oracle" in doc["policies"]
    names = [
        t.text for t in ElementTree.parse(chart).getroot().iter("{http://www.w3.org/2000/svg}text")
    ]
    assert "energy-first" in names and "k8s-binpack" in names
    assert main([*argv[:3], str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err


def test_cli_table_keeps_columns_apart_and_shows_carbon_and_deferral(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cloud_hub.simulator.cli import main

    argv = [
        "--fleet",
        str(EXAMPLES / "fleet_carbon_sites.json"),
        "--workload",
        str(EXAMPLES / "workload_deferrable.jsonl"),
    ]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    assert head[:3] == ["policy", "mean", "ms"]
    for line in lines[1 : lines.index("") - 1]:  # the policy rows: 8 cells, however wide
        assert len(line.split()) == 8, line
    carbon = lines[lines.index("") + 1 :]
    assert carbon[0].split()[:4] == ["policy", "CO2", "g", "now"]
    assert "ca g" in carbon[0] and "tx g" in carbon[0]
    cells = carbon[1].split()
    assert cells[0] == "latency-first" and cells[3].endswith("%") and "/" in cells[4]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["carbon"]["latency-first"]
    shifted = doc["shifted"]
    assert set(shifted["co2_g_by_site"]) == {"ca", "tx"}
    assert sum(shifted["co2_g_by_site"].values()) == pytest.approx(shifted["co2_g"])
    assert doc["deadline_misses"] == 0 and shifted["deferred"] >= 1
    assert float(cells[3].rstrip("%")) == pytest.approx(
        100 * doc["carbon_saving_deferrable"], abs=0.05
    )
