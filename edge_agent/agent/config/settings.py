"""Every setting of the agent daemon: ``AgentConfig``, a frozen dataclass with a default for each.

Loaded by ``edge_agent.agent.config`` (TOML + ``EDGE_AGENT_*``), range-checked by
``config_checks``, written out commented by ``config_template`` (``edge-agent init``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.agent.config.checks import validated
from edge_agent.api_token import DEFAULT_TOKEN_FILE
from edge_agent.tasks.models_dir import models_dir

if TYPE_CHECKING:
    from edge_agent.placement.pools import PoolSpec

DEFAULT_PORT = 8470


def default_data_dir() -> Path:
    """Return ``~/.local/share/hetmesh`` (the data directory when none is configured)."""
    return Path.home() / ".local" / "share" / "hetmesh"


def loopback(host: str) -> bool:
    """Return whether ``host`` is a loopback address (or ``localhost``); a name is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AgentConfig:
    """Every setting of the agent daemon, validated once at start."""

    data_dir: Path = dataclasses.field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    profile: str | None = None  # None: probe this machine; else emulate that board
    policy: str = "balanced"  # a policy template name
    model_dir: Path = dataclasses.field(default_factory=models_dir)
    command_allowlist: tuple[str, ...] = ()  # executables command tasks may run; empty = none
    max_body_bytes: int = 16 * 2**20
    # server limits (edge_agent/http_limits.py)
    header_timeout_s: float = 10.0  # a request head must arrive within this
    body_timeout_s: float = 60.0  # a request body must arrive within this
    max_connections: int = 4096  # open client connections; idle ones make room when full
    # who may call /v1 (edge_agent/agent/web/api_auth.py): "auto" (a token exactly when
    # ``host`` is not a loopback address), "token" (always) or "none" (never)
    auth: str = "auto"
    auth_token_file: Path | None = None  # None: <data_dir>/api_token, made on first start
    telemetry_interval_s: float = 10.0
    batch_size: int = 1000  # most tasks one kernel call places (a whole tasks:batch)
    emulation_jitter: float = 0.1  # sigma of the lognormal service-time jitter
    shutdown_grace_s: float = 10.0  # how long a graceful stop waits for running tasks
    tenant_shares: Mapping[str, float] = dataclasses.field(default_factory=dict)
    pools: Mapping[str, PoolSpec] = dataclasses.field(default_factory=dict)  # [pools]
    hub_url: str = ""  # "": no hub; the agent works on its own; "mdns": find it over mDNS
    hub_join_token: str = dataclasses.field(default="", repr=False)  # a secret: never logged
    hub_agent_id: str = ""  # "": <hostname>[-<profile>]
    hub_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    hub_retry_s: float = 5.0  # seconds between attempts while the hub is unreachable
    hub_outbox_limit: int = 10_000  # records kept for the hub; the oldest are dropped past it
    hub_mdns_interfaces: tuple[str, ...] = ()  # IPv4 addresses to find the hub on; (): all
    # [carbon]: the site's grid intensity, a constant or an hourly CSV series (None: unset)
    carbon_intensity_g_per_kwh: float | None = None
    carbon_series: Path | None = None
    carbon_column: str = ""  # the series file's value column ("": the second of two)
    carbon_region: str = ""  # a label for the grid region, e.g. "CISO"
    carbon_update_s: float = 60.0  # seconds between intensity updates to the placer
    # [predictor] (docs/learning.md): the fleet's load predictor on this box
    predictor_personalise: bool = True  # fit each pulled model to this box (Ditto) first
    # [mesh] (docs/mesh.md): peers on the LAN found by mDNS, trusted by the fleet key
    mesh_fleet_key: str = dataclasses.field(default="", repr=False)  # a secret: never logged
    mesh_fleet_key_file: str = ""  # a file holding the fleet key instead
    mesh_enabled: bool | None = None  # None: on exactly when a fleet key is configured
    mesh_agent_id: str = ""  # "": generated once, kept in <data_dir>/mesh_id
    mesh_address: str = ""  # the address peers reach our API on ("": [api] host)
    mesh_interfaces: tuple[str, ...] = ()  # addresses mDNS binds to (empty: the address)
    mesh_heartbeat_s: float = 2.0
    mesh_peer_cap: int = 64
    mesh_bid_above_s: float = 1.0  # ask peers for bids when the local estimate exceeds this
    mesh_bid_rate_per_s: float = 20.0  # most bid messages a second this agent sends
    mesh_link_bytes_per_s: float = 125e6  # link speed assumed for a task's input (1 Gbit/s)
    mesh_lease_min_s: float = 5.0  # shortest lease of a forwarded task
    mesh_lease_factor: float = 4.0  # a forwarded task's lease: max(min, factor * estimate)
    mesh_lease_grace_s: float = 1.0  # the origin waits this past a lease before giving up

    @property
    def mesh_on(self) -> bool:
        """Return whether the agent joins the mesh (default: when a fleet key is set)."""
        if self.mesh_enabled is not None:
            return self.mesh_enabled
        return bool(self.mesh_fleet_key or self.mesh_fleet_key_file)

    @property
    def auth_on(self) -> bool:
        """Return whether /v1 needs the API token (``auth``; "auto": off on loopback only)."""
        if self.auth != "auto":
            return self.auth == "token"
        return not loopback(self.host)

    @property
    def token_path(self) -> Path:
        """Return the file holding the API token (``auth_token_file``, else in data_dir)."""
        return self.auth_token_file or self.data_dir / DEFAULT_TOKEN_FILE

    @property
    def db_path(self) -> Path:
        """Return the SQLite database file."""
        return self.data_dir / "agent.db"

    @property
    def state_path(self) -> Path:
        """Return the file where a running agent records its pid and address."""
        return self.data_dir / "agent.json"

    @property
    def url(self) -> str:
        """Return the agent's base URL as configured."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def replace(self, **changes: Any) -> AgentConfig:
        """Return a copy with ``changes`` applied and validated (None values are ignored)."""
        fields = {k: v for k, v in changes.items() if v is not None}
        return validated(dataclasses.replace(self, **fields), "override")
