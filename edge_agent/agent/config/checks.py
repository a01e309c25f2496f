"""Range checks of the agent's settings, run once the file and environment are read.

Each error names the setting (or its ``[section] key``) and what to set instead.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from edge_agent.config_file import ConfigError, check_finite, check_ranges

if TYPE_CHECKING:
    from edge_agent.agent.config.settings import AgentConfig

#: ``[api] auth``: "auto" (a token unless [api] host is loopback), "token" (always), "none".
AUTH_MODES = ("auto", "token", "none")
_AGENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def validated(config: AgentConfig, where: str) -> AgentConfig:
    """Return ``config`` if every setting is in range; ConfigError naming the first that is not."""
    from edge_agent.placement.policy import TEMPLATES

    checks = (
        ("port", 0 <= config.port <= 65535, "must be 0..65535 (0: any free port)"),
        ("max_body_bytes", config.max_body_bytes >= 1024, "must be >= 1024"),
        ("max_connections", 1 <= config.max_connections <= 1_000_000, "must be 1..1000000"),
        ("batch_size", 1 <= config.batch_size <= 100_000, "must be 1..100000"),
        ("policy", config.policy in TEMPLATES, f"must be one of {', '.join(TEMPLATES)}"),
        ("host", bool(config.host), "must not be empty"),
        ("auth", config.auth in AUTH_MODES, f"must be one of {', '.join(AUTH_MODES)}"),
        ("hub_outbox_limit", 1 <= config.hub_outbox_limit <= 10_000_000, "must be 1..10000000"),
        (
            "hub_url",
            config.hub_url in ("", "mdns") or config.hub_url.startswith(("http://", "https://")),
            'must be an http:// or https:// URL, "mdns" (find it) or empty (no hub)',
        ),
        (
            "hub_agent_id",
            not config.hub_agent_id or bool(_AGENT_ID.match(config.hub_agent_id)),
            "must be 1-64 of A-Z a-z 0-9 . _ -",
        ),
    )
    check_ranges(config, where, checks)
    may_be_zero = ("telemetry_interval_s", "emulation_jitter", "shutdown_grace_s")
    check_finite(config, where, may_be_zero, zero_ok=True)
    check_finite(config, where, ("header_timeout_s", "body_timeout_s", "hub_retry_s"))
    _check_carbon(config, where)
    _check_mesh(config, where)
    if config.hub_url and not config.hub_join_token:
        raise ConfigError(
            f"{where}: [hub] url is set but join_token is not; set [hub] join_token "
            "or $EDGE_AGENT_HUB_JOIN_TOKEN (the hub's secrets.json has it)"
        )
    return config


def _check_carbon(config: AgentConfig, where: str) -> None:
    """Refuse a bad [carbon] section; a series file is read now, so errors name its line."""
    from edge_agent.carbon_series import SeriesError, load_series

    g = config.carbon_intensity_g_per_kwh
    if g is not None and not (math.isfinite(g) and g >= 0):
        raise ConfigError(f"{where}: [carbon] intensity_g_per_kwh must be a number >= 0, got {g!r}")
    check_finite(config, where, ("carbon_update_s",), section="carbon")
    if config.carbon_series is None:
        if config.carbon_column:
            raise ConfigError(f"{where}: [carbon] column is set but series is not")
        return
    if g is not None:
        raise ConfigError(f"{where}: [carbon] give intensity_g_per_kwh or series, not both")
    try:
        load_series(config.carbon_series, config.carbon_column or None)
    except SeriesError as err:
        raise ConfigError(f"{where}: [carbon] series: {err}") from None


def _check_mesh(config: AgentConfig, where: str) -> None:
    """Raise ConfigError naming the first [mesh] setting that is out of range."""
    key = config.mesh_fleet_key.strip()
    if config.mesh_fleet_key and len(key) < 16:  # edge_agent.mesh.credential.MIN_KEY_CHARS
        raise ConfigError(
            f"{where}: [mesh] fleet_key is too short ({len(key)} characters): give at least "
            "16; make one with `edge-agent init --new-fleet-key`"
        )
    if config.mesh_fleet_key and config.mesh_fleet_key_file:
        raise ConfigError(f"{where}: [mesh] set fleet_key or fleet_key_file, not both")
    if config.mesh_enabled and not (config.mesh_fleet_key or config.mesh_fleet_key_file):
        raise ConfigError(
            f"{where}: [mesh] enabled = true needs a fleet key: set [mesh] fleet_key, "
            "fleet_key_file or $EDGE_AGENT_MESH_FLEET_KEY (`edge-agent init --new-fleet-key`)"
        )
    if config.mesh_agent_id and not _AGENT_ID.match(config.mesh_agent_id):
        raise ConfigError(f"{where}: [mesh] agent_id must be 1-64 of A-Z a-z 0-9 . _ -")
    if config.mesh_on and not config.mesh_address and config.host in ("0.0.0.0", "::"):
        raise ConfigError(
            f"{where}: [api] host {config.host!r} is not an address peers can reach: set "
            "[mesh] address to this box's LAN address"
        )
    if not 1 <= config.mesh_peer_cap <= 4096:
        raise ConfigError(f"{where}: [mesh] peer_cap must be 1..4096, got {config.mesh_peer_cap}")
    names = ("mesh_heartbeat_s", "mesh_lease_min_s", "mesh_lease_grace_s", "mesh_link_bytes_per_s")
    check_finite(config, where, names, section="mesh")
    # lease_factor = 0 is allowed: every lease is then lease_min_s, whatever the estimate
    may_be_zero = ("mesh_bid_above_s", "mesh_lease_factor", "mesh_bid_rate_per_s")
    check_finite(config, where, may_be_zero, zero_ok=True, section="mesh")
