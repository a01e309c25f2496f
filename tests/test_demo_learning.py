"""``cloud-hub demo --learning``: one federated round through a real SuperLink and SuperNodes."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import psutil
import pytest

from cloud_hub import demo

PID = re.compile(r"^(\S+)\s+pid (\d+)", re.M)  # the demo's "name  pid N" lines
VERDICT = re.compile(r"^learning: (demo-\S+)\s+model v1 (accepted|refused): (.+)$", re.M)


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.configure(parser)
    return parser.parse_args(list(argv))


def started_under(root: Path) -> list[int]:
    """Processes still running whose command line names a path under ``root``."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if str(root) in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(int(proc.info["pid"]))
    return found


def flower_logs(root: Path, tail: int = 60) -> str:
    """The last lines of the run's ServerApp log and of each SuperNode's log, for a failure."""
    found = sorted(root.glob("hub/learning/superlink/run-*.log"))
    found += sorted(root.glob("*/supernode/supernode.log"))
    return "".join(
        f"\n--- {p.relative_to(root)}\n"
        + "\n".join(p.read_text(errors="replace").splitlines()[-tail:])
        for p in found
    )


@pytest.mark.slow
def test_demo_trains_ships_and_agents_judge_the_model_then_nothing_is_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = args("--agents", "2", "--learning", "--learn-after", "25", "--duration", "1",
             "--every", "2", "--data-dir", str(tmp_path))  # fmt: skip
    assert demo.run(a) == 0
    out = capsys.readouterr().out
    assert "learning: SuperNodes running on demo-jetson_orin_nano, demo-rk3588" in out, out
    assert re.search(r"learning: run \d+ completed, 1 round, 2 nodes; model v1 registered", out), (
        out + flower_logs(tmp_path)
    )
    # each agent validated the shipped ONNX on its own telemetry and says what it decided
    verdicts = {agent: (what, why) for agent, what, why in VERDICT.findall(out)}
    assert set(verdicts) == {"demo-rk3588", "demo-jetson_orin_nano"}, out
    assert all("candidate rel. MAE" in why for _, why in verdicts.values())
    for agent, (what, _) in verdicts.items():
        state = json.loads((tmp_path / agent / "predictor" / "state.json").read_text())
        assert state["history"][-1]["version"] == 1
        assert state["history"][-1]["accepted"] is (what == "accepted")
    runs = json.loads((tmp_path / "hub" / "learning" / "runs.json").read_text())
    assert [r["status"] for r in runs] == ["completed"] and runs[0]["model_version"] == 1
    assert runs[0]["nodes"] == 2 and runs[0]["rounds"][0]["train"] == 2  # took part
    index: Any = json.loads((tmp_path / "hub" / "learning" / "models" / "index.json").read_text())
    # the federated evaluation's error, registered, from both nodes
    assert "eval_rel_mae" in json.dumps(index), flower_logs(tmp_path)
    assert index[-1]["metrics"]["eval_nodes"] == 2, flower_logs(tmp_path)
    # the hub, the agents, the SuperLink, the SuperNodes and their app processes: all gone
    pids = [int(pid) for _, pid in PID.findall(out)]
    assert len(pids) == 3 and not any(map(psutil.pid_exists, pids))
    assert started_under(tmp_path) == []
    assert "stopped: hub (0), demo-rk3588 (0), demo-jetson_orin_nano (0)" in out


def test_without_flower_the_demo_says_how_to_enable_learning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "flwr" else real(name, *a)
    )
    with pytest.raises(demo.DemoError, match=re.escape("pip install '.[learning]'")):
        demo.run(args("--learning", "--data-dir", str(tmp_path)))
    assert not any(tmp_path.iterdir())  # refused before anything started
