"""Hub configuration: a frozen dataclass from TOML, then ``CLOUD_HUB_*`` environment overrides.

This is the only module of the hub that reads ``os.environ``. Every setting has a default.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.config_file import ConfigError, SettingsSpec, check_finite, check_ranges
from edge_agent.errors import InvalidInput

__all__ = ["DEFAULT_PORT", "ENV_PREFIX", "ConfigError", "HubConfig", "load_config"]

ENV_PREFIX = "CLOUD_HUB_"
DEFAULT_PORT = 8480
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$")


def default_data_dir() -> Path:
    """Return ``~/.local/share/hetmesh-hub``."""
    return Path.home() / ".local" / "share" / "hetmesh-hub"


@dataclass(frozen=True)
class HubConfig:
    """Every setting of the hub, validated once at start."""

    data_dir: Path = dataclasses.field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    join_token: str = ""  # "": generated on first start, kept in <data_dir>/secrets.json
    admin_token: str = ""  # "": generated likewise; guards policy edits
    max_body_bytes: int = 4 * 2**20
    # server limits (edge_agent/http_limits.py)
    header_timeout_s: float = 10.0  # a request head must arrive within this
    body_timeout_s: float = 60.0  # a request body must arrive within this
    max_connections: int = 4096  # open client connections; idle ones make room when full
    heartbeat_interval_s: float = 5.0  # what agents are told; liveness is judged against it
    # a large fleet is asked to beat less often, so it sends at most this many heartbeats a
    # second in all (interval = max(heartbeat_interval_s, agents / this)); 0: no cap
    max_heartbeats_per_s: float = 500.0
    stale_heartbeats: float = 3.0  # data older than this many intervals is never "healthy"
    push_interval_s: float = 1.0  # most often the dashboard stream sends a fresh snapshot
    max_clock_skew_s: float = 300.0  # signed requests older or newer than this are refused
    hub_id: str = ""  # "": generated on first start, kept in <data_dir>/secrets.json
    advertise: bool = False  # announce _hetmesh-hub._tcp.local. over mDNS
    advertise_address: str = ""  # the IPv4 address announced and bound for mDNS ("": host)
    canary_timeout_s: float = 900.0  # a canary not through the health gate by then rolls back
    record_retention_s: float = 7 * 86400.0  # synced records are kept this long after receipt
    reevaluate_s: float = 300.0  # fleet-wide re-evaluation of deferred/queued work this often
    learning_port: int = 0  # where agents reach the Fleet API; 0: no federated learning
    learning_host: str = "127.0.0.1"  # its address, as agents reach it (the LAN, if any)
    learning_every_s: float = 3600.0  # one training run this often
    learning_rounds: int = 3
    learning_min_nodes: int = 2  # a run with fewer SuperNodes is stopped, not left waiting
    learning_start_timeout_s: float = 60.0
    learning_run_config: str = ""  # more Flower run config, e.g. "window=8 bucket-s=2.0"

    @property
    def db_path(self) -> Path:
        """Return the SQLite database file."""
        return self.data_dir / "hub.db"

    @property
    def secrets_path(self) -> Path:
        """Return the file holding generated join and admin tokens."""
        return self.data_dir / "secrets.json"

    @property
    def state_path(self) -> Path:
        """Return the file where a running hub records its pid and address."""
        return self.data_dir / "hub.json"

    def interval_for(self, agents: int) -> float:
        """Return the heartbeat interval a fleet of ``agents`` is asked for: the configured one,
        or longer where the fleet would otherwise send more than ``max_heartbeats_per_s``."""
        if self.max_heartbeats_per_s <= 0:
            return self.heartbeat_interval_s
        return max(self.heartbeat_interval_s, round(agents / self.max_heartbeats_per_s, 3))

    def stale_after_for(self, agents: int) -> float:
        """Return the age after which data is stale in a fleet of ``agents`` (its interval)."""
        return self.interval_for(agents) * self.stale_heartbeats

    @property
    def announced_address(self) -> str:
        """Return the IPv4 address the hub announces (``advertise_address``, else ``host``)."""
        return self.advertise_address or self.host

    def replace(self, **changes: Any) -> HubConfig:
        """Return a copy with ``changes`` applied and validated (None values are ignored)."""
        fields = {k: v for k, v in changes.items() if v is not None}
        return _validated(dataclasses.replace(self, **fields), "override")


SECTIONS: dict[str, tuple[str, ...]] = {
    "hub": (
        "data_dir",
        "join_token",
        "admin_token",
        "hub_id",
        "record_retention_s",
        "reevaluate_s",
    ),
    "discovery": ("advertise", "advertise_address"),
    "rollouts": ("canary_timeout_s",),
    "api": (
        "host",
        "port",
        "max_body_bytes",
        "max_clock_skew_s",
        "header_timeout_s",
        "body_timeout_s",
        "max_connections",
    ),
    "liveness": (
        "heartbeat_interval_s",
        "max_heartbeats_per_s",
        "stale_heartbeats",
        "push_interval_s",
    ),
    "learning": (
        "learning_port",
        "learning_host",
        "learning_every_s",
        "learning_rounds",
        "learning_min_nodes",
        "learning_start_timeout_s",
        "learning_run_config",
    ),
}
_KINDS: dict[str, type] = {
    "data_dir": Path,
    "join_token": str,
    "admin_token": str,
    "host": str,
    "port": int,
    "max_body_bytes": int,
    "header_timeout_s": float,
    "body_timeout_s": float,
    "max_connections": int,
    "max_clock_skew_s": float,
    "heartbeat_interval_s": float,
    "max_heartbeats_per_s": float,
    "stale_heartbeats": float,
    "push_interval_s": float,
    "hub_id": str,
    "advertise": bool,
    "advertise_address": str,
    "record_retention_s": float,
    "reevaluate_s": float,
    "canary_timeout_s": float,
    "learning_port": int,
    "learning_host": str,
    "learning_every_s": float,
    "learning_rounds": int,
    "learning_min_nodes": int,
    "learning_start_timeout_s": float,
    "learning_run_config": str,
}


SPEC = SettingsSpec(ENV_PREFIX, SECTIONS, _KINDS)


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> HubConfig:
    """Return the config from ``path`` (default ``$CLOUD_HUB_CONFIG`` if set) plus env overrides."""
    env = os.environ if env is None else env
    file = path if path is not None else SPEC.config_file(env)
    return _validated(HubConfig(**SPEC.load(file, env)), "config")


def _validated(config: HubConfig, where: str) -> HubConfig:
    checks = (
        ("port", 0 <= config.port <= 65535, "must be 0..65535 (0: any free port)"),
        ("max_body_bytes", config.max_body_bytes >= 1024, "must be >= 1024"),
        ("max_connections", 1 <= config.max_connections <= 1_000_000, "must be 1..1000000"),
        ("host", bool(config.host), "must not be empty"),
        ("stale_heartbeats", config.stale_heartbeats >= 1, "must be >= 1"),
        ("max_heartbeats_per_s", config.max_heartbeats_per_s >= 0, "must be >= 0 (0: no cap)"),
        ("learning_port", 0 <= config.learning_port <= 65535, "must be 0..65535 (0: off)"),
        ("learning_rounds", config.learning_rounds >= 1, "must be >= 1"),
        ("learning_min_nodes", config.learning_min_nodes >= 1, "must be >= 1"),
    )
    check_ranges(config, where, checks)
    if config.learning_run_config:
        from cloud_hub.learning.federation import parse_run_config  # no flwr import

        try:
            parse_run_config(config.learning_run_config)
        except InvalidInput as err:
            raise ConfigError(f"{where}: {err}") from None
    if config.hub_id and not _HUB_ID.match(config.hub_id):
        raise ConfigError(
            f"{where}: hub_id must be 1-63 letters, digits or '-' (a DNS label), "
            f"got {config.hub_id!r}"
        )
    if config.advertise:
        try:
            ipaddress.IPv4Address(config.announced_address)
        except ValueError:
            raise ConfigError(
                f"{where}: advertise needs an IPv4 address to announce: set [discovery] "
                f"advertise_address (host is {config.host!r})"
            ) from None
        if config.announced_address == "0.0.0.0":
            raise ConfigError(
                f"{where}: host is 0.0.0.0; set [discovery] advertise_address to the "
                "address agents reach the hub on"
            )
    check_finite(
        config,
        where,
        (
            "header_timeout_s",
            "body_timeout_s",
            "heartbeat_interval_s",
            "push_interval_s",
            "max_clock_skew_s",
            "record_retention_s",
            "reevaluate_s",
            "canary_timeout_s",
            "learning_every_s",
            "learning_start_timeout_s",
        ),
    )
    return config
