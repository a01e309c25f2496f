"""Real `edge-agent run` daemons on hosts in network namespaces (root; skipped otherwise).

Three hosts each run an agent process (origin: rpi5, npu: rk3588 — the only NPU, third:
intel_n100), a fourth runs a node that shows the fleet's fingerprint without its key.
Discovery is real multicast across a bridge; requests reach each agent's HTTP API from
inside its namespace. The link cut during an offload is covered by the node processes of
tests/test_mesh_netns.py (an agent's emulated run is too short to cut a link under it).
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.mesh import FleetKey
from edge_agent.mesh.netns import AgentProcess, Lan, NetnsUnavailable, start_spoofer

pytestmark = pytest.mark.slow
KEY_TEXT = "netns-agents-fleet-key-000000000"
KEY = FleetKey(KEY_TEXT)
HOSTS = (("origin", "rpi5"), ("npu", "rk3588"), ("third", "intel_n100"))
MESH: dict[str, object] = {"heartbeat_s": 0.5, "lease_min_s": 2.0}
NPU_TASK = {
    "semantics": {"gflops": 2.0, "precision": "int8"},
    "requirements": {"kinds": ["npu"], "precision": "int8", "model_format": None},
}


def poll(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)


class Fleet:
    def __init__(self, lan: Lan, work: Path) -> None:
        self.lan, self.work = lan, work
        key_file = work / "fleet.key"
        key_file.write_text(KEY_TEXT, encoding="utf-8")
        self.agents = {
            name: AgentProcess(lan.ns(i), work, name, profile, lan.address(i), key_file, MESH)
            for i, (name, profile) in enumerate(HOSTS)
        }
        self.spoof_ledger = work / "spoof.db"
        n = len(HOSTS)
        self.spoofer = start_spoofer(lan.ns(n), lan.address(n), KEY.fingerprint, self.spoof_ledger)
        for agent in self.agents.values():
            agent.wait_ready()

    def close(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        if self.spoofer.poll() is None:
            self.spoofer.kill()
        self.spoofer.wait(5)


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    try:
        lan = Lan(hosts=len(HOSTS) + 1)
    except NetnsUnavailable as err:
        pytest.skip(f"network namespaces unavailable: {err}")
    work = Path(tempfile.mkdtemp(prefix="hmagents-"))
    fl: Fleet | None = None
    try:
        fl = Fleet(lan, work)
        yield fl
    finally:
        if fl is not None:
            fl.close()
        lan.close()
        shutil.rmtree(work, ignore_errors=True)


def online(agent: AgentProcess) -> set[str]:
    doc = agent.call("GET", "/v1/peers")
    return {p["agent_id"] for p in doc["peers"] if p["state"] == "online" and p["trusted"]}


def test_agent_daemons_discover_each_other_by_multicast(fleet: Fleet) -> None:
    for name, agent in fleet.agents.items():
        others = set(fleet.agents) - {name}
        poll(f"{name} to trust {others}", lambda a=agent, o=others: online(a) == o)  # type: ignore[misc]
    doc = fleet.agents["origin"].call("GET", "/v1/peers")
    npu = next(p for p in doc["peers"] if p["agent_id"] == "npu")
    assert npu["address"] == f"{fleet.lan.address(1)}:8470" and "npu:1" in npu["kinds"]


def test_an_npu_task_sent_to_the_origin_runs_once_on_the_npu_host(fleet: Fleet) -> None:
    origin, npu = fleet.agents["origin"], fleet.agents["npu"]
    poll("origin to trust npu", lambda: "npu" in online(origin))
    task_id = origin.call("POST", "/v1/tasks", NPU_TASK)["task"]["id"]

    def final() -> dict[str, Any] | None:
        task: dict[str, Any] = origin.call("GET", f"/v1/tasks/{task_id}")["task"]
        return task if task["state"] in ("done", "failed") else None

    task = poll("the task to finish", final)
    assert task["state"] == "done" and task["ran_on"] == "npu"
    assert [link["node"] for link in task["chain"]] == ["origin", "npu"]
    bids = {b["peer"]: b["placed"] for b in task["chain"][0]["bids"]}
    assert bids == {"npu": True, "third": False}  # the spoofer is never asked
    ran = [t for t in npu.call("GET", "/v1/tasks")["tasks"] if t["origin"] == "origin"]
    assert [(t["state"], t["device"]) for t in ran] == [("done", "rk3588/npu")]
    third = fleet.agents["third"].call("GET", "/v1/tasks")["tasks"]
    assert third == []


def test_a_spoofing_host_gets_no_work_and_shows_on_metrics(fleet: Fleet) -> None:
    for name, agent in fleet.agents.items():

        def counted(a: AgentProcess = agent) -> bool:
            text = a.call("GET", "/metrics")
            return 'hetmesh_mesh_events_total{event="spoof_wrong_key"}' in text

        poll(f"{name} to count the spoofer", counted)
        assert "npu-spoof" not in {p["agent_id"] for p in agent.call("GET", "/v1/peers")["peers"]}
    with contextlib.closing(sqlite3.connect(fleet.spoof_ledger)) as db:
        assert db.execute("SELECT count(*) FROM mesh_ledger").fetchone() == (0,)
