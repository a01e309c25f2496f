"""``cloud-hub learning runs / run RUN / models``: the hub's federated learning, from its API.

Runs by their Flower id (a string) or a unique prefix of it, as git takes commits; each run's
nodes are those that took part (replies per round, from Flower's record of the run); model
error is the relative MAE (MAE ÷ mean observed load), the one unit hub and agents report.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.parse
from typing import Any

from cloud_hub.hub.cli import _base_url, _client, request
from edge_agent.clikit import CommandLine, columns


def _when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _replies(run: dict[str, Any]) -> str:
    """Each round's train/evaluate results, e.g. ``2/2 · 2/1``."""
    return " · ".join(f"{r['train']}/{r['evaluate']}" for r in run.get("rounds") or []) or "-"


def _num(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "-"


def _options(parser: argparse.ArgumentParser) -> None:
    _client(parser)
    parser.add_argument("--json", action="store_true", help="print the hub's JSON answer")


def _run_options(parser: argparse.ArgumentParser) -> None:
    _options(parser)
    parser.add_argument("run_id", metavar="RUN", help="a run id or a unique prefix (4+)")


def _runs(args: argparse.Namespace) -> int:
    """List the hub's recent training runs, newest first."""
    runs = request(_base_url(args), "GET", "/v1/learning")["runs"]
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    rows = [("RUN", "STARTED", "STATUS", "NODES", "REPLIES/ROUND", "MODEL", "ERROR")]
    for r in reversed(runs):
        model = "-" if r["model_version"] is None else f"v{r['model_version']}"
        rows.append(
            (
                r["run_id"] or "-",
                _when(r["started_at"]),
                r["status"],
                str(r["nodes"]),
                _replies(r),
                model,
                r.get("error") or "",
            )
        )
    print("\n".join(columns(rows, right={3})))
    return 0


def _run(args: argparse.Namespace) -> int:
    """Show one training run: its nodes and each round's replies."""
    path = f"/v1/learning/runs/{urllib.parse.quote(args.run_id, safe='')}"
    run = request(_base_url(args), "GET", path)["run"]
    if args.json:
        print(json.dumps(run, indent=2))
        return 0
    model = "no model" if run["model_version"] is None else f"model v{run['model_version']}"
    print(f"run {run['run_id']}: {run['status']}, {run['nodes']} nodes took part, {model}")
    print(f"started {_when(run['started_at'])}, ended {_when(run['ended_at'])}")
    if run.get("error"):
        print(f"error: {run['error']}")
    rows = [("ROUND", "TRAIN", "FAILED", "EVALUATE", "FAILED")]
    for r in run.get("rounds") or []:
        rows.append(
            (
                str(r["round"]),
                str(r["train"]),
                str(r["train_failures"]),
                str(r["evaluate"]),
                str(r["evaluate_failures"]),
            )
        )
    print("\n".join(columns(rows, right={0, 1, 2, 3, 4})))
    return 0


def _models(args: argparse.Namespace) -> int:
    """List the registered model versions with their federated evaluation (rel. MAE)."""
    models = request(_base_url(args), "GET", "/v1/models")["models"]
    if args.json:
        print(json.dumps(models, indent=2))
        return 0
    rows = [("VERSION", "ADDED", "ROUNDS", "REL. MAE", "EWMA REL. MAE", "SHA256")]
    for m in reversed(models):
        k = m["metrics"]
        rows.append(
            (
                f"v{m['version']}",
                _when(m["added_at"]),
                f"{k.get('rounds_completed', 0):g}",
                _num(k.get("eval_rel_mae")),
                _num(k.get("ewma_rel_mae")),
                m["sha256"][:12],
            )
        )
    print("\n".join(columns(rows, right={2, 3, 4})))
    print("rel. MAE: MAE ÷ mean observed load (0.10 = off by 10 % of the load)")
    return 0


def register(cli: CommandLine) -> None:
    """Add ``learning runs``, ``learning run RUN`` and ``learning models``."""
    cli.group("learning", "the hub's federated learning runs and load models")
    cli.command("learning runs", "list the hub's recent training runs", _options)(_runs)
    cli.command("learning run", "show one training run (id or unique prefix)", _run_options)(_run)
    cli.command("learning models", "list the registered load models", _options)(_models)
