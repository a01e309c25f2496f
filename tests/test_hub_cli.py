"""``cloud-hub run`` as a real process, and ``policy set / history`` talking to it."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloud_hub.hub.cli import register
from edge_agent.agent.hub.finder import HubFinder
from edge_agent.clikit import CommandLine
from edge_agent.protocol.hub_discovery import HubHint

RUN = (
    "import sys; from edge_agent.clikit import CommandLine; from cloud_hub.hub.cli import register;"
    "cli = CommandLine('cloud-hub', 'hub', '0'); register(cli); sys.exit(cli.main(sys.argv[1:]))"
)


def test_run_then_policy_set_and_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "hub.toml"
    config.write_text(f'[hub]\ndata_dir = "{tmp_path / "data"}"\n[api]\nport = 0\n')
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, "run", "--config", str(config), "--advertise"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    try:
        state = tmp_path / "data" / "hub.json"
        deadline = time.monotonic() + 20
        while not state.exists():
            assert proc.poll() is None, "cloud-hub run exited early"
            assert time.monotonic() < deadline, "cloud-hub run did not start in 20 s"
            time.sleep(0.05)
        # --advertise: the hub announces itself over mDNS with its id and actual port
        port = json.loads(state.read_text())["port"]
        hub_id = json.loads((tmp_path / "data" / "secrets.json").read_text())["hub_id"]
        hint = asyncio.run(_announced(hub_id))
        assert (hint.address, hint.port, hint.scheme) == ("127.0.0.1", port, "http")
        cli = CommandLine("cloud-hub", "hub", "0")
        register(cli)
        doc = tmp_path / "p.json"
        doc.write_text(json.dumps({"name": "night", "template": "energy-first"}))
        assert cli.main(["policy", "set", str(doc), "--config", str(config)]) == 0
        assert cli.main(["policy", "set", str(doc), "--config", str(config)]) == 0
        assert "stored night@2" in capsys.readouterr().out
        assert cli.main(["policy", "history", "night", "--config", str(config)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].split()[0] == "VERSION" and [line.split()[0] for line in out[1:]] == [
            "2",
            "1",
        ]
        assert cli.main(["policy", "history", "day", "--config", str(config)]) == 2
        assert "no policy named 'day'" in capsys.readouterr().err
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"name": "night", "weights": {"speed": 1}}))
        assert cli.main(["policy", "set", str(bad), "--config", str(config)]) == 2
        assert "hub answered 400" in capsys.readouterr().err
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert not state.exists()


async def _announced(hub_id: str) -> HubHint:
    finder = HubFinder(["127.0.0.1"])
    finder.start()
    try:
        deadline = time.monotonic() + 10
        while not (found := [h for h in finder.hints() if h.hub_id == hub_id]):
            assert time.monotonic() < deadline, "the hub was not announced over mDNS"
            await asyncio.sleep(0.05)
        return found[0]
    finally:
        await finder.stop()
