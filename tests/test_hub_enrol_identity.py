"""An enrolled agent id belongs to the holder of its key: the join token alone cannot take it.

Before, ``POST /v1/enrol`` with the join token (which every box holds) and another agent's id
replaced that agent's key: any box could take over any identity (its policies, its records,
the hub's view of it) and lock the real agent into a re-enrolment tug of war. Now an id the
hub holds is enrolled again only by a request signed with its current key; the operator
releases an id whose box is gone (``cloud-hub agents release``). Real hubs (aiohttp, SQLite)
on loopback; the agents are the edge agent's own ``HubClient``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from cloud_hub.cli import main as hub_cli
from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import HubConfig
from edge_agent.protocol.hub_client import HubClient, HubRejected

pytestmark = pytest.mark.asyncio


async def _box(session: aiohttp.ClientSession, url: str) -> HubClient:
    return HubClient(url, "a1", session)


async def _hub(aiohttp_client: Any, config: HubConfig) -> tuple[Any, str]:
    """A real hub app on loopback and its base URL."""
    hub = await aiohttp_client(make_app(config))
    return hub, str(hub.make_url("")).rstrip("/")


async def test_another_box_with_the_join_token_cannot_take_an_enrolled_id(
    aiohttp_client: Any, hub_config: Callable[..., HubConfig]
) -> None:
    config = hub_config()
    hub, url = await _hub(aiohttp_client, config)
    async with aiohttp.ClientSession() as session:
        owner = await _box(session, url)
        await owner.enrol(config.join_token)
        key = owner.key
        thief = await _box(session, url)
        with pytest.raises(HubRejected) as refused:
            await thief.enrol(config.join_token)
        assert refused.value.status == 409 and refused.value.reason == "enrolled"
        assert "cloud-hub agents release a1" in str(refused.value)
        thief.key, thief.hub_id = "forged-key-forged-key-forged-key", owner.hub_id
        with pytest.raises(HubRejected) as forged:  # signed, but not with a1's key
            await thief.enrol(config.join_token)
        assert forged.value.status == 401 and "enrolled with another key" in str(forged.value)
        assert owner.key == key
        await owner.heartbeat({"status": "ok"})  # the owner's key still holds

        # The owner itself may enrol again (a new key, signed with the old one).
        await owner.enrol(config.join_token)
        assert owner.key != key
        await owner.heartbeat({"status": "ok"})
        stale = await _box(session, url)
        stale.key, stale.hub_id = key, owner.hub_id
        with pytest.raises(HubRejected) as old:
            await stale.heartbeat({"status": "ok"})
        assert old.value.status == 401
        fleet = await (await hub.get("/v1/agents")).json()
        assert [a["id"] for a in fleet["agents"]] == ["a1"]


async def test_the_admin_releases_an_id_for_a_new_box_and_the_release_survives_a_restart(
    aiohttp_client: Any,
    hub_config: Callable[..., HubConfig],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = hub_config()
    hub, url = await _hub(aiohttp_client, config)
    async with aiohttp.ClientSession() as session:
        old_box = await _box(session, url)
        await old_box.enrol(config.join_token)
        refused = await hub.delete("/v1/agents/a1/key")  # no admin token
        assert refused.status == 401
        unknown = await hub.delete(
            "/v1/agents/nobody/key", headers={"Authorization": f"Bearer {config.admin_token}"}
        )
        assert unknown.status == 404 and "no enrolled agent" in (await unknown.json())["error"]
        args = ["agents", "release", "a1", "--url", url, "--token", config.admin_token]
        assert await _in_thread(hub_cli, args) == 0
        assert "released a1" in capsys.readouterr().out
        with pytest.raises(HubRejected) as gone:  # the old key is forgotten at once
            await old_box.heartbeat({"status": "ok"})
        assert gone.value.status == 401
    await hub.close()

    _, url = await _hub(aiohttp_client, config)  # the same database, read at start
    async with aiohttp.ClientSession() as session:
        new_box = await _box(session, url)
        await new_box.enrol(config.join_token)  # unsigned: the id is free
        await new_box.heartbeat({"status": "ok"})
        again = await _box(session, url)
        with pytest.raises(HubRejected):  # and taken again
            await again.enrol(config.join_token)


async def _in_thread(fn: Callable[[list[str]], int], args: list[str]) -> int:
    return await asyncio.to_thread(fn, args)
