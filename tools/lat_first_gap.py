"""Where latency-first's gap to the clairvoyant oracle comes from (analysis, not a benchmark).

Run: ``python tools/lat_first_gap.py [--scenario edge-mixed] [--load 0.8] [--seed 1]``,
or ``--seeds 1-10`` (a range or a list) for the sweep below.

Runs ``bench_sim_slo``'s latency-first agent and its oracle on one scenario and prints:

- the ratio of mean latencies per tenth of the run (learning time vs steady state);
- the same with the Placer's corrections set to the truth before the run ("perfect
  learning"), and with the true remaining work pushed into its queues before every
  decision as well ("perfect learning and queues": the oracle's own information);
- the same with only the cold start set to the truth, each pair then learning as usual
  from its first measurement ("true cold start"), and with only the cold estimates that
  were optimistic (or only the pessimistic ones) set to the truth;
- per (task type, device) pair the Placer's final estimate over the true mean.

With ``--burst N [--burst-at K]``: N tasks from task K (0) on arrive at once, and the
oracle and the perfectly learned Placer are each compared per tenth with the oracle on
the unchanged arrivals. This moves work earlier and adds none: by task K+N's own arrival
the same work has been offered as in the unchanged run, so it does not test whether an
excess backlog stays. ``--extra N [--burst-at K]`` does: N more tasks (copies of tasks
K..K+N-1, each with its own noise draw) arrive with task K, every other arrival
unchanged, and the same two are compared per tenth over the original tasks.

With ``--handover K``, whether the state the learned run reaches is kept: latency-first
as learned places tasks 0..K-1, then a fresh Placer told the truth (factors and queues),
or the oracle, places the rest; per tenth against the oracle.

With ``--seeds``, only latency-first / oracle as learned, one figure per seed, with
their mean and worst: at 80% load the figure of one seed swings by tenths with any change
that moves a few early decisions (a backlog built in the first hundreds of tasks may stay
for the whole run), so a change is judged on the mean over many seeds, not on seed 1.
``--charge K`` sets latency-first's ``congestion_charge`` rule (``--charge 0``: the pure
earliest-finish scoring of before session 8, decision for decision).

It reads the simulator's ground truth to *measure* the Placer; the Placer never sees it
in the benchmarks.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_sim_slo as bench

from cloud_hub.simulator import slo_agents, slo_sweep
from cloud_hub.simulator.engine import FleetState, Job, simulate
from cloud_hub.simulator.oracle import ClairvoyantOracle
from cloud_hub.simulator.slo_scenario import Scenario
from cloud_hub.simulator.truth import GroundTruth
from cloud_hub.simulator.workload import Task
from edge_agent.placement import Policy


class Agent(slo_agents.SloAgentChooser):
    """Latency-first; optionally told the true remaining work before each decision."""

    true_queues = False

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        if self.true_queues:
            self.placer.update_live_many(
                queued_s=[max(0.0, f - now) for f in state.free_at]  # the oracle's view
            )
        return super().choose(task, now, state)


_memory = slo_sweep.scenario_memory

#: ``--charge``: latency-first's congestion charge (None: the template's; 0: off, as before)
CHARGE: float | None = None


def agent(sc: Scenario) -> Agent:
    rules = {} if CHARGE is None else {"congestion_charge": CHARGE}
    policy = Policy.from_dict({"template": "latency-first", "rules": rules})
    return slo_sweep.policy_chooser(sc, policy, Agent)


def true_mean(sc: Scenario, task: Task, dev: int) -> float:
    return sc.truth.base[(task.model, task.precision)][dev] * math.exp(sc.truth.sigma**2 / 2)


def set_true_corrections(a: Agent, sc: Scenario) -> None:
    """Give the Placer each pair's true factor (as if learned perfectly), no exploration."""
    set_true_cold_start(a, sc)
    a.placer.exploration.enabled = False
    for pair in a.placer._samples:
        a.placer._samples[pair] = 1_000_000  # a long average


#: ``set_true_cold_start``'s ``source``: the kinds of cold estimate, by their label's start
SOURCES = {
    "published": "published ",  # at the task's precision ("published int8 (measured)")
    "other-precision": "published, other precision",
    "calibrated": "roofline calibrated on",
    "roofline": "roofline",  # the bare roofline (exactly this label)
}


def cold_source(label: str) -> str:
    """Return the kind of a cold estimate's label (a ``SOURCES`` key), or "other"."""
    if label == SOURCES["roofline"]:
        return "roofline"
    for kind in ("other-precision", "published", "calibrated"):
        if label.startswith(SOURCES[kind]):
            return kind
    return "other"


