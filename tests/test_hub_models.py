"""The hub serves the model registry; agents pull, validate on their own telemetry, and keep it.

Real hub and agent aiohttp applications on 127.0.0.1, real SQLite telemetry, real ONNX models
scored by onnxruntime in the agent's validation gate.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import sqlite_utils
from aiohttp import web

from cloud_hub.cli import cli as cloud_hub_cli
from cloud_hub.hub.api import make_app as hub_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.models_api import FEDERATION
from cloud_hub.learning.federation import RunRecord
from cloud_hub.learning.localfed import free_port
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.web.api import AGENT
from edge_agent.agent.web.api import make_app as agent_app
from edge_agent.predictor.features import FeatureSpec, make_dataset
from edge_agent.predictor.model import TrainConfig, model_for
from edge_agent.predictor.onnx_export import spec_metadata, to_onnx
from edge_agent.protocol.hub_auth import signed_headers
from edge_agent.protocol.hub_client import HubClient
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate

pytestmark = pytest.mark.asyncio
#: The conftest fixtures ``until``, ``hub_config`` and ``joined_agent``.
Until = Callable[..., Awaitable[Any]]
MakeHub = Callable[..., HubConfig]
MakeAgent = Callable[..., AgentConfig]
SPEC = FeatureSpec(window=16, bucket_s=60.0)
DEVICES = ("rk3588/cpu", "rk3588/npu")
BUCKETS = 240


class Server:
    """One aiohttp application on 127.0.0.1."""

    def __init__(self, make: Callable[[], web.Application]) -> None:
        self.make, self.port = make, 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> web.Application:
        app = self.make()
        self.runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        self.port = int(self.runner.addresses[0][1])
        return app

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def cycle(i: np.ndarray[Any, Any], phase: float) -> np.ndarray[Any, Any]:
    """Utilization in an 8-minute cycle: easy for the model, hard for EWMA."""
    return np.asarray(0.5 + 0.4 * np.sin(2 * math.pi * i / 8 + phase))


def write_telemetry(db_path: Path, now: float) -> None:
    """One utilization sample per device in the middle of each of the last BUCKETS minutes."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite_utils.Database(db_path)
    migrate(db, MIGRATIONS)
    last = math.floor(now / 60.0) - 1
    idx = np.arange(last - BUCKETS + 1, last + 1)
    rows = [
        {"ts": 60.0 * i + 30.0, "kind": "sample", "device": dev, "utilization": float(u)}
        for k, dev in enumerate(DEVICES)
        for i, u in zip(idx, cycle(idx, k), strict=True)
    ]
    db.table("telemetry").insert_all(rows)
    db.close()


def good_model() -> bytes:
    """A model trained (numpy SGD) on the same kind of cycle, phases other than the agent's."""
    x_all, y_all = [], []
    for phase in (0.3, 1.7, 2.9):
        i = np.arange(400)
        x, y, _ = make_dataset(cycle(i, phase), 0.0, SPEC)
        x_all.append(x)
        y_all.append(y)
    model = model_for(SPEC.n_features, SPEC.window)
    model.fit(np.concatenate(x_all), np.concatenate(y_all), TrainConfig(epochs=40, lr=0.05))
    return to_onnx(model, metadata=spec_metadata(SPEC))


def bad_model() -> bytes:
    """A valid model that forecasts three times the recent level: worse than EWMA."""
    model = model_for(SPEC.n_features, SPEC.window)
    weights = [np.zeros_like(w) for w in model.get_weights()]
    weights[1][:] = 3.0
    model.set_weights(weights)
    return to_onnx(model, metadata=spec_metadata(SPEC))


