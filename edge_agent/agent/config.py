"""Agent configuration: a frozen dataclass from TOML, then ``EDGE_AGENT_*`` environment overrides.

This is the only module of the agent that reads ``os.environ``. Every setting has a default
that works with no file at all; ``render_default`` writes the commented file ``init`` creates.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.carbon_series import shipped_series
from edge_agent.config_file import toml_settings
from edge_agent.errors import InvalidInput
from edge_agent.tasks.models_dir import models_dir

if TYPE_CHECKING:
    from edge_agent.placement.pools import PoolSpec

ENV_PREFIX = "EDGE_AGENT_"
DEFAULT_PORT = 8470


class ConfigError(InvalidInput):
    """The configuration file or an environment variable is invalid; names which."""


def default_data_dir() -> Path:
    """Return ``~/.local/share/hetmesh`` (the data directory when none is configured)."""
    return Path.home() / ".local" / "share" / "hetmesh"


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
        return _validated(dataclasses.replace(self, **fields), "override")


class _AnyTenant(tuple[str, ...]):
    """The keys of [pools]: tenant names, any of them."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str)


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
    "pools": _AnyTenant(("<tenant>",)),
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
    "batch_size": int,
    "command_allowlist": tuple,
    "telemetry_interval_s": float,
    "emulation_jitter": float,
    "shutdown_grace_s": float,
    "tenant_shares": dict,
    "pools": Mapping,  # {tenant: {cpu_cores, ...}}, parsed by edge_agent.placement.pools
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
    "mesh_lease_min_s": float,
    "mesh_lease_factor": float,
    "mesh_lease_grace_s": float,
}
_AGENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Return ``$EDGE_AGENT_CONFIG``, else ``~/.config/hetmesh/agent.toml``."""
    env = os.environ if env is None else env
    given = env.get(f"{ENV_PREFIX}CONFIG")
    return Path(given).expanduser() if given else Path.home() / ".config" / "hetmesh" / "agent.toml"


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> AgentConfig:
    """Return the config from ``path`` (default: ``default_config_path``, if it exists) + env.

    A ``path`` given explicitly must exist; ConfigError names the file, key and problem.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    file = path if path is not None else default_config_path(env)
    if path is not None or file.is_file():
        values.update(_read_toml(file))
    for name in _KINDS:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = _coerce(name, _from_env(name, raw), f"${ENV_PREFIX}{name.upper()}")
    return _validated(AgentConfig(**values), "config")


def _read_toml(file: Path) -> dict[str, Any]:
    """Return the settings of a TOML file, flattened and type-checked."""
    values: dict[str, Any] = {}
    pools: dict[str, Any] = {}
    for section, key, value in toml_settings(file, SECTIONS, ConfigError):
        if section == "pools":
            pools[key] = value
            continue
        name = f"{section}_{key}" if section in ("hub", "carbon", "mesh", "predictor") else key
        values[name] = _coerce(name, value, f"{file}: [{section}] {key}")
    if pools:
        values["pools"] = _coerce("pools", pools, f"{file}: [pools]")
    return values


def _from_env(name: str, raw: str) -> Any:
    """Return an environment string as the TOML value it stands for."""
    kind = _KINDS[name]
    if name == "pools":  # JSON: {"vision": {"cpu_cores": 4}}
        try:
            return json.loads(raw)
        except ValueError:
            return raw  # _coerce reports it with the variable's name
    if kind is bool:
        flag = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        return flag.get(raw.strip().lower(), raw)
    if kind is tuple:
        return [item.strip() for item in raw.split(",") if item.strip()]
    if kind is Mapping:  # "label=value,label=value"
        items = [item.partition("=") for item in raw.split(",") if item.strip()]
        return {k.strip(): v.strip() for k, _, v in items} if all(s for _, s, _ in items) else raw
    if kind is dict:  # "tenant=weight,tenant=weight"
        pairs = [item.partition("=") for item in raw.split(",") if item.strip()]
        try:
            return {k.strip(): float(v) for k, sep, v in pairs if sep}
        except ValueError:
            return raw  # _coerce reports it with the variable's name
    if kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            return raw  # _coerce reports it with the variable's name
    return raw


