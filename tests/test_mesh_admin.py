"""The standalone node process: its local admin socket and its ``--set`` overrides."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from edge_agent.mesh.config import MeshConfig, parse_overrides
from edge_agent.mesh.netns_processes import NodeProcess
from edge_agent.placement import Requirements, Semantics, TaskContract


def test_overrides_are_typed_like_the_config_and_bad_ones_are_named() -> None:
    got = parse_overrides(["heartbeat_s=0.5", "max_attempts=4", "probe_name=false"])
    assert got == {"heartbeat_s": 0.5, "max_attempts": 4, "probe_name": False}
    assert MeshConfig(agent_id="a", **got).probe_name is False
    for bad, named in [
        ("heartbeat_s", "NAME=VALUE"),
        ("nope=1", "NAME=VALUE"),
        ("address=10.0.0.1", "NAME=VALUE"),
        ("max_attempts=lots", "not a int"),
        ("probe_name=yes", "not a bool"),
    ]:
        with pytest.raises(ValueError, match=named):
            parse_overrides([bad])


def test_a_node_process_takes_tasks_and_shows_its_ledger_over_its_admin_socket(
    tmp_path: Path,
) -> None:
    work = Path(tempfile.mkdtemp(prefix="hmadm-"))  # short: Unix socket paths are limited
    key = tmp_path / "fleet.key"
    key.write_text("admin-test-fleet-key-00000000000", encoding="utf-8")
    node = NodeProcess(None, work, "solo", "rk3588", "127.0.0.1", key, {"heartbeat_s": 5.0})
    try:
        node.wait_ready()
        assert stat.S_IMODE(os.stat(node.socket).st_mode) == 0o600
        status = node.status()
        assert status["agent_id"] == "solo" and status["counters"].get("trusted", 0) == 0
        req = Requirements(kinds=("npu",), precision="int8", model_format=None)
        contract = TaskContract(Semantics(gflops=2.0, precision="int8"), req).to_dict()
        out = node.call("POST", "/tasks", {"contract": contract, "key": "t1", "payload": {}})
        assert out["state"] == "done" and out["ran_on"] == "solo"
        assert out["result"]["devices"] == ["rk3588/npu"]
        rows = node.call("GET", "/ledger/t1")
        assert [(r["role"], r["attempt"], r["state"]) for r in rows] == [("origin", 1, "done")]
        with pytest.raises(RuntimeError, match=r"400.*contract"):
            node.call("POST", "/tasks", {"key": "t2"})
        assert node.call("GET", "/ledger/t2") == []  # nothing recorded for a refused task
    finally:
        node.stop()
        for path in work.iterdir():
            path.unlink()
        work.rmdir()
    assert node.proc.returncode == 0
