"""The agent's HTTP API through aiohttp's test client: real SQLite, real onnxruntime runs."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from aiohttp.test_utils import TestClient
from onnx import TensorProto, helper, numpy_helper

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.web.api import AGENT, make_app

pytestmark = pytest.mark.asyncio

Client = TestClient[Any, Any]


def tiny_model(path: Path) -> Path:
    """Write a 1x4 MatMul-Relu ONNX model to ``path``."""
    weights = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, path)
    return path


def config(tmp_path: Path, **changes: Any) -> AgentConfig:
    """Return a config in ``tmp_path`` with a model dir holding ``tiny.onnx``."""
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    tiny_model(models / "tiny.onnx")
    base = AgentConfig(
        data_dir=tmp_path / "data",
        model_dir=models,
        port=0,
        shutdown_grace_s=0.0,
        max_body_bytes=64 * 1024,
    )
    return base.replace(**changes)


async def start(aiohttp_client: Any, tmp_path: Path, **changes: Any) -> Client:
    client: Client = await aiohttp_client(make_app(config(tmp_path, **changes)))
    return client


async def wait_for(client: Client, task_id: str, states: set[str]) -> dict[str, Any]:
    """Poll the task until its state is one of ``states`` (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        doc = await (await client.get(f"/v1/tasks/{task_id}")).json()
        if doc["task"]["state"] in states or time.monotonic() > deadline:
            return dict(doc["task"])
        await asyncio.sleep(0.005)


async def submit(client: Client, body: Any, key: str | None = None) -> dict[str, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    resp = await client.post("/v1/tasks", json=body, headers=headers)
    assert resp.status == 202, await resp.text()
    return dict(await resp.json())


async def test_onnx_task_runs_in_onnxruntime_and_explains(aiohttp_client: Any, tmp_path: Path):
    client = await start(aiohttp_client, tmp_path)
    doc = await submit(client, {"model": "tiny", "requirements": {"max_latency_s": 5}})
    assert doc["created"] and doc["task"]["state"] == "queued"
    task = await wait_for(client, doc["task"]["id"], {"done", "failed"})
    assert task["state"] == "done", task
    assert task["emulated"] is False and task["device"]
    assert task["result"]["execution_provider"] == "CPUExecutionProvider"
    assert task["result"]["outputs"] == [[1, 4]]
    assert task["result"]["latency_s"] > 0
    explain = await (await client.get(f"/v1/tasks/{task['id']}/explain")).json()
    assert explain["placed"] and explain["devices"] == [task["device"]]
    assert task["device"] in explain["why_here"]
    assert explain["why_not"][task["device"]] == f"{task['device']} was chosen"
    one = await client.get(f"/v1/tasks/{task['id']}/explain", params={"device": "nope"})
    assert one.status == 404


async def test_emulated_board_batch_and_metrics(aiohttp_client: Any, tmp_path: Path):
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    body = {"tasks": [{"model": "tiny"}, {"semantics": {"gflops": 0.1}, "priority": 5}]}
    resp = await client.post("/v1/tasks:batch", json=body)
    assert resp.status == 202, await resp.text()
    ids = [t["id"] for t in (await resp.json())["tasks"]]
    for task_id in ids:
        task = await wait_for(client, task_id, {"done", "failed"})
        assert task["state"] == "done" and task["emulated"] is True
        assert task["device"].startswith("rk3588/")
    devices = (await (await client.get("/v1/devices")).json())["devices"]
    assert {d["id"] for d in devices} == {"rk3588/cpu", "rk3588/npu"}
    assert all(d["emulated"] for d in devices)
    health = await (await client.get("/v1/health")).json()
    assert health["status"] == "ok" and health["hub"] is None
    text = await (await client.get("/metrics")).text()
    for name in (
        "hetmesh_agent_placement_seconds_bucket",
        "hetmesh_agent_queue_depth",
        'hetmesh_agent_tasks{state="done"} 2.0',
        "hetmesh_agent_decisions_total",
        'emulated="true"',
        "hetmesh_agent_device_utilization",
    ):
        assert name in text, name
    spec = await (await client.get("/v1/openapi.json")).json()
    assert "/v1/tasks/{task_id}/explain" in spec["paths"]


async def test_idempotency_key_never_makes_a_second_task(aiohttp_client: Any, tmp_path: Path):
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    body = {"semantics": {"gflops": 1.0}}
    first = await submit(client, body, key="k-1")
    again = await asyncio.gather(*(submit(client, body, key="k-1") for _ in range(5)))
    assert {d["task"]["id"] for d in again} == {first["task"]["id"]}
    assert not any(d["created"] for d in again)
    listed = (await (await client.get("/v1/tasks")).json())["tasks"]
    assert len(listed) == 1
    conflict = await client.post(
        "/v1/tasks", json={"semantics": {"gflops": 2.0}}, headers={"Idempotency-Key": "k-1"}
    )
    assert conflict.status == 409
    assert "different request" in (await conflict.json())["error"]


async def test_cancel_placed_task_and_refuse_running(aiohttp_client: Any, tmp_path: Path):
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    slow = {"semantics": {"gflops": 1e6}, "requirements": {"kinds": ["cpu"]}}
    running = (await submit(client, slow))["task"]["id"]
    await wait_for(client, running, {"running"})
    queued = (await submit(client, slow))["task"]["id"]
    await wait_for(client, queued, {"placed"})
    resp = await client.post(f"/v1/tasks/{queued}:cancel")
    assert resp.status == 200 and (await resp.json())["task"]["state"] == "cancelled"
    resp = await client.post(f"/v1/tasks/{running}:cancel")
    assert resp.status == 409 and "running" in (await resp.json())["error"]
    resp = await client.post(f"/v1/tasks/{'0' * 32}:cancel")
    assert resp.status == 404


async def test_a_job_whose_cancel_is_committing_is_not_started(aiohttp_client: Any, tmp_path: Path):
    """Starts are recorded without the slot waiting for their commit, so a cancel holds its
    job back before its own commit: the device freeing meanwhile does not start it."""
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    agent = client.app[AGENT]
    body = {"semantics": {"gflops": 50.0}, "requirements": {"kinds": ["cpu"]}}  # ~1.3 s each
    first = (await submit(client, body))["task"]["id"]
    await wait_for(client, first, {"running"})
    second = (await submit(client, body))["task"]["id"]
    await wait_for(client, second, {"placed"})  # queued behind the first
    gate = threading.Event()
    stalled = agent.store.db.write(lambda db: gate.wait(10))  # nothing commits meanwhile
    cancel = asyncio.ensure_future(agent.cancel(second))
    async with asyncio.timeout(5):
        while agent.executor.running():  # the first run ends: its slot is free
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert agent.executor.running() == [] and not cancel.done()
    gate.set()
    await stalled
    found = await cancel
    assert found is not None and found[1] == "placed" and found[0]["state"] == "cancelled"
    assert (await wait_for(client, first, {"done"}))["state"] == "done"
    assert (await wait_for(client, second, {"cancelled"}))["state"] == "cancelled"


BAD = [
    ("malformed", b"{not json", "malformed JSON"),
    ("empty", b"", "empty"),
    ("array", b"[1, 2]", "expected a JSON object"),
    ("nan", b'{"semantics": {"gflops": NaN}}', "NaN"),
    ("unknown field", b'{"semantics": {"gflops": 1}, "colour": "red"}', "colour"),
    ("wrong type", b'{"semantics": {"gflops": "lots"}}', "semantics.gflops"),
    ("bad priority", b'{"semantics": {"gflops": 1}, "priority": 1.5}', "priority"),
    ("huge priority", b'{"semantics": {"gflops": 1}, "priority": 1' + b"0" * 30 + b"}", "priority"),
    (
        "huge config",
        b'{"semantics": {"gflops": 1}, "requirements": {"config_id": 1e40}}',
        "config_id",
    ),
    ("outside", b'{"model": "../../etc/passwd"}', "not inside the model directories"),
    ("absolute", b'{"model": "/etc/passwd"}', "not inside the model directories"),
    ("unknown model", b'{"model": "nope"}', "not found"),
    ("model type", b'{"model": 7}', "model"),
    ("command", b'{"command": ["/bin/sh", "-c", "true"]}', "command_allowlist"),
    ("precision", b'{"model": "tiny", "requirements": {"precision": "fp7"}}', "precision"),
]


@pytest.mark.parametrize(("label", "body", "needle"), BAD, ids=[b[0] for b in BAD])
async def test_bad_submissions_are_4xx_naming_the_problem(
    aiohttp_client: Any, tmp_path: Path, label: str, body: bytes, needle: str
) -> None:
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    resp = await client.post("/v1/tasks", data=body, headers={"Content-Type": "application/json"})
    doc = await resp.json()
    assert 400 <= resp.status < 500, doc
    assert doc["ok"] is False and doc["status"] == resp.status
    assert needle in doc["error"], doc["error"]


async def test_other_bad_requests(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    cases = [
        (client.post("/v1/tasks", data=b"x" * 70_000), 413, "too large"),
        (client.post("/v1/models", params={"name": "junk"}, data=b"not onnx"), 400, "ONNX"),
        (client.post("/v1/models", params={"name": "../x"}, data=b"x"), 400, "name"),
        (client.get("/v1/tasks", params={"state": "odd"}), 400, "state"),
        (client.get("/v1/tasks", params={"limit": "-1"}), 400, "limit"),
        (client.get("/v1/nothing"), 404, "no such endpoint"),
        (client.delete("/v1/tasks"), 405, "not allowed"),
        (client.post("/v1/tasks:batch", json={"tasks": []}), 400, "1..1000"),
        (
            client.post("/v1/tasks:batch", json={"tasks": [{"model": "tiny"}, {"x": 1}]}),
            400,
            "tasks[1]",
        ),
        (client.get(f"/v1/tasks/{'a' * 32}"), 404, "no task"),
    ]
    for call, status, needle in cases:
        resp = await call
        doc = await resp.json()
        assert resp.status == status, doc
        assert needle in doc["error"] and doc["ok"] is False
    assert (await (await client.get("/v1/tasks")).json())["tasks"] == []
    wrong = await client.request("TRACE", "/v1/tasks:batch")
    assert wrong.status == 405 and wrong.headers["Allow"] == "POST"  # RFC 9110


async def test_model_upload_then_submit_by_name(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await start(aiohttp_client, tmp_path)
    data = tiny_model(tmp_path / "mine.onnx").read_bytes()
    resp = await client.post("/v1/models", params={"name": "mine"}, data=data)
    assert resp.status == 201, await resp.text()
    doc = await submit(client, {"model": "mine"})
    task = await wait_for(client, doc["task"]["id"], {"done", "failed"})
    assert task["state"] == "done" and task["result"]["outputs"] == [[1, 4]]


async def test_task_ids_take_a_unique_prefix_like_git(aiohttp_client: Any, tmp_path: Path):
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    doc = await submit(client, {"semantics": {"gflops": 0.01}})
    whole = doc["task"]["id"]
    await wait_for(client, whole, {"done", "failed"})
    for given in (whole, whole[:8], whole[:4]):  # 8: what the demo prints
        task = await client.get(f"/v1/tasks/{given}")
        assert task.status == 200, await task.text()
        assert (await task.json())["task"]["id"] == whole
        explain = await client.get(f"/v1/tasks/{given}/explain")
        assert explain.status == 200, await explain.text()
        assert (await explain.json())["task_id"] == whole
    too_short = await client.get(f"/v1/tasks/{whole[:3]}")
    assert too_short.status == 404
    assert (await too_short.json())["error"] == (
        f"no task {whole[:3]!r} (an id prefix needs 4+ characters)"
    )
    for unknown in ("nosuchid", "ffffffff" if not whole.startswith("ffffffff") else "eeeeeeee"):
        answer = await client.get(f"/v1/tasks/{unknown}/explain")
        assert answer.status == 404
        assert (await answer.json())["error"] == f"no task {unknown!r}"


async def test_ambiguous_prefix_names_the_count(aiohttp_client: Any, tmp_path: Path):
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    agent = client.app[AGENT]
    for suffix in ("01", "02", "03"):
        await agent.store.db.write(
            lambda db, s=suffix: db.execute(
                "INSERT INTO tasks (id, contract, state, submitted_at) VALUES (?, '{}', 'done', 0)",
                [f"abcd{s}"],
            )
        )
    answer = await client.get("/v1/tasks/abcd")
    assert answer.status == 404
    assert (await answer.json())["error"] == (
        "ambiguous: 3 tasks start with 'abcd'; give more characters"
    )
    exact = await client.get("/v1/tasks/abcd02")
    assert exact.status == 200 and (await exact.json())["task"]["id"] == "abcd02"


async def test_a_deferrable_task_never_held_has_no_held_until(aiohttp_client: Any, tmp_path: Path):
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    body = {"semantics": {"gflops": 0.01}, "deferrable": True, "requirements": {"deadline_s": 600}}
    doc = await submit(client, body)
    task = await wait_for(client, doc["task"]["id"], {"done", "failed"})
    assert task["state"] == "done", task
    assert task["held_until"] is None and not task.get("error")


async def test_a_nul_byte_in_a_header_is_refused_and_logged_as_one_info_line(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    client = await start(aiohttp_client, tmp_path)
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Evil: a\x00b\r\n\r\n")
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    assert status_line.split()[1] == b"400", status_line
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert records, "aiohttp logged nothing about the refused request"
    assert all(r.levelno <= logging.INFO and not r.exc_info for r in records), [
        (r.levelname, r.getMessage()) for r in records
    ]
    assert any("refused malformed HTTP (400" in r.getMessage() for r in records)
    assert all("\n" not in r.getMessage() for r in records)
    ok = await client.get("/v1/health")  # and the agent still answers
    assert ok.status == 200


async def test_a_deadline_no_device_can_meet_is_placed_late_and_explained(
    aiohttp_client: Any, tmp_path: Path
):
    """The agent places it on the earliest finish and records why (issue 13)."""
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    body = {"semantics": {"gflops": 0.1}, "requirements": {"deadline_s": 1e-9}}
    doc = await submit(client, body)
    task = await wait_for(client, doc["task"]["id"], {"done", "failed"})
    assert task["state"] == "done", task
    explain = await (await client.get(f"/v1/tasks/{task['id']}/explain")).json()
    assert explain["placed"] and explain["devices"] == [task["device"]]
    assert "deadline cannot be met" in explain["why_here"]
    assert "(roofline)" in explain["why_here"]  # no model named: the estimate's source
    dropped = {**body, "requirements": {"deadline_s": 1e-9, "drop_if_late": True}}
    failed = await wait_for(client, (await submit(client, dropped))["task"]["id"], {"failed"})
    assert failed["state"] == "failed"


async def test_deferrable_tasks_with_a_far_deadline_are_accepted_at_once(
    aiohttp_client: Any, tmp_path: Path
):
    """Found by schemathesis: deadline_s 9e8 made the agent plan hour by hour to it (a hang)."""
    client = await start(aiohttp_client, tmp_path, profile="rk3588")
    task = {"semantics": {"gflops": 0.01}, "deferrable": True, "requirements": {"deadline_s": 9e8}}
    resp = await asyncio.wait_for(client.post("/v1/tasks:batch", json={"tasks": [task] * 200}), 30)
    assert resp.status == 202, await resp.text()
    health = await asyncio.wait_for(client.get("/v1/health"), 5)  # and the loop is free
    assert health.status == 200
