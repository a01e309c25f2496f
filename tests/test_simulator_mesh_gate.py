"""The simulator's multi-site mesh under the agent's bid gate (``SummarySites``)."""

from __future__ import annotations

from cloud_hub.simulator.engine import FleetState, simulate
from cloud_hub.simulator.mesh_sites import MeshSites
from cloud_hub.simulator.mesh_summaries import SummarySites
from cloud_hub.simulator.models import model_info
from cloud_hub.simulator.slo_scenario import published_scenario
from edge_agent.placement import Policy


def run(rule: str, rate: float = 1e6) -> tuple[MeshSites, list[int], float]:
    sc = published_scenario(0.5, 300, seed=6)
    memory = {tt: model_info(tt[0]).contract(tt[1]).memory_needed() for tt in sc.truth.types}
    policy = Policy.template("latency-first")
    if rule == "summary":
        span = max(t.t for t in sc.tasks) - min(t.t for t in sc.tasks)
        sites: MeshSites = SummarySites(
            sc.fleet, policy, sc.feasible, heartbeat_s=span / 20, bid_rate_per_s=rate
        )
    else:
        sites = MeshSites(sc.fleet, policy, rule, sc.feasible)
    out = simulate(sc.tasks, FleetState(sc.fleet, sc.truth, sc.feasible, memory), sites)
    span = max(t.t for t in sc.tasks) - min(t.t for t in sc.tasks)
    return sites, out.device, span


def test_the_gate_forwards_on_summaries_with_fewer_bids_than_asking_always() -> None:
    gated, devices, _ = run("summary")
    always, _, _ = run("always")
    assert all(d >= 0 for d in devices)  # a task its own site cannot run is still placed
    assert isinstance(gated, SummarySites) and gated.summaries_published > 20
    assert gated.forwarded > 0 and gated.messages < always.messages / 2


def test_the_bid_budget_bounds_each_sites_optional_bids() -> None:
    free, _, _ = run("summary")
    tight, devices, span = run("summary", rate=5.0)
    assert isinstance(tight, SummarySites) and tight.rate_limited > 0
    assert sum(tight.sent_by_site) < sum(free.sent_by_site)
    assert all(d >= 0 for d in devices)
    for site, sent in enumerate(tight.sent_by_site):
        necessary = tight.necessary_by_site[site]  # borrowed: the agent waits for these
        assert sent - necessary <= 2 * 5.0 + 5.0 * span + 1e-9
