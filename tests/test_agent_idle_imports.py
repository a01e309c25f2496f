"""An idle agent does not carry ONNX: onnxruntime, onnx, protobuf and ml_dtypes load on first need.

The agent runs in a child process (the test process's own imports do not count): a real
daemon (HTTP, SQLite, mDNS mesh on loopback) runs one model-less task, answers its health,
metrics and peers documents, and idles until its telemetry sampler and mesh heartbeat loop
have run at least twice and its load forecaster (once per 60 s bucket) at least once; the
child then reports its ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Top-level packages only a model (an ONNX task, an upload, a predictor model) needs.
ONNX_STACK = ("onnxruntime", "onnx", "ml_dtypes", "google.protobuf")

PROBE = r"""
import asyncio, json, sys, time, urllib.request
from pathlib import Path

from edge_agent.agent import daemon
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.sensing.forecast import DeviceForecasts
from edge_agent.agent.sensing.telemetry import Sampler
from edge_agent.mesh import node

runs = {"sample": 0, "forecast": 0, "heartbeat": 0}

def counted(cls, name, key):
    inner = getattr(cls, name)
    async def wrapper(self, *args, **kwargs):
        runs[key] += 1
        return await inner(self, *args, **kwargs)
    setattr(cls, name, wrapper)

counted(Sampler, "sample_once", "sample")
counted(DeviceForecasts, "tick", "forecast")
real_sleep = asyncio.sleep

class HeartbeatClock:  # the mesh heartbeat loop's sleeps, counted
    def __getattr__(self, name):
        return getattr(asyncio, name)
    async def sleep(self, delay, result=None):
        runs["heartbeat"] += 1
        return await real_sleep(delay, result)

node.asyncio = HeartbeatClock()

data = Path(sys.argv[1])
config = AgentConfig(
    data_dir=data, host="127.0.0.1", port=0, profile="rk3588", emulation_jitter=0.0,
    shutdown_grace_s=0.0, telemetry_interval_s=0.05,
    mesh_fleet_key="idle-imports-test-fleet-key-00000", mesh_heartbeat_s=0.05,
)

def call(port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read()

async def main():
    stop = asyncio.Event()
    served = asyncio.create_task(daemon.serve(config, stop))
    while not config.state_path.exists():
        assert not served.done(), served.result()
        await real_sleep(0.02)
    port = json.loads(config.state_path.read_text())["port"]
    task = {"semantics": {"gflops": 0.001}, "task_class": "idle"}
    doc = json.loads(await asyncio.to_thread(call, port, "/v1/tasks", json.dumps(task).encode()))
    path = "/v1/tasks/" + doc["task"]["id"]
    deadline = time.monotonic() + 20
    while json.loads(await asyncio.to_thread(call, port, path))["task"]["state"] != "done":
        assert time.monotonic() < deadline, "the task did not finish"
        await real_sleep(0.05)
    for path in ("/v1/health", "/metrics", "/v1/peers", "/v1/devices", "/v1/status"):
        await asyncio.to_thread(call, port, path)
    while runs["sample"] < 2 or runs["heartbeat"] < 2 or runs["forecast"] < 1:
        assert time.monotonic() < deadline, f"the loops did not run: {runs}"
        await real_sleep(0.05)
    stop.set()
    await served

asyncio.run(main())
print(json.dumps({"modules": sorted(sys.modules), "runs": runs}))
"""


def _idle_agent(data_dir: Path) -> dict[str, object]:
    """Run the probe in a fresh interpreter; return its modules and loop counts."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(data_dir)],
        cwd=data_dir.parent,  # the installed package, not the source tree
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_an_idle_agent_has_not_imported_onnxruntime_onnx_protobuf_or_ml_dtypes(
    tmp_path: Path,
) -> None:
    report = _idle_agent(tmp_path / "agent")
    runs = report["runs"]
    assert isinstance(runs, dict), runs
    assert runs["sample"] >= 2 and runs["heartbeat"] >= 2 and runs["forecast"] >= 1, runs
    modules = report["modules"]
    assert isinstance(modules, list) and "edge_agent.agent.daemon" in modules
    loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in ONNX_STACK)]
    assert loaded == [], f"an idle agent imported {loaded[:10]} (import them on first use)"


def test_the_probe_sees_onnx_once_a_model_is_validated(tmp_path: Path) -> None:
    """The check above can fail: validating a predictor model does load the ONNX stack."""
    code = (
        "import sys, json\n"
        "from edge_agent.predictor.features import FeatureSpec\n"
        "from edge_agent.predictor.model import LoadModel\n"
        "from edge_agent.predictor.onnx_export import spec_metadata, to_onnx\n"
        "from edge_agent.predictor.runtime import OrtPredictor\n"
        "spec = FeatureSpec()\n"
        "data = to_onnx(LoadModel(spec.n_features, 4), metadata=spec_metadata(spec))\n"
        "before = [m for m in ('onnx', 'onnxruntime') if m in sys.modules]\n"
        "OrtPredictor(data)\n"
        "print(json.dumps([before, [m for m in ('onnx', 'onnxruntime') if m in sys.modules]]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == ["onnx"]  # exporting needs onnx, not onnxruntime
    assert after == ["onnx", "onnxruntime"]
