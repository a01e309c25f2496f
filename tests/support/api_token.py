"""The agent's API token for tests that call its ``/v1`` over HTTP: read it the way the
``edge-agent`` commands do (the configured token file) and send it as they do."""

from __future__ import annotations

from edge_agent.agent.config import AgentConfig
from edge_agent.api_token import bearer, read_token


def token_of(config: AgentConfig) -> str:
    """Return the token the agent of ``config`` made (it must have started with auth on)."""
    token = read_token(config.token_path)
    assert token is not None, f"no API token in {config.token_path}: is [api] auth on?"
    return token


def auth_headers(config: AgentConfig) -> dict[str, str]:
    """Return the ``Authorization: Bearer`` header with the agent's token."""
    return bearer(token_of(config))
