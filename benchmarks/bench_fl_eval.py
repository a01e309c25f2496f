"""Evaluation on real non-IID traces: FedAvg vs local-only vs centralized vs naive (JSON last)."""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings

with warnings.catch_warnings():  # typer 0.20 (via flwr) uses an API click 8.3 deprecates
    warnings.simplefilter("ignore", DeprecationWarning)
    import flwr.supercore.logger  # noqa: F401

from cloud_hub.learning.evaluation import evaluate
from cloud_hub.learning.serverapp import RoundSettings
from cloud_hub.learning.traces import all_sites
from edge_agent.predictor.features import FeatureSpec


def main() -> None:
    """Print per-site MAE for every method, then the summary as one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kind", default="arrivals", choices=["arrivals", "running"])
    ap.add_argument("--bucket-s", type=float, default=3600.0)
    ap.add_argument("--window", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--local-epochs", type=int, default=1)
    ap.add_argument("--finetune-epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0, help="model initialisation seed")
    args = ap.parse_args()
    logging.disable(logging.INFO)
    sites = all_sites(bucket_s=args.bucket_s, kind=args.kind)
    settings = RoundSettings(
        spec=FeatureSpec(window=args.window, bucket_s=args.bucket_s),
        num_rounds=args.rounds,
        local_epochs=args.local_epochs,
        min_nodes=len(sites),
        seed=args.seed,
    )
    t = time.perf_counter()
    r = evaluate(sites, settings, finetune_epochs=args.finetune_epochs)
    wall = time.perf_counter() - t
    print(f"{'method':16s}" + "".join(f"{s:>15s}" for s in r.sites) + f"{'mean rel':>10s}")
    for m, per in r.mae.items():
        print(f"{m:16s}" + "".join(f"{per[s]:15.3f}" for s in r.sites) + f"{r.rel_mae[m]:10.3f}")
    best = r.best_naive()
    out = {
        "fed_mae": round(r.rel_mae["fedavg"], 4),
        "central_mae": round(r.rel_mae["centralized"], 4),
        "local_only_mae": round(r.rel_mae["local_only"], 4),
        "best_naive_mae": round(r.rel_mae[best], 4),
        "best_naive": best,
        "fed_vs_naive_pct": round(100 * (1 - r.rel_mae["fedavg"] / r.rel_mae[best]), 1),
        "fed_vs_central_pct": round(100 * (r.rel_mae["fedavg"] / r.rel_mae["centralized"] - 1), 1),
        "local_only_sites_won": r.local_only_sites_won(),
        "fed_finetuned_mae": round(r.rel_mae["fedavg_finetuned"], 4),
        "finetuned_local_only_sites_won": r.local_only_sites_won("fedavg_finetuned"),
        "fed_local_mix_mae": round(r.rel_mae["fedavg_local_mix"], 4),
        "mix_local_only_sites_won": r.local_only_sites_won("fedavg_local_mix"),
        "mix_weights": {k: round(v, 2) for k, v in r.mix_weights.items()},
        "fed_ditto_mae": round(r.rel_mae["fedavg_ditto"], 4),
        "ditto_local_only_sites_won": r.local_only_sites_won("fedavg_ditto"),
        "ditto_mu_epochs": {k: [mu, ep] for k, (mu, ep) in r.ditto_choice.items()},
        "finetune_epochs": args.finetune_epochs,
        "sites": len(r.sites),
        "kind": args.kind,
        "bucket_s": args.bucket_s,
        "rounds": args.rounds,
        "seed": args.seed,
        "mae_unit": "mean over sites of MAE / site mean load",
        "wall_s": round(wall, 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