async def upload(s: aiohttp.ClientSession, hub: Server, data: bytes, token: str) -> tuple[int, Any]:
    body = {"onnx_base64": base64.b64encode(data).decode(), "metrics": {"eval_rel_mae": 0.1}}
    headers = {"Authorization": f"Bearer {token}"}
    async with s.post(f"{hub.url}/v1/models", json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_registry_routes_list_download_and_guard_uploads(hub_config: MakeHub) -> None:
    config = hub_config()
    admin = config.admin_token
    hub = Server(lambda: hub_app(config))
    await hub.start()
    data = good_model()
    try:
        async with aiohttp.ClientSession() as s:
            assert (await upload(s, hub, data, "wrong"))[0] == 401
            status, doc = await upload(s, hub, b"not onnx", admin)
            assert status == 400 and "not a valid ONNX model" in doc["error"]
            async with s.post(
                f"{hub.url}/v1/models",
                json={"onnx_base64": "%%%"},
                headers={"Authorization": f"Bearer {admin}"},
            ) as resp:
                assert resp.status == 400 and "base64" in (await resp.json())["error"]
            status, doc = await upload(s, hub, data, admin)
            assert status == 201 and doc["model"]["version"] == 1
            async with s.get(f"{hub.url}/v1/models") as resp:
                listed = (await resp.json())["models"]
            sha = hashlib.sha256(data).hexdigest()
            assert [(m["version"], m["sha256"], m["metrics"]) for m in listed] == [
                (1, sha, {"eval_rel_mae": 0.1})
            ]
            async with s.get(f"{hub.url}{listed[0]['url']}") as resp:
                assert resp.headers["X-Model-Sha256"] == sha
                assert await resp.read() == data
            async with s.get(f"{hub.url}/v1/models/9/onnx") as resp:
                assert resp.status == 404
            async with s.post(f"{hub.url}/v1/agents/a1/learning", json={}) as resp:
                assert resp.status == 401  # agents' learning poll is signed
            async with s.get(f"{hub.url}/v1/learning") as resp:
                summary = await resp.json()
            assert summary["enabled"] is False and summary["models"][0]["version"] == 1
    finally:
        await hub.stop()


async def test_agent_pulls_validates_keeps_and_refuses_a_worse_model(
    until: Until, hub_config: MakeHub, joined_agent: MakeAgent
) -> None:
    hub_cfg = hub_config(heartbeat_interval_s=0.1)
    hub = Server(lambda: hub_app(hub_cfg))
    await hub.start()
    # only the utilization written below: no periodic telemetry of its own; the fleet's
    # models judged as shipped (personalisation: tests/test_predictor_personalise.py)
    agent_cfg = joined_agent(
        hub.url, "a1", telemetry_interval_s=3600.0, predictor_personalise=False
    )
    write_telemetry(agent_cfg.db_path, time.time())
    agent = Server(lambda: agent_app(agent_cfg))
    app = await agent.start()
    learning = app[AGENT].learning
    assert learning is not None
    good, bad = good_model(), bad_model()
    try:
        async with aiohttp.ClientSession() as s:
            assert (await upload(s, hub, good, hub_cfg.admin_token))[0] == 201
            await until(lambda: learning.local.model_version == 1)
            accepted = learning.local.history[-1]
            assert accepted["accepted"] and accepted["candidate_rel_mae"] < accepted["ewma_rel_mae"]
            assert (agent_cfg.data_dir / "predictor" / "model.onnx").read_bytes() == good

            assert (await upload(s, hub, bad, hub_cfg.admin_token))[0] == 201
            await until(lambda: learning.local.history[-1]["version"] == 2)
            refused = learning.local.history[-1]
            assert not refused["accepted"] and "candidate rel. MAE" in refused["reason"]
            assert refused["candidate_rel_mae"] > refused["ewma_rel_mae"]
            assert learning.local.model_version == 1  # the old model stays in use
            assert learning.local.sha256 == hashlib.sha256(good).hexdigest()

            async def reported() -> Any:
                async with s.get(f"{hub.url}/v1/learning") as resp:
                    doc = (await resp.json())["agents"].get("a1", {})
                last = doc.get("model", {}).get("last_verdict") or {}
                return doc if last.get("version") == 2 else None

            doc = await until(reported)
            assert doc["model"]["version"] == 1
            assert doc["supernode"]["running"] is False  # no rounds wanted: no SuperNode
    finally:
        await agent.stop()
        await hub.stop()

    # a restart with the hub gone: the accepted model comes back from disk
    offline = Server(
        lambda: agent_app(agent_cfg.replace(hub_url=f"http://127.0.0.1:{free_port()}"))
    )
    app = await offline.start()
    try:
        restarted = app[AGENT].learning
        assert restarted is not None
        local = restarted.local
        assert local.model_version == 1 and local.sha256 == hashlib.sha256(good).hexdigest()
        window = np.full(SPEC.window, 0.5)
        assert local.forecaster.forecast(window, 0.0)[1] == "model"
    finally:
        await offline.stop()


async def test_learning_panel_shows_models_and_agent_error_in_a_browser(
    chromium: Any, hub_config: MakeHub
) -> None:
    config = hub_config()
    hub = Server(lambda: hub_app(config))
    await hub.start()
    try:
        async with aiohttp.ClientSession() as s:
            body = {
                "onnx_base64": base64.b64encode(good_model()).decode(),
                "metrics": {"rounds_completed": 3, "eval_rel_mae": 0.8, "ewma_rel_mae": 1.0},
            }
            async with s.post(
                f"{hub.url}/v1/models",
                json=body,
                headers={"Authorization": f"Bearer {config.admin_token}"},
            ) as resp:
                assert resp.status == 201
            client = HubClient(hub.url, "box-1", s)
            await client.enrol(config.join_token)
            assert client.key is not None and client.hub_id is not None
            report = {
                "model": {
                    "version": 1,
                    "accepted": {"candidate_rel_mae": 0.0421, "ewma_rel_mae": 0.0977},
                    "last_verdict": {"version": 1, "accepted": True, "reason": "ok"},
                },
                "supernode": {"running": False},
            }
            raw = json.dumps(report).encode()
            path = "/v1/agents/box-1/learning"
            headers = signed_headers(
                "box-1", client.key, client.hub_id, "POST", path, raw, time.time()
            )
            async with s.post(f"{hub.url}{path}", data=raw, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["latest"]["version"] == 1
        page = await chromium.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(hub.url + "/")
        await page.wait_for_selector("#fl-models tbody tr", timeout=10_000)
        cells = await page.locator("#fl-models tbody tr td").all_inner_texts()
        assert cells[:6] == ["v1", cells[1], "3", "0.800", "1.000", "20 %"], cells
        agent = await page.locator("#fl-agents tbody tr td").all_inner_texts()
        assert agent[:5] == ["box-1", "v1", "0.042", "0.098", "v1 accepted"], (
            agent
        )  # one unit, as models
        assert "No training runs yet." in await page.locator("#learning").inner_text()
        assert errors == []
    finally:
        await hub.stop()


async def test_learning_run_config_is_checked_when_the_config_loads() -> None:
    from cloud_hub.hub.config import ConfigError, load_config
    from cloud_hub.learning.federation import LearningSettings

    env = {"CLOUD_HUB_LEARNING_RUN_CONFIG": "window=8 bucket-s=2.0 round-timeout-s=30"}
    assert load_config(env=env).learning_run_config == env["CLOUD_HUB_LEARNING_RUN_CONFIG"]
    with pytest.raises(ConfigError, match=r"unknown key.*windw"):
        load_config(env={"CLOUD_HUB_LEARNING_RUN_CONFIG": "windw=8"})
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(env={"CLOUD_HUB_LEARNING_RUN_CONFIG": "window"})
    with pytest.raises(ConfigError, match="must be a number"):
        load_config(env={"CLOUD_HUB_LEARNING_RUN_CONFIG": "lr=fast"})
    # the run's deadline follows the round timeout the run config sets
    settings = LearningSettings(Path("."), run_config={"num-rounds": 2, "round-timeout-s": 30.0})
    assert settings.run_deadline_s == settings.gather_s + 60.0 + 2 * 30.0 + 60.0


async def _error(s: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with s.get(url) as resp:
        return resp.status, (await resp.json())["error"]


async def test_model_versions_and_learning_runs_take_ids_like_git(
    hub_config: MakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model version by number (3, v3) or unique sha256 prefix; a run by id or unique prefix
    (4+ characters); clear answers for unknown, short and ambiguous ones; run ids strings."""
    config = hub_config()
    hub = Server(lambda: hub_app(config))
    await hub.start()
    good, bad = good_model(), bad_model()
    try:
        async with aiohttp.ClientSession() as s:
            for data in (good, bad):
                assert (await upload(s, hub, data, config.admin_token))[0] == 201
            sha2 = hashlib.sha256(bad).hexdigest()
            for given in ("2", "v2", sha2, sha2[:4], sha2[:9].upper()):
                async with s.get(f"{hub.url}/v1/models/{given}/onnx") as resp:
                    assert resp.status == 200, given
                    assert resp.headers["X-Model-Sha256"] == sha2 and await resp.read() == bad
            base = f"{hub.url}/v1/models"
            assert await _error(s, f"{base}/v9/onnx") == (404, "no model version 'v9'")
            assert await _error(s, f"{base}/zzzzz/onnx") == (404, "no model version 'zzzzz'")
            assert await _error(s, f"{base}/{sha2[:3]}/onnx") == (
                404, f"no model version '{sha2[:3]}' (an id prefix needs 4+ characters)"
            )  # fmt: skip

            assert hub.runner is not None
            fed = hub.runner.app[FEDERATION]
            ids = [1234567890123456789, 1234599999999999999, 1234600000000000000]
            fed.runs += [RunRecord(time.time(), run_id=i, status="completed") for i in ids]
            fed.runs[0].nodes, fed.runs[0].rounds = (
                3,
                [
                    {
                        "round": 1,
                        "train": 3,
                        "train_failures": 0,
                        "evaluate": 2,
                        "evaluate_failures": 1,
                    }
                ],
            )
            base = f"{hub.url}/v1/learning/runs"
            async with s.get(f"{base}/123456") as resp:
                run = (await resp.json())["run"]
            assert run["run_id"] == "1234567890123456789" and run["nodes"] == 3
            assert run["rounds"][0]["evaluate_failures"] == 1
            async with s.get(f"{base}/1234600000000000000") as resp:
                assert (await resp.json())["run"]["run_id"] == "1234600000000000000"
            assert await _error(s, f"{base}/1234") == (
                404, "ambiguous: 3 learning runs start with '1234'; give more characters"
            )  # fmt: skip
            assert await _error(s, f"{base}/12345") == (
                404, "ambiguous: 2 learning runs start with '12345'; give more characters"
            )  # fmt: skip
            assert await _error(s, f"{base}/9876") == (404, "no learning run '9876'")
            assert await _error(s, f"{base}/12") == (
                404, "no learning run '12' (an id prefix needs 4+ characters)"
            )  # fmt: skip
            async with s.get(f"{hub.url}/v1/learning") as resp:
                listed = (await resp.json())["runs"]
            assert [r["run_id"] for r in listed] == [str(i) for i in ids]

        async def cli(*argv: str) -> tuple[int, str, str]:  # the `cloud-hub` command
            code = await asyncio.to_thread(cloud_hub_cli.main, [*argv, "--url", hub.url])
            out, err = capsys.readouterr()
            return code, out, err

        code, out, _ = await cli("learning", "run", "123456")
        assert code == 0 and "run 1234567890123456789: completed, 3 nodes took part" in out
        assert out.splitlines()[-1].split() == ["1", "3", "0", "2", "1"]  # round 1's replies
        code, _, err = await cli("learning", "run", "1234")
        assert code == 2 and "ambiguous: 3 learning runs start with '1234'" in err
        code, out, _ = await cli("learning", "runs")
        assert code == 0 and out.splitlines()[-1].split()[0] == "1234567890123456789"
        assert "3/2" in out  # train/evaluate results per round
        code, out, _ = await cli("learning", "models")
        assert code == 0 and "REL. MAE" in out and "0.100" in out  # eval_rel_mae 0.1
    finally:
        await hub.stop()