def cold_pairs(a: Agent, sc: Scenario) -> Iterator[tuple[Task, int, int, float, str]]:
    """Yield each (first task of a type, device, class, true mean / cold estimate, label).

    The ratio is above 1 where the cold estimate is optimistic; read through ``preview``,
    which registers the class (its priors and pooling) as the first decision would. Lazily,
    pair by pair: what the caller sets before the next is seen by it (as in a run).
    """
    p = a.placer
    for tt in sc.truth.types:
        first = next(t for t in sc.tasks if (t.model, t.precision) == tt)
        prepared = a._contract(first, False)
        for dev in sc.feasible[tt]:
            d = p.preview(prepared, candidates=(p.device_ids[dev],))
            ratio = true_mean(sc, first, dev) * first.work / d.service_s
            label = d.sources[dev] if d.sources else SOURCES["roofline"]
            yield first, dev, d.task_class_index, ratio, label


def set_true_cold_start(
    a: Agent,
    sc: Scenario,
    which: str = "all",
    source: str | None = None,
    *,
    explored_only: bool = False,
) -> None:
    """Start the pairs' corrections at the truth and let them learn as usual.

    ``which``: "all", "optimistic" (only the pairs whose cold estimate is below the true
    mean) or "pessimistic" (only those above it); ``source``: only the pairs whose cold
    estimate is of that kind (a ``SOURCES`` key). A pair so set counts as measured once.
    ``explored_only``: those pairs are only marked explored (never probed), their
    estimates and pessimistic bounds (``explore.bound_rows``) left as they are.
    """
    p = a.placer
    for _first, dev, cls, ratio, label in cold_pairs(a, sc):
        kind_ok = source is None or cold_source(label) == source
        if kind_ok and (which == "all" or (ratio > 1.0) == (which == "optimistic")):
            if explored_only:
                p.exploration._explored(cls, dev)
                continue
            p._ws.corrections[cls][dev] *= ratio
            p._samples[(cls, dev)] = 1
            p.exploration.tried(cls, dev)


def ratio_by_tenth(sc: Scenario, a: Agent, oracle: np.ndarray) -> tuple[float, list[float]]:
    out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, _memory(sc)), a)
    lat = np.array(out.latency_s)
    return float(lat.mean() / oracle.mean()), by_tenth(lat, oracle)


