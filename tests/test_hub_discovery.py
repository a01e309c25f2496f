"""Hub discovery's pieces: the TXT record, the proof of the join token, and their settings.

The end-to-end case (a hub announced over mDNS on loopback, a relay refused) is in
tests/test_hub_link_mdns.py beside the rest of the agent's hub link tests.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from cloud_hub.hub.api import make_app
from cloud_hub.hub.config import ConfigError, HubConfig, load_config
from cloud_hub.hub.service import load_secrets
from edge_agent.agent import config as agent_config
from edge_agent.errors import InvalidInput
from edge_agent.protocol.hub_client import HubClient
from edge_agent.protocol.hub_discovery import (
    HubHint,
    HubUnverified,
    check_proof,
    hub_txt,
    parse_hub_txt,
)

Client = TestClient[Any, Any]


def _hint(url: Any, hub_id: str) -> HubHint:
    return HubHint(hub_id, "0.1.0", str(url.host), int(str(url.port)), "http", f"{hub_id}._x")


@pytest.mark.asyncio
async def test_the_hub_proves_the_join_token_for_the_address_it_was_asked_on(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    config = HubConfig(data_dir=tmp_path, port=0, join_token="tok", admin_token="a", hub_id="h1")
    client: Client = await aiohttp_client(make_app(config))
    url = client.make_url("")
    prober = HubClient(str(url), "a1", client.session)
    nonce = secrets.token_hex(16)
    answer = await prober.prove(nonce)
    assert answer["hub_id"] == "h1" and answer["endpoint"] == f"{url.host}:{url.port}"
    check_proof(_hint(url, "h1"), "tok", nonce, answer)  # the fleet's token: accepted
    with pytest.raises(HubUnverified, match="wrong proof"):
        check_proof(_hint(url, "h1"), "another-fleet", nonce, answer)
    with pytest.raises(HubUnverified, match="wrong proof"):  # a replayed answer
        check_proof(_hint(url, "h1"), "tok", secrets.token_hex(16), answer)
    with pytest.raises(HubUnverified, match="announced 'h2'"):
        check_proof(_hint(url, "h2"), "tok", nonce, answer)
    moved = HubHint("h1", "0.1.0", str(url.host), int(str(url.port)) + 1, "http", "h1._x")
    with pytest.raises(HubUnverified, match="a relay"):
        check_proof(moved, "tok", nonce, answer)
    resp = await client.post("/v1/hub/proof", json={"nonce": "short"})
    assert resp.status == 400 and "nonce" in (await resp.json())["error"]
    resp = await client.post("/v1/hub/proof", data=b"x")  # not JSON
    assert resp.status == 400 and "JSON" in (await resp.json())["error"]


def test_txt_record_is_hints_only_and_malformed_ones_are_named() -> None:
    props = hub_txt("hub-1", "0.1.0", 8480, "http")
    assert props == {"id": "hub-1", "v": "0.1.0", "port": "8480", "scheme": "http"}
    raw = {k.encode(): v.encode() for k, v in props.items()}
    hint = parse_hub_txt("hub-1._hetmesh-hub._tcp.local.", "127.0.0.1", raw)
    assert hint.url == "http://127.0.0.1:8480" and hint.hub_id == "hub-1"
    with pytest.raises(InvalidInput, match="'port'"):
        parse_hub_txt("x", "127.0.0.1", {**raw, b"port": b"99999"})
    with pytest.raises(InvalidInput, match="'scheme'"):
        parse_hub_txt("x", "127.0.0.1", {**raw, b"scheme": b"ftp"})
    with pytest.raises(InvalidInput, match="hub id"):
        parse_hub_txt("x", "127.0.0.1", {**raw, b"id": b"bad id!"})


def test_hub_discovery_settings(tmp_path: Path) -> None:
    env = {"CLOUD_HUB_ADVERTISE": "true", "CLOUD_HUB_HUB_ID": "lab-hub"}
    config = load_config(env=env)
    assert (
        config.advertise and config.hub_id == "lab-hub" and config.announced_address == "127.0.0.1"
    )
    with pytest.raises(ConfigError, match="CLOUD_HUB_ADVERTISE: expected true or false"):
        load_config(env={"CLOUD_HUB_ADVERTISE": "yes please"})
    with pytest.raises(ConfigError, match="advertise_address"):
        load_config(env={"CLOUD_HUB_ADVERTISE": "1", "CLOUD_HUB_HOST": "0.0.0.0"})
    file = tmp_path / "hub.toml"
    file.write_text('[discovery]\nadvertise = true\nadvertise_address = "10.0.0.5"\n')
    assert load_config(file, env={}).announced_address == "10.0.0.5"
    with pytest.raises(ConfigError, match="hub_id"):
        load_config(env={"CLOUD_HUB_HUB_ID": "no spaces"})
    # a generated hub id is kept across restarts, beside the generated tokens
    plain = HubConfig(data_dir=tmp_path / "d")
    first, again = load_secrets(plain), load_secrets(plain)
    assert first == again and first[2].startswith("hub-")


def test_agent_discovery_settings(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text('[hub]\nurl = "mdns"\njoin_token = "t"\nmdns_interfaces = ["127.0.0.1"]\n')
    config = agent_config.load_config(file, env={})
    assert config.hub_url == "mdns" and config.hub_mdns_interfaces == ("127.0.0.1",)
    env = {"EDGE_AGENT_HUB_URL": "mdns", "EDGE_AGENT_HUB_MDNS_INTERFACES": "10.0.0.2, 10.0.0.3"}
    config = agent_config.load_config(file, env=env)
    assert config.hub_mdns_interfaces == ("10.0.0.2", "10.0.0.3")
    with pytest.raises(agent_config.ConfigError, match='"mdns"'):
        agent_config.load_config(file, env={"EDGE_AGENT_HUB_URL": "hub.lan"})
    rendered = agent_config.render_default(config)
    assert 'mdns_interfaces = ["10.0.0.2", "10.0.0.3"]' in rendered