def _coerce(name: str, value: Any, where: str) -> Any:
    """Return ``value`` as the setting's type; ConfigError naming ``where`` when it is not."""
    kind = _KINDS[name]
    if name == "pools":
        from edge_agent.placement.pools import parse_pools

        try:
            return parse_pools(value, where)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind is Path or kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        if name == "profile":
            return value or None
        if name == "carbon_series":  # a bare name of a shipped series finds it (see below)
            return shipped_series(Path(value).expanduser()) if value else None
        if kind is Path:
            return _path_or_default(name, value)
        return value
    if kind is dict:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and _is_number(v) and 0 < v < math.inf
            for k, v in value.items()
        ):
            raise ConfigError(f"{where}: expected {{tenant = weight > 0}}, got {value!r}")
        return {k: float(v) for k, v in value.items()}
    if kind is Mapping:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and len(k) + len(v) <= 200
            for k, v in value.items()
        ):
            raise ConfigError(f'{where}: expected {{label = "value"}} strings, got {value!r}')
        return dict(value)
    if kind is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(f"{where}: expected a list of non-empty strings, got {value!r}")
        return tuple(value)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (kind is int and not isinstance(value, int))
    ):
        raise ConfigError(f"{where}: expected {'an integer' if kind is int else 'a number'}")
    return kind(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _path_or_default(name: str, value: str) -> Path:
    """Return ``value`` as a path, the default when it is empty."""
    if not value:
        return default_data_dir() if name == "data_dir" else models_dir()
    return Path(value).expanduser()


def _validated(config: AgentConfig, where: str) -> AgentConfig:
    """Return ``config`` if every setting is in range; ConfigError naming the first that is not."""
    from edge_agent.placement.policy import TEMPLATES

    checks = (
        ("port", 0 <= config.port <= 65535, "must be 0..65535 (0: any free port)"),
        ("max_body_bytes", config.max_body_bytes >= 1024, "must be >= 1024"),
        ("max_connections", 1 <= config.max_connections <= 1_000_000, "must be 1..1000000"),
        ("batch_size", 1 <= config.batch_size <= 100_000, "must be 1..100000"),
        ("policy", config.policy in TEMPLATES, f"must be one of {', '.join(TEMPLATES)}"),
        ("host", bool(config.host), "must not be empty"),
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
    for name, ok, problem in checks:
        if not ok:
            raise ConfigError(f"{where}: {name} {problem}, got {getattr(config, name)!r}")
    for name in ("telemetry_interval_s", "emulation_jitter", "shutdown_grace_s"):
        value = getattr(config, name)
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
    for name in ("header_timeout_s", "body_timeout_s"):
        if not (math.isfinite(getattr(config, name)) and getattr(config, name) > 0):
            raise ConfigError(f"{where}: {name} must be a finite number > 0")
    if not (math.isfinite(config.hub_retry_s) and config.hub_retry_s > 0):
        raise ConfigError(f"{where}: hub_retry_s must be a finite number > 0")
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
    if not (math.isfinite(config.carbon_update_s) and config.carbon_update_s > 0):
        raise ConfigError(f"{where}: [carbon] update_s must be a finite number > 0")
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
    for name in ("mesh_heartbeat_s", "mesh_lease_min_s", "mesh_lease_grace_s"):
        if not (math.isfinite(getattr(config, name)) and getattr(config, name) > 0):
            raise ConfigError(f"{where}: [mesh] {name[5:]} must be a finite number > 0")
    # lease_factor = 0 is allowed: every lease is then lease_min_s, whatever the estimate
    for name in ("mesh_bid_above_s", "mesh_lease_factor", "mesh_bid_rate_per_s"):
        if not (math.isfinite(getattr(config, name)) and getattr(config, name) >= 0):
            raise ConfigError(f"{where}: [mesh] {name[5:]} must be a finite number >= 0")


def render_default(config: AgentConfig | None = None) -> str:
    """Return a commented TOML file holding ``config`` (default: the defaults)."""
    c = config or AgentConfig()
    allow = ", ".join(_q(cmd) for cmd in c.command_allowlist)
    shares = ", ".join(f"{_q(t)} = {w}" for t, w in c.tenant_shares.items())
    labels = ", ".join(f"{_q(k)} = {_q(v)}" for k, v in c.hub_labels.items())
    mesh_ifaces = ", ".join(_q(a) for a in c.mesh_interfaces)
    mesh_on = "" if c.mesh_enabled is None else f"enabled = {str(c.mesh_enabled).lower()}\n"
    return f"""\
# hetmesh edge agent configuration. Every key is optional; EDGE_AGENT_<KEY> environment
# variables (e.g. EDGE_AGENT_PORT=9000, EDGE_AGENT_COMMAND_ALLOWLIST=/usr/bin/true) override it.

[agent]
# where the SQLite database (agent.db) and the running agent's agent.json live
data_dir = {_q(c.data_dir)}
# "" probes this machine; a firmware profile id (see `edge-agent profiles`) emulates that board
profile = {_q(c.profile or "")}
# placement policy template: {", ".join(_templates())}
policy = {_q(c.policy)}
# models submitted by name are looked up here ("": the packaged examples); paths outside
# it are refused
model_dir = {_q("" if c.model_dir == models_dir() else c.model_dir)}
# executables that command tasks may run (absolute paths); empty: no command tasks
command_allowlist = [{allow}]

[api]
# the HTTP API listens here; keep 127.0.0.1 unless a firewall or proxy guards the port
host = {_q(c.host)}
port = {c.port}
# largest request body accepted (bytes), model uploads included; counted as it arrives
max_body_bytes = {c.max_body_bytes}
# seconds a client may take to send a request head (from connecting, or from the first
# byte of a following request); slower connections are closed
header_timeout_s = {c.header_timeout_s}
# seconds a client may take to send a request body (raise it for large model uploads
# over slow links); slower requests are answered 408
body_timeout_s = {c.body_timeout_s}
# most open client connections; when full, the oldest one not inside a request is closed
# to make room (503 only when all are busy). The agent raises its open-file limit to fit.
max_connections = {c.max_connections}

[scheduler]
# most tasks placed by one kernel call
batch_size = {c.batch_size}
# sigma of the lognormal jitter on emulated service times
emulation_jitter = {c.emulation_jitter}
# seconds a graceful stop waits for running tasks (the rest resume after restart)
shutdown_grace_s = {c.shutdown_grace_s}
# seconds between telemetry samples (0: no periodic sampling)
telemetry_interval_s = {c.telemetry_interval_s}
# weighted fair share between tenants of one priority class (unnamed tenants weigh 1),
# e.g. {{ vision = 3, batch = 1 }}
tenant_shares = {{ {shares} }}

# resource pools, one table per tenant (a policy's "pools" rule replaces a tenant's table):
# what the tenant's placed and running work may hold at once. cpu_cores: tasks on CPU
# devices (one core each); memory_mb: their memory needs; accelerator_share: fraction of the
# accelerators' time; borrow: take other pools' idle quota, given back when they need it.
# Tenants without a table are not limited. e.g.
# [pools.vision]
# cpu_cores = 4
# memory_mb = 2048
# accelerator_share = 0.5
# borrow = false
{_pool_tables(c)}
[hub]
# the cloud hub's URL ("": no hub; the agent works on its own; "mdns": find it over mDNS,
# used only once it proves it holds the join token). Agents enrol with the fleet's join
# token (or set $EDGE_AGENT_HUB_JOIN_TOKEN and leave it out of this file)
url = {_q(c.hub_url)}
join_token = {_q(c.hub_join_token)}
# this agent's id on the hub ("": <hostname>-<profile>); stable across restarts
agent_id = {_q(c.hub_agent_id)}
# labels for policy rollout selectors, e.g. {{ site = "lab" }}
labels = {{ {labels} }}
# seconds between attempts while the hub is unreachable
retry_s = {c.hub_retry_s}
# records kept for the hub while it is away; past this the oldest are dropped (and counted)
outbox_limit = {c.hub_outbox_limit}
# with url = "mdns": IPv4 addresses of the interfaces to look for the hub on ([]: all)
mdns_interfaces = [{", ".join(_q(a) for a in c.hub_mdns_interfaces)}]

[carbon]
# the site's grid carbon intensity: a constant (gCO2/kWh) or an hourly series, a CSV file of
# "timestamp,g_per_kwh" rows (real 2022 ones ship with the agent: series = "CISO_hourly_2022.csv",
# also ERCO, NYIS, BPAT, found by that bare name); a series
# is also the forecast deferrable work is scheduled against. Unset: the board profile's value
{_carbon_lines(c)}
region = {_q(c.carbon_region)}
# seconds between intensity updates to the placer
update_s = {c.carbon_update_s}

[predictor]
# with a hub that ships load predictors: fit each new model to this box's own telemetry
# (Ditto) and keep whichever of it and the fleet's model forecasts this box better
personalise = {str(c.predictor_personalise).lower()}

[mesh]
# agents of one fleet share a fleet key (>= 16 characters; `edge-agent init --new-fleet-key`
# makes one). It signs every agent-to-agent request; mDNS carries only its fingerprint.
# Keep it out of this file with fleet_key_file or $EDGE_AGENT_MESH_FLEET_KEY. The mesh is on
# exactly when a key is set (enabled = false turns it off anyway).
fleet_key = {_q(c.mesh_fleet_key)}
fleet_key_file = {_q(c.mesh_fleet_key_file)}
{mesh_on}# this agent's id among its peers ("": generated once and kept in <data_dir>/mesh_id)
agent_id = {_q(c.mesh_agent_id)}
# the address peers reach this agent's API on ("": [api] host) and the addresses mDNS binds
# to ([]: that address). On a LAN set address to this box's LAN address, [api] host to it
address = {_q(c.mesh_address)}
interfaces = [{mesh_ifaces}]
# seconds between signed heartbeats to each peer; most peers kept
heartbeat_s = {c.mesh_heartbeat_s}
peer_cap = {c.mesh_peer_cap}
# ask every peer for bids when this agent's own estimate exceeds this many seconds (a task
# no device here can run is always offered to peers); below it, a peer is asked when its
# fresh signed summary (kinds, formats, queue, per-class estimates) beats the estimate here
# by the policy's offload_margin, round trip and input transfer included
bid_above_s = {c.mesh_bid_above_s}
# most bid requests a second this agent sends (a token bucket, bursts of twice that); 0:
# peers are asked only for tasks no device here can run (and the hub's moves)
bid_rate_per_s = {c.mesh_bid_rate_per_s}
# a forwarded task's lease is max(lease_min_s, lease_factor x its estimate) seconds (factor 0:
# always lease_min_s): a peer abandons it past its lease, and the origin, lease_grace_s
# seconds later, places it again
lease_min_s = {c.mesh_lease_min_s}
lease_factor = {c.mesh_lease_factor}
lease_grace_s = {c.mesh_lease_grace_s}
"""


def _pool_tables(c: AgentConfig) -> str:
    """Return the configured pools as [pools.TENANT] tables (empty when there are none)."""
    tables = []
    for tenant, spec in c.pools.items():
        lines = [f"[pools.{_q(tenant)}]"]
        lines += [f"{k} = {str(v).lower()}" for k, v in spec.to_dict().items()]
        tables.append("\n".join(lines) + "\n")
    return "\n".join(tables)


def _carbon_lines(c: AgentConfig) -> str:
    """Return the [carbon] intensity / series / column lines (commented out when unset)."""
    g = c.carbon_intensity_g_per_kwh
    series = "" if c.carbon_series is None else str(c.carbon_series)
    return "\n".join(
        (
            f"intensity_g_per_kwh = {g}" if g is not None else "# intensity_g_per_kwh = 250.0",
            f"series = {_q(series)}",
            "# the value column of a series file with more than two columns",
            f"column = {_q(c.carbon_column)}",
        )
    )


def _q(value: object) -> str:
    """Return ``value`` as a TOML basic string (JSON escapes are valid TOML)."""
    return json.dumps(str(value))


def _templates() -> list[str]:
    from edge_agent.placement.policy import TEMPLATES

    return list(TEMPLATES)
