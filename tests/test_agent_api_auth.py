"""The agent's API token (``[api] auth``): which requests need it, the token file, the settings.

Real aiohttp app on loopback through the test client; the config says which address the
agent is meant for (``LAN``: a documentation address, TEST-NET-1), which is what decides
``auth = "auto"``. The real bind on a LAN address, attacked from another host, is
``test_agent_api_auth_netns.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from edge_agent.agent.config import AgentConfig, ConfigError, load_config, render_default
from edge_agent.agent.web.api import make_app
from edge_agent.api_token import TokenFileError
from tests.support.api_token import auth_headers, token_of

Client = TestClient[Any, Any]
LAN = "192.0.2.50"
TASK = {"semantics": {"gflops": 0.1}}


def config(tmp_path: Path, **changes: Any) -> AgentConfig:
    base = AgentConfig(
        data_dir=tmp_path / "data", port=0, profile="rk3588", shutdown_grace_s=0.0,
        telemetry_interval_s=0.0, emulation_jitter=0.0,
    )  # fmt: skip
    return base.replace(**changes)


async def start(aiohttp_client: Any, cfg: AgentConfig) -> Client:
    client: Client = await aiohttp_client(make_app(cfg))
    return client


async def stored(client: Client, cfg: AgentConfig) -> list[str]:
    resp = await client.get("/v1/tasks", headers=auth_headers(cfg))
    assert resp.status == 200
    return [t["id"] for t in (await resp.json())["tasks"]]


async def refused(resp: Any, why: str, cfg: AgentConfig) -> str:
    """Assert ``resp`` is the API's 401 in the one error shape; return its message."""
    assert resp.status == 401, await resp.text()
    doc = await resp.json()
    assert doc["ok"] is False and doc["status"] == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    message = str(doc["error"])
    assert why in message and "Authorization: Bearer <token>" in message
    assert str(cfg.token_path) in message  # which file holds the token
    return message


