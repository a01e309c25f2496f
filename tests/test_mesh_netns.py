"""The mesh across hosts: node processes in network namespaces on a bridge, real multicast."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest

from edge_agent.mesh.netns_fleet import Fleet, ledger_rows, wait_for
from edge_agent.mesh.netns_processes import NodeProcess
from edge_agent.placement import Requirements, Semantics, TaskContract

pytestmark = pytest.mark.slow
KEY_TEXT = "netns-test-fleet-key-00000000000"
Nodes = Fleet[NodeProcess]
# origin (no NPU), the only NPU host, a third board without an NPU
HOSTS = (("origin", "rpi5"), ("npu", "rk3588"), ("third", "intel_n100"))
SETTINGS: dict[str, object] = {
    "heartbeat_s": 0.5,
    "lease_min_s": 2.0,
    "lease_factor": 0.0,
    "lease_grace_s": 0.5,
    "cancel_timeout_s": 0.5,
    "bid_timeout_s": 1.0,
}


def int8(kinds: tuple[str, ...], gflops: float = 2.0) -> dict[str, Any]:
    req = Requirements(kinds=kinds, precision="int8", model_format=None)
    return TaskContract(Semantics(gflops=gflops, precision="int8"), req).to_dict()


@pytest.fixture(scope="module")
def fleet(netns_fleet: Callable[..., Nodes]) -> Nodes:
    return netns_fleet(NodeProcess, HOSTS, KEY_TEXT, SETTINGS)


def test_members_discover_each_other_by_multicast_across_hosts(fleet: Nodes) -> None:
    members = set(fleet.members)
    for agent, node in fleet.members.items():
        others = members - {agent}
        wait_for(f"{agent} to trust the others", lambda: node.online() >= others, 20)  # noqa: B023
    for node in fleet.members.values():
        status = node.status()
        assert "npu-spoof" not in {p["agent_id"] for p in status["peers"] if p["state"] == "online"}
        rows = {p["agent_id"]: p for p in status["peers"]}
        other = next(a for a in members if a != node.agent_id)
        assert rows[other]["address"].startswith("10.99.0.")  # learned across the bridge


def test_an_npu_only_task_runs_on_the_only_npu_host(fleet: Nodes) -> None:
    origin = fleet.members["origin"]
    wait_for("origin to trust npu", lambda: "npu" in origin.online(), 20)
    out = origin.call("POST", "/tasks", {"contract": int8(("npu",)), "key": "npu-1"})
    assert out["state"] == "done" and out["ran_on"] == "npu"
    assert out["result"]["devices"] == ["rk3588/npu"]
    assert [link["node"] for link in out["chain"]] == ["origin", "npu"]
    assert {b["peer"] for b in out["chain"][0]["bids"]} >= {"npu", "third"}
    assert ledger_rows(origin.ledger, "npu-1") == [("origin", 1, "npu", "done")]
    assert ledger_rows(fleet.members["npu"].ledger, "npu-1") == [("peer", 1, "origin", "done")]
    assert ledger_rows(fleet.members["third"].ledger, "npu-1") == []


def test_a_spoofing_host_gets_no_work_and_is_counted(fleet: Nodes) -> None:
    def counted() -> bool:  # its announcement failed our challenge; its own hello was refused
        counters = [n.status()["counters"] for n in fleet.members.values()]
        return all(c.get("spoof_wrong_key", 0) >= 1 for c in counters) and all(
            any(k.startswith("auth_rejected_") for k in c) for c in counters
        )

    wait_for("every member to count the spoofer", counted, 20)
    origin = fleet.members["origin"]
    for i in range(3):  # it claims an NPU: it would win bids if it were trusted
        out = origin.call("POST", "/tasks", {"contract": int8(("npu",)), "key": f"spoof-{i}"})
        assert out["ran_on"] == "npu"
        assert "npu-spoof" not in {b["peer"] for b in out["chain"][0]["bids"]}
    for node in fleet.members.values():
        assert "npu-spoof" not in node.online()
    assert fleet.spoofer.poll() is None
    with contextlib.closing(sqlite3.connect(fleet.spoof_ledger)) as db:
        assert db.execute("SELECT COUNT(*) FROM mesh_ledger").fetchone() == (0,)


def test_a_link_cut_during_offload_places_the_task_again_and_runs_it_once(
    fleet: Nodes,
) -> None:
    origin, npu, third = (fleet.members[a] for a in ("origin", "npu", "third"))
    wait_for("origin to trust npu", lambda: "npu" in origin.online(), 20)
    outcome: dict[str, Any] = {}

    def submit() -> None:  # 30 s on the NPU (its lease, 2 s, ends it), instant elsewhere
        payload = {"emulate_s": {"rk3588/npu": 30}}
        # any kind may run it; big enough that the NPU's bid wins whatever the link's jitter
        body = {"contract": int8((), gflops=50), "payload": payload, "key": "cut-1"}
        try:
            outcome["out"] = origin.call("POST", "/tasks", body, timeout_s=30)
        except Exception as err:  # reported by the assertion below
            outcome["error"] = err

    job = threading.Thread(target=submit)
    job.start()
    try:
        wait_for(
            "the NPU host to start the task", lambda: bool(ledger_rows(npu.ledger, "cut-1")), 10
        )
        fleet.lan.link(fleet.host("npu"), up=False)
    finally:
        job.join(30)
    assert "error" not in outcome, outcome
    out = outcome["out"]
    assert out["state"] == "done" and out["ran_on"] in ("origin", "third")
    rows = ledger_rows(origin.ledger, "cut-1")
    assert rows == [("origin", 1, "npu", "lost"), ("origin", 2, out["ran_on"], "done")]
    wait_for(
        "the NPU host to abandon it", lambda: ledger_rows(npu.ledger, "cut-1")[0][3] != "running", 5
    )
    assert ledger_rows(npu.ledger, "cut-1") == [("peer", 1, "origin", "expired")]
    ran_third = ledger_rows(third.ledger, "cut-1")
    assert ran_third == ([("peer", 2, "origin", "done")] if out["ran_on"] == "third" else [])
    assert [link["node"] for link in out["chain"]][:2] == ["origin", "npu"]
