"""A learning run request while one is queued or running is refused 409 with that run's id."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.models_api import FEDERATION
from cloud_hub.learning.federation import RunRecord

pytestmark = pytest.mark.asyncio
AUTH = {"Authorization": "Bearer adm"}


async def test_second_run_request_is_refused_with_the_run_in_progress(tmp_path: Path) -> None:
    config = HubConfig(data_dir=tmp_path, port=0, join_token="join-me", admin_token="adm")
    async with TestClient(TestServer(make_app(config))) as client:
        fed = client.app[FEDERATION]
        # learning on as far as the route can tell; no SuperLink, so nothing takes the run
        fed.settings = dataclasses.replace(fed.settings, port=1)
        first = await client.post("/v1/learning/runs", headers=AUTH)
        assert first.status == 202, await first.text()
        again = await client.post("/v1/learning/runs", headers=AUTH)
        doc = await again.json()
        assert again.status == 409 and doc["state"] == "queued", doc
        assert "already queued" in doc["error"] and doc["run_id"] is None  # no Flower id yet

        fed._kick.clear()  # as the schedule does when it starts the run: under way, with an id
        fed.runs.append(RunRecord(started_at=0.0, run_id=881691))
        fed.wanted = True
        running = await client.post("/v1/learning/runs", headers=AUTH)
        doc = await running.json()
        assert running.status == 409 and doc["run_id"] == "881691", doc  # a string, exact
        assert doc["state"] == "running" and "already running" in doc["error"]

        fed.runs[-1].status, fed.wanted = "completed", False  # finished: a new run may start
        assert (await client.post("/v1/learning/runs", headers=AUTH)).status == 202
