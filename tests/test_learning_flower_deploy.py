"""Real Flower on loopback: a SuperLink, two SuperNodes on agent SQLite telemetry, ONNX shipped."""

from __future__ import annotations

import warnings
from pathlib import Path

import psutil
import pytest

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from cloud_hub.learning.localfed import local_federation
from cloud_hub.learning.registry import ModelRegistry
from edge_agent.predictor.features import FeatureSpec, device_series, split_point
from edge_agent.predictor.runtime import Forecaster, OrtPredictor
from edge_agent.predictor.supernode import stop_all, stopped_cleanly

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


def _gone(pids: list[int]) -> bool:
    """Whether every pid has exited (a zombie awaiting its reaper counts as exited)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def _train_and_check(tmp_path: Path, secure: bool) -> None:
    """Start the fleet, run FedAvg rounds, stop everything; check what the hub registered."""
    fed = local_federation(tmp_path, 2, secure, poll_s=POLL)
    link, dbs = fed.link, fed.dbs
    registry = tmp_path / "registry"
    pids: list[int] = []
    try:
        fed.start()
        run_id = link.run({**RUN_CONFIG, "registry-dir": str(registry)}, timeout_s=120.0)
        run_log = link.run_log(run_id).read_text()
    finally:
        pids = [pid for p in fed.processes for pid in p.pids()]
        codes = stop_all(fed.processes)
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
        [(series, t0)] = device_series(str(db), SPEC.bucket_s)
        cut = split_point(series.shape[0], 0.3)
        forecaster = Forecaster(SPEC)
        verdict = forecaster.offer(data, series[cut:], t0 + SPEC.bucket_s * cut)
        assert verdict.accepted, verdict.reason
        assert forecaster.version == entry.sha256


@pytest.mark.slow
def test_superlink_and_two_supernodes_train_and_ship_onnx(tmp_path: Path) -> None:
    _train_and_check(tmp_path, secure=True)
