"""Agent configuration: ``AgentConfig`` from TOML, then ``EDGE_AGENT_*`` environment overrides.

This is the only module of the agent that reads ``os.environ``. Every setting has a default
that works with no file at all. The settings live in ``config_settings``, their range checks
in ``config_checks``, the commented file ``init`` writes in ``config_template``; reading and
type-checking is ``edge_agent.config_file``, shared with the hub.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from edge_agent.agent.config.checks import validated
from edge_agent.agent.config.settings import DEFAULT_PORT, AgentConfig, default_data_dir
from edge_agent.agent.config.template import render_default
from edge_agent.carbon_series import shipped_series
from edge_agent.config_file import ConfigError, SettingsSpec

__all__ = [
    "DEFAULT_PORT",
    "ENV_PREFIX",
    "AgentConfig",
    "ConfigError",
    "default_config_path",
    "default_data_dir",
    "load_config",
    "render_default",
]

ENV_PREFIX = "EDGE_AGENT_"


#: TOML section of each setting (the file groups them; the dataclass is flat).
SECTIONS: dict[str, tuple[str, ...]] = {
    "agent": ("data_dir", "profile", "policy", "model_dir", "command_allowlist"),
    "api": (
        "host",
        "port",
        "max_body_bytes",
        "header_timeout_s",
        "body_timeout_s",
        "max_connections",
        "auth",
        "auth_token_file",
    ),
    "scheduler": (
        "batch_size",
        "emulation_jitter",
        "shutdown_grace_s",
        "telemetry_interval_s",
        "tenant_shares",
    ),
    # TOML keys of [hub] are the settings' names without "hub_": [hub] url = "http://..."
    "hub": (
        "url",
        "join_token",
        "agent_id",
        "labels",
        "retry_s",
        "outbox_limit",
        "mdns_interfaces",
    ),
    # [pools.TENANT] tables: cpu_cores, memory_mb, accelerator_share, borrow (pools.py)
    "pools": ("<tenant>",),
    # [carbon] keys are the settings' names without "carbon_"
    "carbon": ("intensity_g_per_kwh", "series", "column", "region", "update_s"),
    # and for [predictor]: [predictor] personalise = false is predictor_personalise
    "predictor": ("personalise",),
    # the same for [mesh]: [mesh] fleet_key = "..." is mesh_fleet_key
    "mesh": (
        "fleet_key",
        "fleet_key_file",
        "enabled",
        "agent_id",
        "address",
        "interfaces",
        "heartbeat_s",
        "peer_cap",
        "bid_above_s",
        "bid_rate_per_s",
        "link_bytes_per_s",
        "lease_min_s",
        "lease_factor",
        "lease_grace_s",
    ),
}
_KINDS: dict[str, type] = {
    "data_dir": Path,
    "model_dir": Path,
    "host": str,
    "policy": str,
    "profile": str,
    "port": int,
    "max_body_bytes": int,
    "header_timeout_s": float,
    "body_timeout_s": float,
    "max_connections": int,
    "auth": str,
    "auth_token_file": Path,
    "batch_size": int,
    "command_allowlist": tuple,
    "telemetry_interval_s": float,
    "emulation_jitter": float,
    "shutdown_grace_s": float,
    "tenant_shares": dict,
    "pools": object,  # {tenant: {cpu_cores, ...}}, parsed by edge_agent.placement.pools
    "hub_url": str,
    "hub_join_token": str,
    "hub_agent_id": str,
    "hub_labels": Mapping,
    "hub_retry_s": float,
    "hub_outbox_limit": int,
    "hub_mdns_interfaces": tuple,
    "carbon_intensity_g_per_kwh": float,
    "carbon_series": Path,
    "carbon_column": str,
    "carbon_region": str,
    "carbon_update_s": float,
    "mesh_fleet_key": str,
    "mesh_fleet_key_file": str,
    "mesh_enabled": bool,
    "predictor_personalise": bool,
    "mesh_agent_id": str,
    "mesh_address": str,
    "mesh_interfaces": tuple,
    "mesh_heartbeat_s": float,
    "mesh_peer_cap": int,
    "mesh_bid_above_s": float,
    "mesh_bid_rate_per_s": float,
    "mesh_link_bytes_per_s": float,
    "mesh_lease_min_s": float,
    "mesh_lease_factor": float,
    "mesh_lease_grace_s": float,
}


def _pools(value: Any, where: str) -> Any:
    from edge_agent.placement.pools import parse_pools

    try:
        return parse_pools(value, where)
    except ValueError as err:
        raise ConfigError(str(err)) from None


SPEC = SettingsSpec(
    ENV_PREFIX,
    SECTIONS,
    _KINDS,
    prefixed=frozenset({"hub", "carbon", "mesh", "predictor"}),
    tables=frozenset({"pools"}),
    finish={
        "profile": lambda value, where: value or None,
        # a bare name of a shipped series finds it (edge_agent.carbon_series)
        "carbon_series": lambda value, where: shipped_series(value),
        "pools": _pools,
    },
)


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Return ``$EDGE_AGENT_CONFIG``, else ``~/.config/hetmesh/agent.toml``."""
    given = SPEC.config_file(os.environ if env is None else env)
    return given or Path.home() / ".config" / "hetmesh" / "agent.toml"


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> AgentConfig:
    """Return the config from ``path`` (default: ``default_config_path``, if it exists) + env.

    A ``path`` given explicitly must exist; ConfigError names the file, key and problem.
    """
    env = os.environ if env is None else env
    file = path if path is not None else default_config_path(env)
    values = SPEC.load(file if path is not None or file.is_file() else None, env)
    return validated(AgentConfig(**values), "config")
