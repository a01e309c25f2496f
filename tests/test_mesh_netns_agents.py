"""Real `edge-agent run` daemons on hosts in network namespaces (root; skipped otherwise).

Three hosts each run an agent process (origin: rpi5, npu: rk3588 — the only NPU, third:
intel_n100), a fourth runs a node that shows the fleet's fingerprint without its key.
Discovery is real multicast across a bridge; requests reach each agent's HTTP API from
inside its namespace. The link cut uses a task big enough (``CUT_TASK``) that the NPU's
emulated run outlasts its lease, so the cut falls inside the offload.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from edge_agent.mesh.netns_fleet import Fleet, ledger_rows, wait_for
from edge_agent.mesh.netns_processes import AgentProcess

pytestmark = pytest.mark.slow
KEY_TEXT = "netns-agents-fleet-key-000000000"
Agents = Fleet[AgentProcess]
HOSTS = (("origin", "rpi5"), ("npu", "rk3588"), ("third", "intel_n100"))
MESH: dict[str, object] = {"heartbeat_s": 0.5, "lease_min_s": 2.0}
NPU_TASK = {
    "semantics": {"gflops": 2.0, "precision": "int8"},
    "requirements": {"kinds": ["npu"], "precision": "int8", "model_format": None},
}
# any kind may run it; emulated (roofline) it takes ~2 s on the rk3588 NPU (so the NPU wins
# its bids), ~7 s on the N100's CPU and ~12 s on the rpi5's. A forwarded task's lease is
# 4 x its estimate (the daemon's mesh default), so the origin gives an attempt up ~9 s on.
CUT_TASK = {
    "semantics": {"gflops": 1800.0, "precision": "int8"},
    "requirements": {"kinds": [], "precision": "int8", "model_format": None},
}


@pytest.fixture(scope="module")
def fleet(netns_fleet: Callable[..., Agents]) -> Agents:
    return netns_fleet(AgentProcess, HOSTS, KEY_TEXT, MESH)


def online(agent: AgentProcess) -> set[str]:
    doc = agent.call("GET", "/v1/peers")
    return {p["agent_id"] for p in doc["peers"] if p["state"] == "online" and p["trusted"]}


def test_agent_daemons_discover_each_other_by_multicast(fleet: Agents) -> None:
    for name, agent in fleet.members.items():
        others = set(fleet.members) - {name}
        wait_for(f"{name} to trust {others}", lambda a=agent, o=others: online(a) == o)  # type: ignore[misc]
    doc = fleet.members["origin"].call("GET", "/v1/peers")
    npu = next(p for p in doc["peers"] if p["agent_id"] == "npu")
    assert npu["address"] == f"{fleet.lan.address(1)}:8470" and "npu:1" in npu["kinds"]


def test_an_npu_task_sent_to_the_origin_runs_once_on_the_npu_host(fleet: Agents) -> None:
    origin, npu = fleet.members["origin"], fleet.members["npu"]
    wait_for("origin to trust npu", lambda: "npu" in online(origin))
    task_id = origin.call("POST", "/v1/tasks", NPU_TASK)["task"]["id"]

    def final() -> dict[str, Any] | None:
        task: dict[str, Any] = origin.call("GET", f"/v1/tasks/{task_id}")["task"]
        return task if task["state"] in ("done", "failed") else None

    task = wait_for("the task to finish", final)
    assert task["state"] == "done" and task["ran_on"] == "npu"
    assert [link["node"] for link in task["chain"]] == ["origin", "npu"]
    bids = {b["peer"]: b["placed"] for b in task["chain"][0]["bids"]}
    assert bids == {"npu": True, "third": False}  # the spoofer is never asked
    ran = [t for t in npu.call("GET", "/v1/tasks")["tasks"] if t["origin"] == "origin"]
    assert [(t["state"], t["device"]) for t in ran] == [("done", "rk3588/npu")]
    third = fleet.members["third"].call("GET", "/v1/tasks")["tasks"]
    assert third == []


def test_a_spoofing_host_gets_no_work_and_shows_on_metrics(fleet: Agents) -> None:
    for name, agent in fleet.members.items():

        def counted(a: AgentProcess = agent) -> bool:
            text = a.call("GET", "/metrics")
            return 'hetmesh_mesh_events_total{event="spoof_wrong_key"}' in text

        wait_for(f"{name} to count the spoofer", counted)
        assert "npu-spoof" not in {p["agent_id"] for p in agent.call("GET", "/v1/peers")["peers"]}
    with contextlib.closing(sqlite3.connect(fleet.spoof_ledger)) as db:
        assert db.execute("SELECT count(*) FROM mesh_ledger").fetchone() == (0,)


def final(agent: AgentProcess, task_id: str) -> dict[str, Any] | None:
    task: dict[str, Any] = agent.call("GET", f"/v1/tasks/{task_id}")["task"]
    return task if task["state"] in ("done", "failed", "cancelled") else None


def runs_of(agent: AgentProcess, task_id: str) -> list[tuple[str, str]]:
    """Return (idempotency key, state) of the runs ``agent`` made of ``task_id`` for origin."""
    rows = [t for t in agent.call("GET", "/v1/tasks")["tasks"] if t["origin"] == "origin"]
    return [
        (t["idempotency_key"], t["state"])
        for t in rows
        if f":{task_id}:" in str(t.get("idempotency_key"))
    ]


def test_a_link_cut_during_an_offload_places_the_task_again_and_runs_it_once(
    fleet: Agents,
) -> None:
    origin, npu, third = (fleet.members[a] for a in ("origin", "npu", "third"))
    wait_for("origin to trust npu and third", lambda: online(origin) >= {"npu", "third"})
    task_id = origin.call("POST", "/v1/tasks", CUT_TASK)["task"]["id"]
    origin_ledger, npu_ledger = origin.data_dir / "mesh.db", npu.data_dir / "mesh.db"
    try:
        wait_for("the NPU host to start it", lambda: ledger_rows(npu_ledger, task_id), 10)
        fleet.lan.link(fleet.host("npu"), up=False)  # mid-run: the NPU's answer never comes
        task = wait_for("the task to finish", lambda: final(origin, task_id), 60)
        # placed again after the cut, and done once, elsewhere
        assert task["state"] == "done", task
        ran_on = task["ran_on"] or "origin"  # None: it ran on the origin's own CPU
        assert ran_on in ("origin", "third")
        assert [link["node"] for link in task["chain"]][:2] == ["origin", "npu"]
        assert ledger_rows(origin_ledger, task_id) == [
            ("origin", 1, "npu", "lost"),
            ("origin", 2, ran_on, "done"),
        ]
        assert [state for _, state in runs_of(third, task_id)] == (
            ["done"] if ran_on == "third" else []
        )
    finally:
        fleet.lan.link(fleet.host("npu"), up=True)
    # the NPU host finished attempt 1 while cut off (within its lease); once the link heals
    # the origin asks it and records that run as a duplicate, never as a second outcome
    wait_for(
        "the origin to reconcile attempt 1",
        lambda: ledger_rows(origin_ledger, task_id)[0][3] != "lost",
        30,
    )
    assert ledger_rows(origin_ledger, task_id) == [
        ("origin", 1, "npu", "duplicate"),
        ("origin", 2, ran_on, "done"),
    ]
    assert ledger_rows(npu_ledger, task_id) == [("peer", 1, "origin", "done")]
    assert [key.rsplit(":", 1)[1] for key, _ in runs_of(npu, task_id)] == ["1"]  # one run there
    assert 'hetmesh_mesh_events_total{event="duplicate_runs"} 1.0' in origin.call("GET", "/metrics")
    again = origin.call("GET", f"/v1/tasks/{task_id}")["task"]  # nothing lost or overwritten
    assert (again["state"], again["ran_on"], again["result"]) == (
        "done",
        task["ran_on"],
        task["result"],
    )