def by_tenth(lat: np.ndarray, oracle: np.ndarray) -> list[float]:
    """Return the ratio of mean latencies over each tenth of the run."""
    cuts = [i * len(lat) // 10 for i in range(11)]
    return [float(lat[a:b].mean() / oracle[a:b].mean()) for a, b in itertools.pairwise(cuts)]


def burst(sc: Scenario, seed: int, n: int, oracle: np.ndarray, at: int = 0) -> None:
    """Print, per tenth, the oracle and the perfect Placer with tasks ``at``..``at+n`` at once."""
    t0 = sc.tasks[at].t
    tasks = [dataclasses.replace(t, t=t0) if at <= t.index < at + n else t for t in sc.tasks]
    _compare(sc, seed, tasks, sc.truth, oracle, f"burst {n} at task {at}")


def extra(sc: Scenario, seed: int, n: int, oracle: np.ndarray, at: int = 0) -> None:
    """Print, per tenth, the oracle and the perfect Placer given ``n`` more tasks at task ``at``.

    The added tasks are copies of tasks ``at``..``at+n-1`` (indices after the run's), each
    with its own noise draw: the truth is rebuilt for the longer run from the same seed,
    which leaves every original task's draws as they were (checked).
    """
    t0, count = sc.tasks[at].t, len(sc.tasks)
    truth = GroundTruth(sc.fleet, sc.truth.types, count + n, sc.truth.sigma, seed)
    if not np.array_equal(truth._noise[:count], sc.truth._noise) or truth.base != sc.truth.base:
        raise SystemExit("--extra: the scenario's truth is not GroundTruth(seed); cannot extend")
    added = [
        dataclasses.replace(t, t=t0, index=count + i) for i, t in enumerate(sc.tasks[at : at + n])
    ]
    _compare(sc, seed, sc.tasks + added, truth, oracle, f"{n} extra at task {at}")


def _compare(
    sc: Scenario, seed: int, tasks: list[Task], truth: GroundTruth, oracle: np.ndarray, what: str
) -> None:
    """Print, per tenth of the original tasks, the oracle and the perfect Placer on ``tasks``."""
    perfect = agent(sc)
    set_true_corrections(perfect, sc)
    for name, chooser in (("oracle", ClairvoyantOracle(seed)), ("perfect learning", perfect)):
        state = FleetState(sc.fleet, truth, sc.feasible, _memory(sc))
        lat = np.array(simulate(tasks, state, chooser).latency_s)[: len(oracle)]
        shown = " ".join(f"{r:.3f}" for r in by_tenth(lat, oracle))
        print(f"{what}, {name:<18} {lat.mean() / oracle.mean():.4f}  by tenth: {shown}")


class Handover:
    """Latency-first as learned until task ``at``, then ``after`` (each job fed back to its own)."""

    name = "handover"

    def __init__(self, first: Agent, after: Agent | ClairvoyantOracle, at: int) -> None:
        self.first, self.after, self.at = first, after, at
        self.by: dict[int, Agent | ClairvoyantOracle] = {}

    def choose(self, task: Task, now: float, state: FleetState) -> int | None:
        chooser = self.first if task.index < self.at else self.after
        self.by[task.index] = chooser
        return chooser.choose(task, now, state)

    def job_started(self, job: Job) -> None:
        chooser = self.by[job.task.index]
        if isinstance(chooser, Agent):
            chooser.job_started(job)

    def finished(self, job: Job, now: float) -> None:
        self.by.pop(job.task.index).finished(job, now)


def handover(sc: Scenario, seed: int, at: int, oracle: np.ndarray) -> None:
    """Print, per tenth, the learned run handed at task ``at`` to a fresh true Placer / oracle."""
    fresh = agent(sc)
    set_true_corrections(fresh, sc)
    fresh.true_queues = True
    for name, after in (("a fresh true Placer", fresh), ("the oracle", ClairvoyantOracle(seed))):
        state = FleetState(sc.fleet, sc.truth, sc.feasible, _memory(sc))
        lat = np.array(simulate(sc.tasks, state, Handover(agent(sc), after, at)).latency_s)
        shown = " ".join(f"{r:.3f}" for r in by_tenth(lat, oracle))
        print(f"from task {at} {name:<20} {lat.mean() / oracle.mean():.4f}  by tenth: {shown}")


def parse_seeds(text: str) -> list[int]:
    """Return the seeds of "1-10", "1,3,8" or a mix ("1-3,8")."""
    try:
        return slo_sweep.parse_seeds(text)
    except ValueError as exc:
        raise SystemExit(f"--seeds: {exc}") from None


def sweep(scenario: str, load: float, tasks: int, seeds: list[int]) -> list[float]:
    """Return latency-first / oracle (mean latency, as learned) for each seed."""
    rules = None if CHARGE is None else {"congestion_charge": CHARGE}
    return slo_sweep.sweep(bench.SCENARIOS[scenario], load, tasks, seeds, rules)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="edge-mixed", choices=list(bench.SCENARIOS))
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=6000)
    parser.add_argument("--seeds", help="sweep these seeds (1-10, 1,3,8): ratios only")
    parser.add_argument("--burst", type=int, help="only: N tasks arrive at once (see --burst-at)")
    parser.add_argument("--extra", type=int, help="only: N more tasks arrive at once (--burst-at)")
    parser.add_argument("--burst-at", type=int, default=0, help="the burst's first task (0)")
    parser.add_argument("--handover", type=int, help="only: from task K on, a true chooser")
    parser.add_argument(
        "--charge", type=float, help="latency-first's congestion_charge rule (0: off; default: 1)"
    )
    args = parser.parse_args()
    global CHARGE
    CHARGE = args.charge
    if args.seeds:
        ratios = sweep(args.scenario, args.load, args.tasks, parse_seeds(args.seeds))
        print(f"{args.scenario} at {args.load:.0%}: " + " ".join(f"{r:.3f}" for r in ratios))
        print(f"mean {np.mean(ratios):.4f}  worst {max(ratios):.4f}  seeds {len(ratios)}")
        return
    sc = bench.SCENARIOS[args.scenario](args.load, args.tasks, args.seed)
    state = FleetState(sc.fleet, sc.truth, sc.feasible, _memory(sc))
    oracle = np.array(simulate(sc.tasks, state, ClairvoyantOracle(args.seed)).latency_s)
    if args.burst:
        burst(sc, args.seed, args.burst, oracle, args.burst_at)
        return
    if args.extra:
        extra(sc, args.seed, args.extra, oracle, args.burst_at)
        return
    if args.handover is not None:
        handover(sc, args.seed, args.handover, oracle)
        return
    plain = agent(sc)
    runs = {"as learned": plain}
    perfect = runs["perfect learning"] = agent(sc)
    set_true_corrections(perfect, sc)
    both = runs["perfect learning and queues"] = agent(sc)
    set_true_corrections(both, sc)
    both.true_queues = True
    for which, name in (
        ("all", "true cold start"),
        ("optimistic", "optimistic cold fixed"),
        ("pessimistic", "pessimistic cold fixed"),
    ):
        runs[name] = agent(sc)
        set_true_cold_start(runs[name], sc, which)
    for name, a in runs.items():
        total, tenths = ratio_by_tenth(sc, a, oracle)
        print(f"{name:<28} {total:.4f}  by tenth: " + " ".join(f"{r:.3f}" for r in tenths))
    print("pair: final estimate / true mean (learned run)")
    p = plain.placer
    seen: set[tuple[str, str]] = set()
    for task in sc.tasks:
        tt = (task.model, task.precision)
        if tt in seen:
            continue
        seen.add(tt)
        for dev in sc.feasible[tt]:
            d = p.preview(plain._contract(task, False), candidates=(p.device_ids[dev],))
            est = d.service_s / (true_mean(sc, task, dev) * task.work)
            source = d.sources[dev] if d.sources else "roofline"
            print(f"  {tt[0]:>14} {p.device_ids[dev]:<14} {est:6.3f}  {source}")


if __name__ == "__main__":
    main()
