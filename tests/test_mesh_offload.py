"""Offload on loopback: bids, forwarding with an idempotency key, recovery, exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from edge_agent.mesh import FleetKey, MeshConfig, MeshNode
from edge_agent.mesh.standalone import emulated_node, emulated_run, serve
from edge_agent.placement import Decision, Requirements, Semantics, TaskContract

pytestmark = pytest.mark.asyncio
KEY_TEXT = "offload-test-fleet-key-000000000"
KEY = FleetKey(KEY_TEXT)
ROOT = Path(__file__).resolve().parents[1]


def npu_int8(gflops: float = 2.0) -> TaskContract:
    return TaskContract(
        Semantics(gflops=gflops, precision="int8"),
        Requirements(kinds=("npu",), precision="int8", model_format=None),
    )


def node(tmp: Path, agent: str, profile: str, **cfg: Any) -> MeshNode:
    scale = cfg.pop("time_scale", 0.0)
    config = MeshConfig(agent_id=agent, heartbeat_s=0.3, announce_burst=100, **cfg)
    return emulated_node(config, KEY, [profile], tmp / f"{agent}.db", time_scale=scale)


def done_rows(path: Path, key: str) -> list[tuple[str, int, str]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(
            "SELECT role, attempt, state FROM mesh_ledger WHERE key = ? ORDER BY attempt", (key,)
        ).fetchall()
    return [(str(r), int(a), str(s)) for r, a, s in rows]


async def test_npu_task_goes_to_the_npu_peer_with_the_decision_chain(tmp_path: Path) -> None:
    calls: list[str] = []

    async def counted(c: TaskContract, d: Decision, p: dict[str, Any]) -> dict[str, Any]:
        calls.append(p["frame"])
        return await emulated_run(c, d, p, time_scale=0.0)

    origin = node(tmp_path, "origin", "rpi5")
    config = MeshConfig(agent_id="npu", heartbeat_s=0.3, announce_burst=100)
    peer = emulated_node(config, KEY, ["rk3588"], tmp_path / "npu.db", run_task=counted)
    async with serve(origin), serve(peer):
        await origin.wait_for(lambda: origin.trusts("npu"), 10)
        out = await origin.submit(npu_int8(), {"frame": "f1"}, key="task-1")
        assert out["state"] == "done" and out["ran_on"] == "npu"
        assert out["result"]["devices"] == ["rk3588/npu"]
        first, second = out["chain"]
        assert first["node"] == "origin" and first["action"] == "forward to npu"
        assert "not placed" in first["summary"] and first["bids"][0]["placed"] is True
        assert second["node"] == "npu" and second["devices"] == ["rk3588/npu"]
        assert [(r["role"], r["state"]) for r in await origin.ledger.attempts("task-1")] == [
            ("origin", "done")
        ]
        assert [(r["role"], r["state"]) for r in await peer.ledger.attempts("task-1")] == [
            ("peer", "done")
        ]
        # the same attempt forwarded again (a lost answer, a retry) is answered, not rerun
        doc = {
            "key": "task-1",
            "attempt": 1,
            "contract": npu_int8().to_dict(),
            "payload": {"frame": "f1"},
            "lease_s": 5.0,
        }
        again = await origin.client.call("npu", peer.peers.own_endpoint, "tasks", doc, 5.0)
        assert again.doc["state"] == "done" and again.doc["duplicate"] is True
        assert calls == ["f1"]
        # a cancel that overtakes its forward fences the attempt: the late forward is refused
        fence = {"key": "task-2", "attempt": 1}
        got = await origin.client.call("npu", peer.peers.own_endpoint, "tasks/cancel", fence, 5)
        assert got.doc["state"] == "fenced"
        late = await origin.client.call(
            "npu", peer.peers.own_endpoint, "tasks", {**doc, "key": "task-2"}, 5.0
        )
        assert late.doc["state"] == "fenced" and calls == ["f1"]
        # nothing feasible anywhere: failed, with the reason, not lost
        gpu_only = TaskContract(Semantics(gflops=1), Requirements(kinds=("gpu",)))
        none = await origin.submit(gpu_only, key="task-3")
        assert none["state"] == "failed" and "not placed" in none["chain"][-1]["summary"]


async def test_a_peer_past_its_lease_gives_up_and_the_task_is_placed_again(
    tmp_path: Path,
) -> None:
    # the peer abandons the attempt at its 0.3 s lease and says "expired"; the origin waits
    # lease + grace for that word (2 s of grace: a loaded box can take over 0.2 s to send it,
    # and the origin would then cancel first: seen in CI)
    cfg = {"lease_min_s": 0.3, "lease_factor": 0.0, "lease_grace_s": 2.0}
    origin = node(tmp_path, "origin", "rpi5", **cfg)
    slow = node(tmp_path, "slow", "hailo8_host", time_scale=1e4)  # the better bid, stalls
    other = node(tmp_path, "other", "rk3588")
    async with serve(origin), serve(slow), serve(other):
        await origin.wait_for(lambda: origin.trusts("slow") and origin.trusts("other"), 10)
        out = await origin.submit(npu_int8(gflops=50), key="lease-1")
        assert out["state"] == "done" and out["ran_on"] == "other"
        assert [link["node"] for link in out["chain"]] == ["origin", "slow", "origin", "other"]
        attempts = await origin.ledger.attempts("lease-1")
        assert [(a["target"], a["state"]) for a in attempts] == [
            ("slow", "expired"),
            ("other", "done"),
        ]
        assert [r["state"] for r in await slow.ledger.attempts("lease-1")] == ["expired"]
        assert [r["state"] for r in await other.ledger.attempts("lease-1")] == ["done"]


async def _spawn_peer(tmp: Path, agent: str, scale: float) -> tuple[subprocess.Popen[bytes], Path]:
    key_file = tmp / "fleet.key"
    key_file.write_text(KEY_TEXT, encoding="utf-8")
    state = tmp / f"{agent}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_agent.mesh",
            "--profile",
            "hailo8_host",
            "--fleet-key-file",
            str(key_file),
            "--ledger",
            str(tmp / f"{agent}.db"),
            "--state-file",
            str(state),
            "--agent-id",
            agent,
            "--time-scale",
            str(scale),
            "--heartbeat-s",
            "0.3",
        ],
        env=env,
    )
    async with asyncio.timeout(30):
        while not state.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"peer process exited with {proc.returncode}")
            await asyncio.sleep(0.05)
    return proc, tmp / f"{agent}.db"


async def test_a_peer_killed_mid_task_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path,
) -> None:
    origin = node(tmp_path, "origin", "rpi5")
    proc, victim_db = await _spawn_peer(tmp_path, "victim", 1e4)  # emulated run of minutes
    other = node(tmp_path, "other", "rk3588")
    try:
        async with serve(origin):
            await origin.wait_for(lambda: origin.trusts("victim"), 20)
            job = asyncio.create_task(origin.submit(npu_int8(), key="kill-1"))
            async with asyncio.timeout(10):  # the victim has begun the attempt
                while not await asyncio.to_thread(done_rows, victim_db, "kill-1"):
                    await asyncio.sleep(0.02)
            async with serve(other):
                await origin.wait_for(lambda: origin.trusts("other"), 10)
                proc.send_signal(signal.SIGKILL)
                out = await asyncio.wait_for(job, 20)
                assert out["state"] == "done" and out["ran_on"] == "other"
                origin_rows = await origin.ledger.attempts("kill-1")
                assert [(r["target"], r["state"]) for r in origin_rows] == [
                    ("victim", "lost"),
                    ("other", "done"),
                ]
                assert [r["state"] for r in await other.ledger.attempts("kill-1")] == ["done"]
                assert done_rows(victim_db, "kill-1") == [("peer", 1, "running")]
                assert origin.peers.peers["victim"].state != "online"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)


async def test_unsigned_replayed_or_tampered_requests_get_401_and_are_counted(
    tmp_path: Path,
) -> None:
    import aiohttp

    from edge_agent.mesh.credential import sign_request

    peer = node(tmp_path, "npu", "rk3588")
    async with serve(peer) as port, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{port}/mesh/v1/heartbeat"
        body = b"{}"
        headers = sign_request(KEY, "someone", "POST", "/mesh/v1/heartbeat", body, to="npu")
        statuses = []
        for data, hdrs in [(body, {}), (body, headers), (body, headers), (b'{"x":1}', headers)]:
            async with http.post(url, data=data, headers=hdrs) as resp:
                statuses.append(resp.status)
                doc = await resp.json()
        assert statuses == [401, 200, 401, 401]
        assert doc["ok"] is False and doc["status"] == 401
        assert peer.counters["auth_rejected_unsigned"] == 1
        assert peer.counters["auth_rejected_replay"] == 1
        assert peer.counters["auth_rejected_bad_signature"] == 1
