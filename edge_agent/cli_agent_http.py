"""How the ``edge-agent`` client commands reach the agent: its address and one HTTP call.

The address is ``--url``, else the one the running agent recorded, else the configured one.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from edge_agent.clikit import call_service, running_service_url
from edge_agent.errors import HetmeshError


class AgentUnreachable(HetmeshError):
    """No agent answered at the address; start one with ``edge-agent run``."""


def agent_config(args: argparse.Namespace) -> Any:
    from edge_agent.agent.config import load_config

    return load_config(args.config)


def config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE", help="agent config (TOML)")


def client_options(parser: argparse.ArgumentParser) -> None:
    config_option(parser)
    parser.add_argument("--url", metavar="URL", help="agent base URL (default: the local agent)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON answer")


def base_url(args: argparse.Namespace) -> str:
    """Return --url, else the address in the running agent's agent.json, else the config's."""
    if args.url:
        return str(args.url).rstrip("/")
    config = agent_config(args)
    return running_service_url(config.state_path, config.host, str(config.url))


def request(
    base: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Any:
    """Call the agent; return the JSON answer, raise InvalidInput with its error message."""
    data = None
    hdrs = dict(headers or {})
    if isinstance(body, bytes):
        data, hdrs["Content-Type"] = body, "application/octet-stream"
    elif body is not None:
        data, hdrs["Content-Type"] = json.dumps(body).encode(), "application/json"
    req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
    return call_service(
        base, req, service="agent", unreachable=AgentUnreachable, start_with="edge-agent run"
    )
