"""Real Flower on loopback: a SuperLink, two SuperNodes on agent SQLite telemetry, ONNX shipped."""

from __future__ import annotations

import math
import random
import socket
import warnings
from pathlib import Path

import psutil
import pytest
import sqlite_utils

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from cloud_hub.learning.pki import make_node_key, make_tls
from cloud_hub.learning.registry import ModelRegistry
from cloud_hub.learning.superlink import SuperLink, SuperLinkConfig
from edge_agent.agent.db import migrate
from edge_agent.agent.schema import MIGRATIONS
from edge_agent.predictor.features import FeatureSpec, series_from_telemetry, split_point
from edge_agent.predictor.runtime import Forecaster, OrtPredictor
from edge_agent.predictor.supernode import (
    FlowerProcess,
    SuperNodeConfig,
    stop_all,
    stopped_cleanly,
    supernode_process,
)

POLL = 0.25  # Flower's SuperExec polls for work every second by default
SPEC = FeatureSpec(window=16, bucket_s=60.0)
RUN_CONFIG: dict[str, str | int | float | bool] = {
    "num-rounds": 2,
    "evaluate-every": 2,  # one federated evaluation, in the last round
    "min-nodes": 2,
    "round-timeout-s": 60.0,
    "start-timeout-s": 30.0,
    "window": SPEC.window,
    "bucket-s": SPEC.bucket_s,
}


def _free_port() -> int:
    """An ephemeral loopback port that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _telemetry_db(path: Path, seed: int, minutes: int = 1500) -> Path:
    """An agent database (real schema) with one task per minute, busy in an 8-minute cycle."""
    db = sqlite_utils.Database(path)
    migrate(db, MIGRATIONS)
    rng = random.Random(seed)
    t0 = 1_700_000_000.0
    rows = []
    for i in range(minutes):
        busy = 0.5 + 0.4 * math.sin(2 * math.pi * i / 8 + seed) + rng.gauss(0.0, 0.03)
        busy = min(max(busy, 0.02), 0.98)
        rows.append(
            {"ts": t0 + 60 * i + 60 * busy, "kind": "task", "device": "cpu0",
             "task_id": f"t{i}", "latency_s": 60 * busy}
        )  # fmt: skip
    db.table("telemetry").insert_all(rows)
    db.close()
    return path


def _gone(pids: list[int]) -> bool:
    """Whether every pid has exited (a zombie awaiting its reaper counts as exited)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def _fleet(tmp: Path, secure: bool) -> tuple[SuperLink, list[FlowerProcess], list[Path]]:
    """A SuperLink and two SuperNodes (not started), each box with its own telemetry file."""
    tls = make_tls(tmp / "pki", ["127.0.0.1"]) if secure else None
    link = SuperLink(
        SuperLinkConfig(
            tmp / "hub", port=_free_port(), tls=tls, supernode_auth=secure, superexec_poll_s=POLL
        )
    )
    nodes, dbs = [], []
    for i in range(2):
        db = _telemetry_db(tmp / f"box{i}.db", seed=i)
        key = make_node_key(tmp / "pki", f"box{i}") if secure else None
        cfg = SuperNodeConfig(
            superlink=link.cfg.address,
            node_config={"telemetry-db": str(db)},
            root_certificates=None if tls is None else tls.ca_cert,
            auth_private_key=None if key is None else key.private,
            runtime_port=_free_port(),
            superexec_poll_s=POLL,
            flwr_home=tmp / f"box{i}-flwr",
        )
        nodes.append(supernode_process(cfg, f"box{i}", tmp / f"box{i}.log"))
        dbs.append(db)
    return link, nodes, dbs


def _train_and_check(tmp_path: Path, secure: bool) -> None:
    """Start the fleet, run FedAvg rounds, stop everything; check what the hub registered."""
    link, nodes, dbs = _fleet(tmp_path, secure)
    registry = tmp_path / "registry"
    pids: list[int] = []
    try:
        link.start()
        if secure:
            link.register_supernodes(
                [tmp_path / "pki" / f"box{i}_key.pub" for i in range(len(nodes))]
            )
        for node in nodes:
            node.start()
        run_id = link.run({**RUN_CONFIG, "registry-dir": str(registry)}, timeout_s=120.0)
        run_log = link.run_log(run_id).read_text()
    finally:
        pids = [pid for p in [*nodes, link.process] for pid in p.pids()]
        codes = stop_all([*nodes, link.process])
    assert len(codes) == 3 and all(map(stopped_cleanly, codes)), codes  # SIGTERM, no SIGKILL
    assert pids and _gone(pids)  # and so did the SuperExec and app processes they started
    assert any((tmp_path / "box0-flwr").rglob("pyproject.toml"))  # the FAB, in the box's home
    assert "[ROUND 2/2]" in run_log and "Received 2 results and 0 failures" in run_log

    entry = ModelRegistry(registry).latest()
    assert entry is not None and entry.version == 1
    assert entry.metrics["rounds_completed"] == RUN_CONFIG["num-rounds"]
    assert entry.metrics["eval_rel_mae"] < entry.metrics["ewma_rel_mae"]
    data = ModelRegistry(registry).read(entry)
    assert OrtPredictor(data).spec == SPEC
    for db in dbs:  # each agent validates on its own most recent telemetry
        t0, series = series_from_telemetry(str(db), SPEC.bucket_s)
        cut = split_point(series.shape[0], 0.3)
        forecaster = Forecaster(SPEC)
        verdict = forecaster.offer(data, series[cut:], t0 + SPEC.bucket_s * cut)
        assert verdict.accepted, verdict.reason
        assert forecaster.version == entry.sha256


@pytest.mark.slow
def test_superlink_and_two_supernodes_train_and_ship_onnx(tmp_path: Path) -> None:
    _train_and_check(tmp_path, secure=True)
