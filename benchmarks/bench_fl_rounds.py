"""Real Flower on loopback: round wall time with three SuperNodes, and a SuperNode killed mid-run.

A SuperLink (TLS and SuperNode authentication unless --insecure) and three SuperNodes, each
training on its own agent SQLite telemetry. Run 1: every node healthy, min-nodes 3. Run 2:
min-nodes 2 and a round timeout; one SuperNode is killed with SIGKILL as soon as it receives
its first train message, and the run must still complete every round. JSON last line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import random
import socket
import tempfile
import time
import warnings
from pathlib import Path

import psutil
import sqlite_utils

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from cloud_hub.learning.pki import make_node_key, make_tls
from cloud_hub.learning.registry import ModelRegistry
from cloud_hub.learning.superlink import RunFailed, SuperLink, SuperLinkConfig
from edge_agent.agent.db import migrate
from edge_agent.agent.schema import MIGRATIONS
from edge_agent.predictor.supernode import (
    FlowerProcess,
    SuperNodeConfig,
    stop_all,
    stopped_cleanly,
    supernode_process,
)

NODES = 3
POLL = 0.25


def free_port() -> int:
    """An ephemeral loopback port that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def telemetry_db(path: Path, seed: int, minutes: int = 1500) -> Path:
    """An agent database (real schema): one task a minute, busy in an 8-minute cycle."""
    db = sqlite_utils.Database(path)
    migrate(db, MIGRATIONS)
    rng = random.Random(seed)
    rows = []
    for i in range(minutes):
        busy = min(max(0.5 + 0.4 * math.sin(i * math.pi / 4 + seed) + rng.gauss(0, 0.03), 0.02), 1)
        rows.append({"ts": 1.7e9 + 60 * i + 60 * busy, "kind": "task", "device": "cpu0",
                     "task_id": f"t{i}", "latency_s": 60 * busy})  # fmt: skip
    db.table("telemetry").insert_all(rows)
    db.close()
    return path


def family_rss(proc: FlowerProcess) -> int:
    """Resident bytes of a daemon and its children (SuperNode + SuperExec when idle)."""
    total = 0
    for pid in proc.pids():
        with contextlib.suppress(psutil.NoSuchProcess):
            total += psutil.Process(pid).memory_info().rss
    return total


def fleet(tmp: Path, secure: bool) -> tuple[SuperLink, list[FlowerProcess]]:
    """A started SuperLink and NODES started SuperNodes."""
    tls = make_tls(tmp / "pki", ["127.0.0.1"]) if secure else None
    link = SuperLink(
        SuperLinkConfig(tmp / "hub", port=free_port(), tls=tls, supernode_auth=secure,
                        superexec_poll_s=POLL)
    )  # fmt: skip
    link.start()
    keys = [make_node_key(tmp / "pki", f"box{i}") for i in range(NODES)] if secure else []
    if keys:
        link.register_supernodes([k.public for k in keys])
    nodes = []
    for i in range(NODES):
        cfg = SuperNodeConfig(
            superlink=link.cfg.address,
            node_config={"telemetry-db": str(telemetry_db(tmp / f"box{i}.db", seed=i))},
            root_certificates=None if tls is None else tls.ca_cert,
            auth_private_key=keys[i].private if keys else None,
            runtime_port=free_port(),
            superexec_poll_s=POLL,
            flwr_home=tmp / f"box{i}-flwr",
        )
        nodes.append(supernode_process(cfg, f"box{i}", tmp / f"box{i}.log"))
        nodes[-1].start()
    return link, nodes


def main() -> None:
    """Run the healthy and the killed-node runs; print figures, then one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--round-timeout-s", type=float, default=20.0)
    ap.add_argument("--insecure", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    base = {"num-rounds": args.rounds, "evaluate-every": args.rounds, "window": 16,
            "start-timeout-s": 60.0}  # fmt: skip
    out: dict[str, object] = {"nodes": NODES, "rounds": args.rounds, "tls": not args.insecure}
    with tempfile.TemporaryDirectory(prefix="bench-fl-") as tmpdir:
        tmp = Path(tmpdir)
        link, nodes = fleet(tmp, secure=not args.insecure)
        reg = ModelRegistry(tmp / "registry")
        try:
            t = time.monotonic()
            link.run({**base, "min-nodes": NODES, "registry-dir": str(reg.root)}, 300.0)
            healthy = reg.latest()
            assert healthy is not None
            out["run_wall_s"] = round(time.monotonic() - t, 2)
            out["round_wall_s"] = round(
                healthy.metrics["train_wall_s"] / healthy.metrics["rounds_completed"], 2
            )
            print(f"healthy run: {out['run_wall_s']} s, {out['round_wall_s']} s/round")
            out["idle_supernode_rss_mb"] = round(family_rss(nodes[0]) / 2**20, 1)

            victim = nodes[-1]
            seen = victim.log_path.read_text(errors="replace").count("Receiving: train")
            t = time.monotonic()
            run_id = link.submit({**base, "min-nodes": NODES - 1,
                                  "round-timeout-s": args.round_timeout_s,
                                  "registry-dir": str(reg.root)})  # fmt: skip
            marker = "Receiving: train"
            deadline = time.monotonic() + 120
            while victim.log_path.read_text(errors="replace").count(marker) <= seen:
                if time.monotonic() > deadline:
                    raise SystemExit("the victim SuperNode never received a train message")
                time.sleep(0.05)
            victim.kill()
            print(f"killed {victim.name} (SIGKILL) {time.monotonic() - t:.1f} s into run {run_id}")
            try:
                link.wait(run_id, 600.0)
                done = reg.latest()
                completed = (
                    done is not None and done.version == 2
                    and done.metrics["rounds_completed"] == args.rounds
                )  # fmt: skip
            except RunFailed as err:
                print(f"killed-node run failed: {err}")
                completed = False
            out["round_with_killed_node_completed"] = completed
            out["killed_run_wall_s"] = round(time.monotonic() - t, 2)
            out["round_timeout_s"] = args.round_timeout_s
            print(f"killed-node run: completed={completed} in {out['killed_run_wall_s']} s")
        finally:
            alive = [n for n in nodes if n.alive()] + [link.process]
            codes = stop_all(alive)
            out["clean_stop"] = all(map(stopped_cleanly, codes))
            if not out["clean_stop"]:
                print("exit codes:", {p.name: c for p, c in zip(alive, codes, strict=True)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
