"""``cloud-hub demo`` for real: a hub and agent subprocesses on loopback, then none left."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import cloud_hub
from cloud_hub import demo

PID = re.compile(r"^(\S+)\s+pid (\d+)", re.M)
PLACED = re.compile(r"^([0-9a-f]{8})  \S+\s+(demo-\S+)\s+(\S+/\S+)\s+est", re.M)
#: An offloaded task: where it ran, then its chain, origin -> peer.
OFFLOADED = re.compile(
    r"^[0-9a-f]{8}  npu-int8 \(NPU only\)\s+(demo-\S+)\s+offloaded, ran on (\S+):\S+ .*\n"
    r"\s+chain: (\S+): forward to (\S+) -> (\S+): ",
    re.M,
)
HUB_PEERS = re.compile(r"^hub: (demo-\S+)\s.*; mesh peers (\S+)$", re.M)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize(
    ("discover", "verbose"), [(False, False), (True, True)], ids=["url-summary", "mdns-verbose"]
)
def test_demo_with_two_agents_syncs_to_the_hub_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], discover: bool, verbose: bool
) -> None:
    parser = argparse.ArgumentParser()
    demo.configure(parser)
    args = parser.parse_args(
        ["--agents", "2", "--duration", "2", "--every", "1", "--data-dir", str(tmp_path)]
        + (["--discover"] if discover else [])
        + (["--verbose"] if verbose else [])
    )
    assert demo.run(args) == 0
    out = capsys.readouterr().out
    pids = {name: int(pid) for name, pid in PID.findall(out)}
    assert set(pids) == {"hub", "demo-rk3588", "demo-jetson_orin_nano"}, out
    assert all(gone(pid) for pid in pids.values()), pids
    assert "dashboard: http://127.0.0.1:" in out
    # the mesh: one fleet key (only its fingerprint shown), trust, an NPU task offloaded
    key = (tmp_path / "fleet.key").read_text().strip()
    assert key not in out and "mesh: new fleet key, fingerprint " in out
    assert "mesh: all 2 agents trust each other" in out, out
    [(origin, ran_on, first, to, peer)] = OFFLOADED.findall(out)
    jetson, rk3588 = "demo-jetson_orin_nano", "demo-rk3588"
    assert (origin, ran_on, first, to, peer) == (jetson, rk3588, jetson, rk3588, rk3588), out
    # the hub's fleet table shows each agent's trusted peer (heartbeats carry them)
    assert dict(HUB_PEERS.findall(out)) == {jetson: rk3588, rk3588: jetson}, out
    # sites on real grids; deferrable work held at the dirtier one; one re-evaluation
    assert re.search(r"^carbon: demo-rk3588 +CISO \(California\): real 2022 hourly", out, re.M)
    assert re.search(r"^carbon: demo-jetson_orin_nano +ERCO \(Texas\): real 2022", out, re.M)
    held = re.findall(
        r"^carbon: [0-9a-f]{8}  nightly-batch \(deadline 8 h\) on (\S+): (.*)$", out, re.M
    )
    assert len(held) == 2 and len({site for site, _ in held}) == 1, out
    assert all(why.startswith(("deferred until ", "queued (not held)")) for _, why in held)
    assert out.count("hub re-evaluation (GET /v1/reevaluation?fresh=1): 2 sites") == 1, out
    # the closing summary: what ran where (adding up), the offload with its chain, the carbon
    [(done, offloaded)] = re.findall(
        r"^summary: \d+ rounds, (\d+) tasks done, (\d+) offloaded", out, re.M
    )
    ran = re.findall(r"^summary: (demo-\S+) +ran on (.*)$", out, re.M)
    assert {agent for agent, _ in ran} == {"demo-rk3588", "demo-jetson_orin_nano"}, out
    counts = [int(n) for _, where in ran for n in re.findall(r" (\d+)(?:,|$)", where)]
    assert sum(counts) == int(done), out
    # the NPU-only task must go; the bid gate may also send work a peer runs faster: each
    # offload the count says is listed with where it ran and its chain
    listed = re.findall(r"^summary: offloaded .+ from demo-\S+: ran on demo-\S+; chain ", out, re.M)
    assert int(offloaded) == len(listed) >= 1, out
    offload = r"^summary: offloaded npu-int8 \(NPU only\) from demo-jetson_orin_nano: ran on "
    assert re.search(offload + "demo-rk3588:", out, re.M), out
    assert len(re.findall(r"^summary: carbon: [0-9a-f]{8}  nightly-batch", out, re.M)) == 2, out
    rounds = re.findall(r"^round \d+: done demo-rk3588 \d+, demo-jetson_orin_nano \d+", out, re.M)
    placed = PLACED.findall(out)
    if not verbose:  # one line per round, no line per task
        assert rounds and not placed, out
        return
    assert not rounds
    assert {agent for _, agent, _ in placed} == {"demo-rk3588", "demo-jetson_orin_nano"}, out
    conn = sqlite3.connect(tmp_path / "hub" / "hub.db")
    try:
        rows = conn.execute("SELECT agent_id, kind, payload FROM records").fetchall()
    finally:
        conn.close()
    on_hub = {
        (agent, doc["id"][:8], doc.get("device"))
        for agent, kind, payload in rows
        if kind == "task" and (doc := json.loads(payload))["state"] == "done"
    }
    assert {(agent, task, device) for task, agent, device in placed} <= on_hub
    assert sum(kind == "decision" for _, kind, _ in rows) >= len(placed)
    hub_id = json.loads((tmp_path / "hub" / "secrets.json").read_text())["hub_id"]
    for name in ("demo-rk3588", "demo-jetson_orin_nano"):
        cred = json.loads((tmp_path / name / "hub_credential.json").read_text())
        # found over mDNS: the credential is for "mdns" and the hub that proved the token
        assert (cred["url"] == "mdns") is discover
        assert cred["hub_id"] == (hub_id if discover else None)


ROUND = re.compile(r"^round \d+: done demo-rk3588 [1-9]")


@pytest.mark.slow
@pytest.mark.parametrize(
    "signals",
    [(signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)],
    ids=["sigterm", "ctrl-c-twice"],
)
def test_a_signal_stops_the_demo_and_every_child_with_a_summary(
    tmp_path: Path, signals: tuple[signal.Signals, ...]
) -> None:
    root = str(Path(cloud_hub.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root}
    cmd = [sys.executable, "-m", "cloud_hub.demo", "--agents", "1", "--every", "1"]
    cmd += ["--data-dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(90, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if ROUND.match(line):  # running: a round of placements came back
                break
        for sig in signals:  # a second Ctrl-C lands while the first is being handled
            proc.send_signal(sig)
            time.sleep(0.05)
        rest = proc.stdout.read()
        err = proc.stderr.read()
        assert proc.wait(timeout=30) == 0, err
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    out = "".join(lines) + rest
    pids = [int(pid) for _, pid in PID.findall(out)]
    assert len(pids) == 2 and all(gone(pid) for pid in pids), out
    assert "stopping" in rest and "stopped: hub (0), demo-rk3588 (0)" in rest
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert re.search(r"^summary: \d+ rounds, [1-9]\d* tasks done", rest, re.M), rest
    assert re.search(r"^summary: demo-rk3588 +ran on rk3588/", rest, re.M), rest
