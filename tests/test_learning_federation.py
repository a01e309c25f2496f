"""The hub runs federated rounds with agents' SuperNodes, only while rounds are wanted (slow).

Real hub (TLS SuperLink with SuperNode authentication, started from its config) and real
agents on loopback: each agent registers its SuperNode key through its signed learning poll,
starts ``flower-supernode`` when the hub wants rounds and SIGTERMs it when the run is over.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sqlite_utils
from aiohttp import web

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from cloud_hub.hub.api import make_app as hub_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.models_api import FEDERATION
from cloud_hub.learning.localfed import free_port
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.web.api import AGENT
from edge_agent.agent.web.api import make_app as agent_app
from edge_agent.predictor.supernode import SUPEREXEC_POLL_ENV, stopped_cleanly
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]
#: The conftest fixtures ``until``, ``hub_config`` and ``joined_agent``.
Until = Callable[..., Awaitable[Any]]
MakeHub = Callable[..., HubConfig]
MakeAgent = Callable[..., AgentConfig]
DEVICE = "rk3588/cpu"
#: Seconds for every agent's SuperNode to start once rounds are wanted (a loaded 2-core box
#: starts two Flower processes per agent).
SUPERNODES_UP_S = 60.0
#: Seconds past the hub's own run deadline (``LearningSettings.run_deadline_s``) the test
#: waits for the run's end: never giving up before the hub does, so a failure shows its error.
RUN_GRACE_S = 15.0


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def telemetry(db_path: Path, seed: int, minutes: int = 600) -> None:
    """Agent telemetry in an 8-minute cycle: task rows (training) and samples (validation)."""
    db_path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite_utils.Database(db_path)
    migrate(db, MIGRATIONS)
    start = (math.floor(time.time() / 60.0) - minutes) * 60.0
    rows = []
    for i in range(minutes):
        busy = min(max(0.5 + 0.4 * math.sin(2 * math.pi * i / 8 + seed), 0.02), 0.98)
        t = start + 60 * i
        rows.append({"ts": t + 60 * busy, "kind": "task", "device": DEVICE, "latency_s": 60 * busy})
        rows.append({"ts": t + 30, "kind": "sample", "device": DEVICE, "utilization": busy})
    db.table("telemetry").insert_all(rows)
    db.close()


async def federation(
    hub_config: MakeHub,
    joined_agent: MakeAgent,
    until: Until,
    agents: int,
    min_nodes: int,
    **hub: Any,
) -> None:
    """One run with ``agents`` agents; checks SuperNodes run only while the run is wanted."""
    config = hub_config(
        heartbeat_interval_s=0.2,
        learning_port=free_port(),
        learning_every_s=3600.0,
        learning_rounds=1,
        learning_min_nodes=min_nodes,
        **hub,
    )
    hub_runner, hub_url = await serve(hub_app(config))
    fed = hub_runner.app[FEDERATION]
    runners, learnings = [], []
    try:
        for i in range(agents):
            cfg = joined_agent(hub_url, f"a{i}", telemetry_interval_s=3600.0)
            telemetry(cfg.db_path, seed=i)
            runner, _ = await serve(agent_app(cfg))
            runners.append(runner)
            learning = runner.app[AGENT].learning
            assert learning is not None and learning.supernode is not None
            learnings.append(learning)
        supernodes = [lr.supernode for lr in learnings if lr.supernode is not None]
        assert not any(sn.running for sn in supernodes)  # no rounds wanted yet
        async with aiohttp.ClientSession() as s:
            headers = {"Authorization": f"Bearer {config.admin_token}"}
            async with s.post(f"{hub_url}/v1/learning/runs", headers=headers) as resp:
                assert resp.status == 202
        await until(lambda: fed.wanted, 10)
        await until(lambda: all(sn.running for sn in supernodes), SUPERNODES_UP_S)
        deadline = fed.settings.run_deadline_s + RUN_GRACE_S
        await until(lambda: fed.runs and fed.runs[-1].status != "running", deadline)
        await until(lambda: all(sn.exit_codes for sn in supernodes), 30)  # stopped by the agent
        assert not any(sn.running for sn in supernodes)
        assert all(sn.starts == 1 and stopped_cleanly(sn.exit_codes[-1]) for sn in supernodes)
        run = fed.runs[-1]
        if min_nodes > agents:
            assert run.status == "failed" and "finished:failed" in (run.error or "")
            assert fed.registry.latest() is None
            assert run.nodes == 0  # registered and running, but no round ever had its nodes
        else:
            assert run.status == "completed", run.error
            assert run.model_version == 1
            # the nodes that took part, from Flower's record of the run (each round's replies)
            assert run.nodes == agents, run.rounds
            assert [(r["round"], r["train"], r["evaluate"]) for r in run.rounds] == [
                (1, agents, agents)
            ]
            async with aiohttp.ClientSession() as s:  # the API: by a unique prefix, id a string
                url = f"{hub_url}/v1/learning/runs/{str(run.run_id)[:6]}"
                async with s.get(url) as resp:
                    doc = (await resp.json())["run"]
            assert doc["run_id"] == str(run.run_id) and doc["nodes"] == agents
            for lr in learnings:  # every agent pulls the new model and scores it locally
                await until(lambda: lr.local.history, 30)  # noqa: B023  # awaited at once
                verdict = lr.local.history[-1]
                assert verdict["version"] == 1 and verdict["candidate_rel_mae"] is not None
    finally:
        for runner in runners:
            await runner.cleanup()
        await hub_runner.cleanup()
    assert (config.data_dir / "learning" / "runs.json").exists()


async def test_a_run_with_too_few_nodes_is_stopped_and_supernodes_stop(
    monkeypatch: pytest.MonkeyPatch, until: Until, hub_config: MakeHub, joined_agent: MakeAgent
) -> None:
    monkeypatch.setenv(SUPEREXEC_POLL_ENV, "0.25")
    await federation(
        hub_config, joined_agent, until, agents=1, min_nodes=2, learning_start_timeout_s=4.0
    )


async def test_two_agents_train_one_round_and_pull_the_model(
    monkeypatch: pytest.MonkeyPatch, until: Until, hub_config: MakeHub, joined_agent: MakeAgent
) -> None:
    monkeypatch.setenv(SUPEREXEC_POLL_ENV, "0.25")
    await federation(
        hub_config, joined_agent, until, agents=2, min_nodes=2, learning_start_timeout_s=30.0
    )