@pytest.mark.asyncio
async def test_a_lan_address_needs_the_token_and_nothing_is_stored_without_it(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    cfg = config(tmp_path, host=LAN)
    assert cfg.auth == "auto" and cfg.auth_on
    client = await start(aiohttp_client, cfg)
    token = token_of(cfg)

    await refused(await client.post("/v1/tasks", json=TASK), "needs a token", cfg)
    await refused(await client.post("/v1/tasks:batch", json={"tasks": [TASK]}), "token", cfg)
    wrong = {"Authorization": "Bearer " + "x" * len(token)}
    message = await refused(await client.post("/v1/tasks", json=TASK, headers=wrong), "wrong", cfg)
    assert token not in message and "x" * len(token) not in message  # never echoed
    basic = {"Authorization": f"Basic {token}"}  # the token, but not as a bearer token
    await refused(await client.post("/v1/tasks", json=TASK, headers=basic), "needs a token", cfg)
    upload = await client.post("/v1/models?name=evil", data=b"\x08\x07not-onnx")
    await refused(upload, "needs a token", cfg)
    assert await stored(client, cfg) == []  # nothing of the refused requests was kept
    models = await (await client.get("/v1/models", headers=auth_headers(cfg))).json()
    assert "evil" not in models["models"]

    ok = await client.post("/v1/tasks", json=TASK, headers={"Authorization": f"bearer {token}"})
    assert ok.status == 202, await ok.text()  # the scheme is case-insensitive (RFC 7235)
    assert await stored(client, cfg) == [(await ok.json())["task"]["id"]]


@pytest.mark.asyncio
async def test_health_and_the_status_page_files_are_open_everything_else_needs_the_token(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    cfg = config(tmp_path, host=LAN)
    client = await start(aiohttp_client, cfg)
    for path in ("/v1/health", "/", "/status/app.js", "/base.css", "/common.js"):
        resp = await client.get(path)
        assert resp.status == 200, path
    assert (await client.head("/v1/health")).status == 200
    closed = [
        ("GET", "/v1/status"), ("GET", "/v1/openapi.json"), ("GET", "/metrics"),
        ("GET", "/v1/tasks"), ("GET", "/v1/devices"), ("GET", "/v1/peers"), ("GET", "/v1/pools"),
        ("GET", "/v1/models"), ("GET", "/v1/tasks/abc"), ("POST", "/v1/tasks/abc:cancel"),
        ("GET", "/v1/tasks/abc/explain"), ("POST", "/v1/health"), ("GET", "/v1/nope"),
        ("GET", "/v1/health/../tasks"), ("GET", "/v1//health"), ("GET", "/status/../metrics"),
    ]  # fmt: skip
    for method, path in closed:
        resp = await client.request(method, path)
        assert resp.status == 401, f"{method} {path}: {resp.status}"
    odd = {"Authorization": "Bearer caf\u00e9-not-ascii-token"}  # compared as bytes: no 500
    assert (await client.get("/v1/tasks", headers=odd)).status == 401
    for method, path in closed[:8]:
        resp = await client.request(method, path, headers=auth_headers(cfg))
        assert resp.status == 200, f"{method} {path} with the token: {resp.status}"
    # the OpenAPI document says so: a bearer token for every operation but health
    doc = await (await client.get("/v1/openapi.json", headers=auth_headers(cfg))).json()
    assert doc["security"] == [{"apiToken": []}]
    assert doc["components"]["securitySchemes"]["apiToken"]["scheme"] == "bearer"
    assert doc["paths"]["/v1/health"]["get"]["security"] == []
    assert "security" not in doc["paths"]["/v1/tasks"]["post"]  # the document's default


@pytest.mark.asyncio
async def test_the_signed_mesh_api_keeps_its_own_check(aiohttp_client: Any, tmp_path: Path) -> None:
    cfg = config(tmp_path, host=LAN, mesh_fleet_key="api-auth-test-fleet-key-00000000")
    client = await start(aiohttp_client, cfg)
    resp = await client.post("/mesh/v1/hello", json={})
    doc = await resp.json()
    assert resp.status == 401 and "Authorization: Bearer" not in doc["error"]  # the mesh's own
    assert (await client.get("/v1/peers")).status == 401  # /v1 stays guarded with a mesh on


@pytest.mark.asyncio
async def test_loopback_needs_no_token_unless_auth_is_token(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    cfg = config(tmp_path)
    assert cfg.host == "127.0.0.1" and not cfg.auth_on
    client = await start(aiohttp_client, cfg)
    assert (await client.post("/v1/tasks", json=TASK)).status == 202
    assert not cfg.token_path.exists()  # no token made while none is asked for
    doc = await (await client.get("/v1/openapi.json")).json()
    assert "security" not in doc and "apiToken" not in doc["components"]["securitySchemes"]

    forced = config(tmp_path / "forced", auth="token")
    assert forced.auth_on
    client = await start(aiohttp_client, forced)
    await refused(await client.post("/v1/tasks", json=TASK), "needs a token", forced)
    assert (await client.post("/v1/tasks", json=TASK, headers=auth_headers(forced))).status == 202


@pytest.mark.asyncio
async def test_auth_none_on_a_lan_address_is_open_and_says_so_loudly(
    aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(tmp_path, host=LAN, auth="none")
    with caplog.at_level(logging.WARNING, logger="edge_agent.agent.web.api_auth"):
        client = await start(aiohttp_client, cfg)
    assert any('auth = "none"' in r.message and LAN in r.message for r in caplog.records)
    assert (await client.post("/v1/tasks", json=TASK)).status == 202


def test_the_token_file_is_made_0600_and_a_readable_one_is_refused(tmp_path: Path) -> None:
    cfg = config(tmp_path, host=LAN)
    make_app(cfg)
    path = cfg.token_path
    assert path == cfg.data_dir / "api_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = token_of(cfg)
    assert len(token) >= 43  # 32 random bytes
    make_app(cfg)
    assert token_of(cfg) == token  # kept across starts

    path.chmod(0o644)
    with pytest.raises(TokenFileError, match=rf"mode 0644.*chmod 600 {path}"):
        make_app(cfg)
    path.chmod(0o600)
    path.write_text("short\n")
    with pytest.raises(TokenFileError, match="no usable token"):
        make_app(cfg)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(TokenFileError, match="symbolic link"):
        make_app(cfg)


def test_edge_agent_run_refuses_a_readable_token_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from edge_agent.cli import main as agent

    path = tmp_path / "token"
    path.write_text("an-operator-written-token-0123456789\n")
    path.chmod(0o644)
    toml = tmp_path / "agent.toml"
    toml.write_text(f'[api]\nauth = "token"\nauth_token_file = "{path}"\n')
    argv = ["run", "--config", str(toml), "--data-dir", str(tmp_path / "data"), "--port", "0"]
    assert agent(argv) == 2
    err = capsys.readouterr().err
    assert f"chmod 600 {path}" in err and "an-operator-written" not in err


def test_auth_settings_from_toml_and_environment_and_documented(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f'[api]\nhost = "{LAN}"\nauth = "token"\nauth_token_file = "/etc/t"\n')
    cfg = load_config(path, {})
    assert (cfg.auth, cfg.token_path) == ("token", Path("/etc/t"))
    env = {"EDGE_AGENT_AUTH": "none", "EDGE_AGENT_AUTH_TOKEN_FILE": str(tmp_path / "t")}
    cfg = load_config(path, env)
    assert (cfg.auth, cfg.token_path, cfg.auth_on) == ("none", tmp_path / "t", False)
    assert load_config(None, {"EDGE_AGENT_HOST": "0.0.0.0"}).auth_on  # every address: a LAN
    assert load_config(None, {"EDGE_AGENT_HOST": "::1"}).auth_on is False
    assert load_config(None, {"EDGE_AGENT_HOST": "localhost"}).auth_on is False
    assert load_config(None, {"EDGE_AGENT_HOST": "box.lan"}).auth_on  # a name: not loopback
    with pytest.raises(ConfigError, match="auth must be one of auto, token, none"):
        load_config(path, {"EDGE_AGENT_AUTH": "off"})
    text = render_default()
    assert 'auth = "auto"' in text and 'auth_token_file = ""' in text
    rendered = tmp_path / "rendered.toml"
    rendered.write_text(render_default(AgentConfig(auth="token", auth_token_file=Path("/x/t"))))
    again = load_config(rendered, {})
    assert (again.auth, again.auth_token_file) == ("token", Path("/x/t"))


def test_the_token_file_is_written_owner_only_even_under_a_lax_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        cfg = config(tmp_path, auth="token")
        make_app(cfg)
    finally:
        os.umask(old)
    assert stat.S_IMODE(cfg.token_path.stat().st_mode) == 0o600


@pytest.mark.asyncio
async def test_the_edge_agent_commands_send_the_token_of_the_configured_file(
    tmp_path: Path,
    agent_daemon: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real daemon with ``auth = "token"``; the commands run as the operator runs them."""
    from edge_agent.cli import main as agent

    toml = tmp_path / "agent.toml"
    toml.write_text(
        f'[agent]\ndata_dir = "{tmp_path / "data"}"\nprofile = "rk3588"\n'
        '[api]\nport = 0\nauth = "token"\n[scheduler]\ntelemetry_interval_s = 0\n'
        "shutdown_grace_s = 0\n"
    )
    cfg, where = load_config(toml, {}), ["--config", str(toml)]
    async with agent_daemon(cfg):
        assert await asyncio.to_thread(agent, ["submit", "tiny_cnn_fp32", *where]) == 0
        task_id = capsys.readouterr().out.strip()
        assert await asyncio.to_thread(agent, ["tasks", *where, "--json"]) == 0
        assert [t["id"] for t in json.loads(capsys.readouterr().out)["tasks"]] == [task_id]
        monkeypatch.setenv("EDGE_AGENT_AUTH_TOKEN_FILE", str(tmp_path / "not-here"))
        assert await asyncio.to_thread(agent, ["tasks", *where]) == 2
        err = capsys.readouterr().err
        assert "agent answered 401: this API needs a token" in err and "not-here" in err
