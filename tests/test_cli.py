"""The console commands in process: ``edge-agent place`` and ``cloud-hub policy``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cloud_hub.cli import main as hub
from edge_agent.cli import main as agent
from edge_agent.clikit import parse_blend
from edge_agent.errors import InvalidInput
from edge_agent.placement import TEMPLATES, Policy
from edge_agent.tasks.models_dir import example_model, example_models

BOARDS = ["--profile", "rk3588", "--profile", "jetson_orin_nano"]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """Run ``edge-agent place ARGV --json``, expect status 0, return the parsed document."""
    assert agent(["place", *argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def fails(capsys: pytest.CaptureFixture[str], main: Any, argv: list[str]) -> str:
    """Run ``main(argv)``, expect status 2 and a one-line error; return that line."""
    assert main(argv) == 2
    err: str = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: " in err
    return err


def test_example_models_are_found() -> None:
    assert "tiny_cnn_int8" in example_models()
    path = example_model("tiny_cnn_int8")
    assert path is not None and path.is_file()
    assert example_model("no_such_model") is None


def test_place_json_on_emulated_boards(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, *BOARDS, "tiny_cnn_int8")
    assert {d["profile"] for d in doc["fleet"]} == {"rk3588", "jetson_orin_nano"}
    assert all(d["emulated"] is True for d in doc["fleet"])
    assert doc["policy"]["name"] == "balanced"
    (decision,) = doc["decisions"]
    assert decision["placed"] and decision["devices"][0] in {d["id"] for d in doc["fleet"]}
    assert decision["estimate"]["latency_s"] > 0 and decision["estimate"]["energy_j"] > 0
    assert decision["summary"].startswith(decision["devices"][0])
    assert decision["task"] == "tiny_cnn_int8"


def test_int8_model_under_kinds_npu_lands_on_the_npu(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, "--profile", "rk3588", "tiny_cnn_int8", "--kinds", "npu")
    assert doc["decisions"][0]["devices"] == ["rk3588/npu"]
    assert doc["decisions"][0]["rejections"] == {"kind not allowed": 1}


def test_count_spreads_or_queues(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(capsys, *BOARDS, "tiny_cnn_int8", "--count", "20")
    decisions = doc["decisions"]
    assert len(decisions) == 20 and all(d["placed"] for d in decisions)
    used = {d["devices"][0] for d in decisions}
    latencies = [d["estimate"]["latency_s"] for d in decisions]
    assert len(used) > 1 or latencies[-1] > latencies[0]
    assert max(latencies) > latencies[0]  # later copies wait behind earlier ones


def test_place_table_explains(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent(["place", *BOARDS, "tiny_cnn_int8", "mlp_fp32", "--policy", "energy-first"]) == 0
    out = capsys.readouterr().out
    assert "emulated boards rk3588, jetson_orin_nano" in out and "energy-first@1" in out
    rows = [line for line in out.splitlines() if line.startswith(("tiny_cnn_int8", "mlp_fp32"))]
    assert len(rows) == 2 and all("est " in row for row in rows)
    why_not = out.split("why not elsewhere (tiny_cnn_int8):\n")[1].splitlines()
    assert len(why_not) == 4 and sum("was chosen" in line for line in why_not) == 1


def test_place_json_contract_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    contract = {
        "semantics": {"gflops": 2.0, "precision": "int8", "operator_histogram": {"conv": 4}},
        "requirements": {"kinds": ["npu"]},
        "task_class": "detector",
    }
    path = tmp_path / "detector.json"
    path.write_text(json.dumps(contract))
    doc = run_json(capsys, "--profile", "rk3588", str(path))
    assert doc["decisions"][0]["devices"] == ["rk3588/npu"]
    assert doc["decisions"][0]["task_class"] == "detector"
    assert doc["decisions"][0]["task"] == "detector"


def test_place_blend_and_latency_bound(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(
        capsys, *BOARDS, "mlp_fp32", "--blend", "latency-first=0.5,energy-first=0.5",
        "--max-latency-ms", "1e-9",
    )  # fmt: skip
    assert doc["policy"]["weights"] == pytest.approx(
        Policy.blend({"latency-first": 0.5, "energy-first": 0.5}).weights
    )
    assert doc["decisions"][0]["placed"] is False


def test_place_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "missing.onnx"
    assert str(missing) in fails(capsys, agent, ["place", *BOARDS, str(missing)])
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    assert "not an ONNX model" in fails(capsys, agent, ["place", *BOARDS, str(garbage)])
    bad_contract = tmp_path / "bad.json"
    bad_contract.write_text('{"semantics": {"gflops": -1}}')
    err = fails(capsys, agent, ["place", *BOARDS, str(bad_contract)])
    assert "bad.json" in err and "semantics.gflops" in err
    assert "'no_such_board'" in fails(
        capsys, agent, ["place", "--profile", "no_such_board", "mlp_fp32"]
    )
    assert "'nope'" in fails(capsys, agent, ["place", *BOARDS, "nope"])
    err = fails(capsys, agent, ["place", *BOARDS, "mlp_fp32", "--blend", "latency-first:1"])
    assert "--blend" in err and "latency-first:1" in err
    err = fails(capsys, agent, ["place", *BOARDS, "mlp_fp32", "--policy", "fastest"])
    assert "'fastest'" in err
    assert "--count" in fails(capsys, agent, ["place", *BOARDS, "mlp_fp32", "--count", "0"])


def test_parse_blend() -> None:
    assert parse_blend("latency-first=0.7, energy-first=0.3") == {
        "latency-first": 0.7,
        "energy-first": 0.3,
    }
    for bad in ("", "a", "a=", "a=x", "a=-1", "a=nan", "a=1,a=2", "=1"):
        with pytest.raises(InvalidInput, match="--blend"):
            parse_blend(bad)


def test_hub_policy_show_template(capsys: pytest.CaptureFixture[str]) -> None:
    assert hub(["policy", "show", "latency-first"]) == 0
    policy = Policy.from_dict(json.loads(capsys.readouterr().out))
    assert policy.name == "latency-first"
    assert policy.weights == pytest.approx(Policy.template("latency-first").weights)


def test_hub_policy_show_blend(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["policy", "show", "--blend", "latency-first=0.7,energy-first=0.3"]
    assert hub([*argv, "--name", "mix", "--version", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    expected = Policy.blend({"latency-first": 0.7, "energy-first": 0.3})
    assert doc["weights"] == pytest.approx(expected.weights)
    assert (doc["name"], doc["version"]) == ("mix", 3)
    assert "NAME or --blend" in fails(capsys, hub, ["policy", "show"])
    assert "NAME or --blend" in fails(capsys, hub, [*argv, "balanced"])
    assert "'nope'" in fails(capsys, hub, ["policy", "show", "nope"])


def test_hub_policy_validate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"name": "mine", "version": 2, "template": "energy-first"}))
    assert hub(["policy", "validate", str(good)]) == 0
    assert capsys.readouterr().out.startswith("ok: mine@2: energy 0.5")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"weights": {"latency": 1, "speed": 1}}))
    err = fails(capsys, hub, ["policy", "validate", str(bad)])
    assert "bad.json" in err and "policy.weights" in err and "speed" in err
    bad.write_text(json.dumps({"template": "balanced", "version": 0}))
    assert "policy.version" in fails(capsys, hub, ["policy", "validate", str(bad)])
    bad.write_text("{")
    assert "not valid JSON" in fails(capsys, hub, ["policy", "validate", str(bad)])
    assert "not found" in fails(capsys, hub, ["policy", "validate", str(tmp_path / "none.json")])


def test_hub_policy_templates(capsys: pytest.CaptureFixture[str]) -> None:
    assert hub(["policy", "templates"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["TEMPLATE", "LATENCY", "ENERGY"]
    assert [line.split()[0] for line in lines[1:]] == list(TEMPLATES)
    assert lines[1].split()[1] == f"{Policy.template(lines[1].split()[0]).weights['latency']:.3g}"


def test_hub_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert hub(["policy"]) == 2
    assert capsys.readouterr().err.startswith("usage: cloud-hub policy")
    assert hub([]) == 2
    assert hub(["--version"]) == 0
    assert capsys.readouterr().out.startswith("cloud-hub ")


def test_no_service_at_the_address_says_how_to_start_one() -> None:
    from cloud_hub.hub.cli import HubUnreachable
    from cloud_hub.hub.cli import request as hub_request
    from edge_agent.cli_agent_http import AgentUnreachable
    from edge_agent.cli_agent_http import request as agent_request

    closed = "http://127.0.0.1:1"  # nothing listens on port 1
    with pytest.raises(AgentUnreachable, match=r"no agent at .*start one: edge-agent run"):
        agent_request(closed, "GET", "/v1/health")
    with pytest.raises(HubUnreachable, match=r"no hub at .*start one: cloud-hub run"):
        hub_request(closed, "GET", "/v1/health")


def test_submit_of_a_missing_file_says_no_such_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.onnx"  # checked before any agent is called (none listens on :1)
    line = fails(capsys, agent, ["submit", str(missing), "--url", "http://127.0.0.1:1"])
    assert f"no such file: {missing} (give an existing .onnx file" in line


def test_tasks_cuts_long_notes_visibly_and_wide_shows_them_whole() -> None:
    from edge_agent.cli_agent_views import NOTE_WIDTH, _task_rows

    error = "not placed: no feasible device (2 estimated latency over max_latency_s, 1 offline)"
    task = {"id": "ab12", "state": "failed", "contract": {}, "error": error}
    cut = _task_rows([task])[1]
    assert error not in cut and error[: NOTE_WIDTH - 1] + "…" in cut
    assert error in _task_rows([task], wide=True)[1]
