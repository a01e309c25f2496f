"""A federation on loopback: one SuperLink and N SuperNodes on agent-schema telemetry.

Shared by tests/test_learning_flower_deploy.py and benchmarks/bench_fl_rounds.py: TLS with
SuperNode authentication (``secure``) or insecure, SuperExec polling ``poll_s``, each box with
its own telemetry database and FLWR_HOME. Nothing is started here: ``start()`` does it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from cloud_hub.learning.fleet_gateway import FleetGateway
from cloud_hub.learning.pki import make_node_key, make_tls
from cloud_hub.learning.superlink import SuperLink, SuperLinkConfig
from edge_agent.predictor.supernode import FlowerProcess, SuperNodeConfig, supernode_process
from edge_agent.predictor.supernode import free_loopback_port as free_port
from edge_agent.storage.agent_schema import MIGRATIONS
from edge_agent.storage.db import migrate

T0 = 1_700_000_000.0


def telemetry_db(path: Path, seed: int, minutes: int = 1500) -> Path:
    """An agent database (real schema): one task and one utilization sample a minute, busy in
    an 8-minute cycle (the ClientApp trains on the samples, as the agent forecasts from them)."""
    db = sqlite_utils.Database(path)
    migrate(db, MIGRATIONS)
    rng = random.Random(seed)
    rows = []
    for i in range(minutes):
        busy = 0.5 + 0.4 * math.sin(2 * math.pi * i / 8 + seed) + rng.gauss(0.0, 0.03)
        busy = min(max(busy, 0.02), 0.98)
        rows.append(
            {"ts": T0 + 60 * i + 60 * busy, "kind": "task", "device": "cpu0",
             "task_id": f"t{i}", "latency_s": 60 * busy}
        )  # fmt: skip
        sample = {"ts": T0 + 60 * i + 30, "kind": "sample", "device": "cpu0", "utilization": busy}
        rows.append(sample)
    db.table("telemetry").insert_all(rows)
    db.close()
    return path


@dataclass
class LocalFederation:
    """The SuperLink, the SuperNodes and each box's telemetry file and public key."""

    link: SuperLink
    nodes: list[FlowerProcess]
    dbs: list[Path]
    public_keys: list[Path]

    def start(self) -> None:
        """Start the SuperLink, register the SuperNodes' keys (if secure), start the nodes."""
        self.link.start()
        if self.public_keys:
            self.link.register_supernodes(self.public_keys)
        for node in self.nodes:
            node.start()

    @property
    def processes(self) -> list[FlowerProcess]:
        """Every daemon: the SuperNodes, then the SuperLink."""
        return [*self.nodes, self.link.process]


def local_federation(
    tmp: Path, n_nodes: int, secure: bool, poll_s: float | None = 0.25
) -> LocalFederation:
    """A SuperLink and ``n_nodes`` SuperNodes under ``tmp`` (not started)."""
    tls = make_tls(tmp / "pki", ["127.0.0.1"]) if secure else None
    link = SuperLink(
        SuperLinkConfig(
            tmp / "hub", port=free_port(), tls=tls, supernode_auth=secure, superexec_poll_s=poll_s
        )
    )
    nodes, dbs, keys = [], [], []
    for i in range(n_nodes):
        db = telemetry_db(tmp / f"box{i}.db", seed=i)
        key = make_node_key(tmp / "pki", f"box{i}") if secure else None
        cfg = SuperNodeConfig(
            superlink=link.cfg.address,
            node_config={"telemetry-db": str(db)},
            root_certificates=None if tls is None else tls.ca_cert,
            auth_private_key=None if key is None else key.private,
            runtime_port=free_port(),
            superexec_poll_s=poll_s,
            flwr_home=tmp / f"box{i}-flwr",
        )
        nodes.append(supernode_process(cfg, f"box{i}", tmp / f"box{i}.log"))
        dbs.append(db)
        if key is not None:
            keys.append(key.public)
    return LocalFederation(link, nodes, dbs, keys)


@contextlib.asynccontextmanager
async def gated_superlink(tmp: Path) -> AsyncIterator[tuple[SuperLink, FleetGateway]]:
    """A TLS SuperLink with node authentication and its Fleet gateway, both on loopback."""
    tls = make_tls(tmp / "pki", ["127.0.0.1"])
    link = SuperLink(SuperLinkConfig(tmp / "hub", port=free_port(), tls=tls, supernode_auth=True))
    await asyncio.to_thread(link.start)
    gateway = FleetGateway("127.0.0.1", free_port(), link.cfg.port, tls)
    try:
        await gateway.start()
        yield link, gateway
    finally:
        await gateway.stop()
        await asyncio.to_thread(link.stop)
