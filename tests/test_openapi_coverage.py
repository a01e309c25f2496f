"""Every HTTP route the agent and the hub serve is described in their OpenAPI documents."""

from __future__ import annotations

import re
from pathlib import Path

from aiohttp import web

from cloud_hub.hub.api import make_app as make_hub_app
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.openapi import document as hub_document
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.web.api import make_app as make_agent_app
from edge_agent.agent.web.openapi import document as agent_document

#: Routes that serve files for a browser, not an API (the dashboard and the status page).
PAGES = {"/", "/base.css", "/common.js", "/dashboard", "/status"}


def served(app: web.Application) -> set[tuple[str, str]]:
    """Return (method, path) of every route of ``app``, with ``{name:regex}`` as ``{name}``."""
    out = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path") or info.get("prefix", "")
        if path in PAGES or route.method == "HEAD":
            continue
        out.add((route.method.lower(), re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)))
    return out


def documented(doc: dict[str, object]) -> set[tuple[str, str]]:
    paths = doc["paths"]
    assert isinstance(paths, dict)
    return {(method, path) for path, ops in paths.items() for method in ops}


def test_every_agent_route_is_in_the_agent_document(tmp_path: Path) -> None:
    app = make_agent_app(AgentConfig(data_dir=tmp_path, port=0))
    assert served(app) - documented(agent_document()) == set()
    assert documented(agent_document()) - served(app) == set()


def test_the_signed_mesh_routes_are_in_the_document_when_the_mesh_is_on(tmp_path: Path) -> None:
    config = AgentConfig(data_dir=tmp_path, port=0, host="127.0.0.1", mesh_fleet_key="k" * 32)
    app = make_agent_app(config)
    doc = agent_document(mesh=True)
    assert {p for _, p in served(app) if p.startswith("/mesh/")} == {
        "/mesh/v1/hello",
        "/mesh/v1/heartbeat",
        "/mesh/v1/bid",
        "/mesh/v1/tasks",
        "/mesh/v1/tasks/cancel",
    }
    assert served(app) == documented(doc)
    for path, ops in doc["paths"].items():
        if path.startswith("/mesh/"):  # unsigned requests are refused: the document says so
            assert ops["post"]["security"] == [{"fleetSignature": []}]
            assert "401" in ops["post"]["responses"]


def test_every_hub_route_is_in_the_hub_document(tmp_path: Path) -> None:
    config = HubConfig(data_dir=tmp_path, port=0, join_token="join-me", admin_token="adm")
    app = make_hub_app(config)
    assert served(app) - documented(hub_document()) == set()
    assert documented(hub_document()) - served(app) == set()
