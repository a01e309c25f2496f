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
import tempfile
import time
import warnings
from pathlib import Path

import psutil

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from cloud_hub.learning.localfed import local_federation
from cloud_hub.learning.registry import ModelRegistry
from cloud_hub.learning.superlink import RunFailed, SuperLink
from edge_agent.predictor.supernode import FlowerProcess, stop_all, stopped_cleanly

NODES = 3
POLL = 0.25


def family_rss(proc: FlowerProcess) -> int:
    """Resident bytes of a daemon and its children (SuperNode + SuperExec when idle)."""
    total = 0
    for pid in proc.pids():
        with contextlib.suppress(psutil.NoSuchProcess):
            total += psutil.Process(pid).memory_info().rss
    return total


def fleet(tmp: Path, secure: bool) -> tuple[SuperLink, list[FlowerProcess]]:
    """A started SuperLink and NODES started SuperNodes (cloud_hub.learning.localfed)."""
    fed = local_federation(tmp, NODES, secure, poll_s=POLL)
    fed.start()
    return fed.link, fed.nodes


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
