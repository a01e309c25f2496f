"""How the ``edge-agent`` client commands reach the agent: its address and one HTTP call.

The address is ``--url``, else the one the running agent recorded, else the configured one.
Every call carries the API token from the configured token file (``[api] auth_token_file``,
else ``<data_dir>/api_token``) when there is one, so the commands work unchanged on the box
whether or not the agent asks for it.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.api_token import bearer, read_token
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


@dataclass(frozen=True)
class AgentEndpoint:
    """Where the agent listens and the API token to send it, read from ``token_file`` (None:
    no token there)."""

    url: str
    token: str | None = None
    token_file: Path | None = None

    def refused(self) -> str:
        """Return what this command sent, for an agent's 401."""
        if self.token_file is None:
            return "this command sent no token"
        if self.token is None:
            return f"this command found no token it could read in {self.token_file}"
        return f"this command sent the token in {self.token_file}"

    def __str__(self) -> str:
        return self.url


def base_url(args: argparse.Namespace) -> AgentEndpoint:
    """Return --url, else the address in the running agent's agent.json, else the config's;
    with the token of the configured token file."""
    config = agent_config(args)
    token, path = read_token(config.token_path), config.token_path
    if args.url:
        return AgentEndpoint(str(args.url).rstrip("/"), token, path)
    url = running_service_url(config.state_path, config.host, str(config.url))
    return AgentEndpoint(url, token, path)


def request(
    base: AgentEndpoint | str,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """Call the agent; return the JSON answer, raise InvalidInput with its error message."""
    if isinstance(base, str):
        base = AgentEndpoint(base)
    data = None
    hdrs = {**(bearer(base.token) if base.token else {}), **(headers or {})}
    if isinstance(body, bytes):
        data, hdrs["Content-Type"] = body, "application/octet-stream"
    elif body is not None:
        data, hdrs["Content-Type"] = json.dumps(body).encode(), "application/json"
    req = urllib.request.Request(base.url + path, data=data, method=method, headers=hdrs)
    return call_service(
        base.url,
        req,
        service="agent",
        unreachable=AgentUnreachable,
        start_with="edge-agent run",
        notes={401: base.refused()},
    )
