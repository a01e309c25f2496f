"""Policy what-if simulator: a fleet of boards, a workload, hetmesh policies vs baselines.

    from cloud_hub.simulator import load_fleet, load_workload, run
    doc = run(load_fleet("examples/fleet_edge_mixed.json"),
              load_workload("examples/workload_edge_mix.json"),
              [Policy.template("latency-first")])

Ground truth is an emulation from published per-model latencies (see ``truth``); the
hetmesh policies decide through the same ``Placer`` API as the edge agents.
"""

from __future__ import annotations

from cloud_hub.simulator.errors import SimulationInputError
from cloud_hub.simulator.fleet import Fleet, load_fleet, parse_fleet
from cloud_hub.simulator.runner import run
from cloud_hub.simulator.workload import Task, Workload, load_workload

__all__ = [
    "Fleet",
    "SimulationInputError",
    "Task",
    "Workload",
    "load_fleet",
    "load_workload",
    "parse_fleet",
    "run",
]
