"""Latency-first against the clairvoyant oracle, one seed at a time, and over many seeds.

At 80% load a deadline scenario is critically loaded: a backlog built by a few early
decisions may stay for the whole run, so latency-first / oracle (ratio of mean latencies)
on one seed swings by tenths between seeds (docs/simulator.md, session 8). This module is
the one implementation of that per-seed figure: ``bench_sim_slo.py`` reports it over a
range of seeds beside its seed-1 figure, and ``tools/lat_first_gap.py --seeds`` prints it.
The figure for one seed is computed exactly as the benchmark's single run computes its own
(the same chooser, the same fleet state, the same ``deadline_summary`` means).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from cloud_hub.simulator.engine import Chooser, FleetState, simulate
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.oracle import ClairvoyantOracle
from cloud_hub.simulator.slo_agents import SloAgentChooser
from cloud_hub.simulator.slo_metrics import deadline_summary
from cloud_hub.simulator.slo_scenario import CLASSES, Scenario
from cloud_hub.simulator.truth import TaskType
from edge_agent.placement import Policy

#: a scenario builder: (load, tasks, seed) -> Scenario (``bench_sim_slo.SCENARIOS``' values)
Build = Callable[[float, int, int], Scenario]
C = TypeVar("C", bound=SloAgentChooser)


def scenario_memory(sc: Scenario) -> dict[TaskType, float]:
    """Return the memory each task type of ``sc`` needs on a device."""
    return {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}


def policy_chooser(sc: Scenario, policy: Policy, make: type[C]) -> C:
    """Return the benchmark's chooser for ``policy`` on ``sc`` (``make``: its class).

    A policy with a deadline objective has its devices run waiting work
    earliest-deadline-first, as the agent's do; slo-first is told the deadlines.
    """
    return make(
        sc.fleet,
        policy,
        deadline_aware=policy.name == "slo-first",
        candidates=sc.feasible if sc.restricted else None,
        queue_order="edf" if policy.orders_by_deadline else "fifo",
    )


def run_summary(sc: Scenario, chooser: Chooser) -> dict[str, Any]:
    """Run ``chooser`` over ``sc``'s tasks on a fresh fleet; return its ``deadline_summary``."""
    state = FleetState(sc.fleet, sc.truth, sc.feasible, scenario_memory(sc))
    return deadline_summary(sc.tasks, simulate(sc.tasks, state, chooser), sc.classes, list(CLASSES))


def mean_latency_ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    """Return ``a``'s mean latency over ``b``'s (two ``deadline_summary``s), None if unknown."""
    if a is None or b is None or not b["latency_ms"]["mean"]:
        return None
    return float(a["latency_ms"]["mean"] / b["latency_ms"]["mean"])


def lat_first_vs_oracle(sc: Scenario, seed: int, rules: dict[str, Any] | None = None) -> float:
    """Return latency-first (as learned, ``rules`` added) / the oracle's mean latency on ``sc``."""
    name = "latency-first"
    policy = Policy.from_dict({"template": name, "rules": rules}) if rules else None
    policy = policy or Policy.template(name)  # the benchmark's own, decision for decision
    ratio = mean_latency_ratio(
        run_summary(sc, policy_chooser(sc, policy, SloAgentChooser)),
        run_summary(sc, ClairvoyantOracle(seed)),
    )
    if ratio is None:
        raise ValueError(f"seed {seed}: the oracle placed no task; no latency ratio")
    return ratio


def sweep(
    build: Build, load: float, tasks: int, seeds: Sequence[int], rules: dict[str, Any] | None = None
) -> list[float]:
    """Return latency-first / oracle for each seed (on ``build(load, tasks, seed)``)."""
    return [lat_first_vs_oracle(build(load, tasks, seed), seed, rules) for seed in seeds]


def seed_summary(ratios: Sequence[float], seeds: str) -> dict[str, Any]:
    """Return mean, standard error, worst (highest), best, n and the ratios themselves.

    ``seeds``: how the seeds were given ("1-10"), kept as written; ``se`` is None for one seed.
    """
    if not ratios:
        raise ValueError("seed_summary: no ratios")
    n = len(ratios)
    mean = math.fsum(ratios) / n
    se = None
    if n > 1:
        var = math.fsum((r - mean) ** 2 for r in ratios) / (n - 1)
        se = math.sqrt(var / n)
    return {
        "mean": mean,
        "se": se,
        "worst": max(ratios),
        "best": min(ratios),
        "n": n,
        "seeds": seeds,
        "per_seed": list(ratios),
    }


def paired_summary(base: Sequence[float], variant: Sequence[float]) -> dict[str, Any]:
    """Return a variant's figures against a baseline's on the same seeds, paired by seed.

    ``diff``: the mean of variant - base per seed, ``se`` its standard error (None for one
    seed); ``better`` / ``worse``: seeds where the variant is lower / higher (identical
    figures, within 1e-9, count as neither); ``over_1_05``: seeds above 1.05, each side.
    """
    if len(base) != len(variant) or not base:
        raise ValueError("paired_summary: one figure per seed on each side, at least one")
    diffs = [v - b for b, v in zip(base, variant, strict=True)]
    summary = seed_summary(diffs, "")
    return {
        "base_mean": math.fsum(base) / len(base),
        "variant_mean": math.fsum(variant) / len(variant),
        "diff": summary["mean"],
        "se": summary["se"],
        "better": sum(d < -1e-9 for d in diffs),
        "worse": sum(d > 1e-9 for d in diffs),
        "over_1_05": (sum(b > 1.05 for b in base), sum(v > 1.05 for v in variant)),
        "n": len(diffs),
    }


def parse_seeds(text: str) -> list[int]:
    """Return the seeds of "1-10", "1,3,8" or a mix ("1-3,8"); ValueError says what to write."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        try:
            seeds.extend(range(int(low), int(high or low) + 1))
        except ValueError:
            raise ValueError(f"{part!r} is not a seed or a range like 1-10") from None
    if not seeds:
        raise ValueError("no seed given (write e.g. 1-10 or 1,3,8)")
    return seeds
