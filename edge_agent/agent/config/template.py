"""The commented agent config file ``edge-agent init`` writes: every setting, explained."""

from __future__ import annotations

import json

from edge_agent.agent.config.settings import AgentConfig
from edge_agent.tasks.models_dir import models_dir


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
# the HTTP API listens here: 127.0.0.1 serves this box only; on a LAN address (for mesh
# peers) the API asks for its token (auth below)
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
# who may call /v1 (tasks, model uploads, cancels, ...): "auto" asks for the API token
# exactly when host is not a loopback address, "token" always, "none" never (then anyone who
# reaches the port can submit work and upload models: keep it for a firewalled port or a
# proxy that authenticates). Clients send `Authorization: Bearer <token>`; edge-agent
# commands on this box read the token file themselves. GET /v1/health, the status page's
# own files and the signed /mesh/v1 stay open.
auth = {_q(c.auth)}
# the file holding the token ("": <data_dir>/api_token); made on first start (32 random
# bytes, mode 0600), refused when others may read it
auth_token_file = {_q(c.auth_token_file or "")}

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
# the link speed, in bytes a second, assumed when a peer's bid is weighed against running
# here: a task's input takes input_bytes / link_bytes_per_s to reach the peer
link_bytes_per_s = {c.mesh_link_bytes_per_s}
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
