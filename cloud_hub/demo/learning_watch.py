"""``--learning``: the hub's settings for one training run, and the watch that asks for the
run and prints how it goes (SuperNodes, the registered model, each agent's verdict)."""

from __future__ import annotations

import sys
import time
from typing import Any

from cloud_hub.demo.processes import Child, call, free_port
from edge_agent.predictor.runtime import NOT_ENOUGH_DATA
from edge_agent.predictor.supernode import SUPEREXEC_POLL_ENV

#: The training run ``--learning`` asks for: small buckets so a demo minute is enough data;
#: one round, every agent a node, bounded by the start and round timeouts.
LEARN_BUCKET_S = 2.0


LEARN_RUN_CONFIG = (
    f"window=8 bucket-s={LEARN_BUCKET_S} local-epochs=20 lr=0.05 round-timeout-s=90.0"
)


LEARN_START_TIMEOUT_S = 60.0


#: The run plus every agent's verdict must be in by then (seconds after asking).
LEARN_DEADLINE_S = 240.0


LEARNING_EXTRA = "pip install '.[learning]'"


SUPEREXEC_POLL_S = "0.25"  # Flower's SuperExec polls for work every 1 s by default


def learning_env(n: int) -> dict[str, str]:
    """The hub's settings for one bounded training run with all ``n`` agents as nodes."""
    return {"CLOUD_HUB_LEARNING_PORT": str(free_port()),
            "CLOUD_HUB_LEARNING_EVERY_S": "86400",  # the demo asks for its run
            "CLOUD_HUB_LEARNING_ROUNDS": "1", "CLOUD_HUB_LEARNING_MIN_NODES": str(n),
            "CLOUD_HUB_LEARNING_START_TIMEOUT_S": str(LEARN_START_TIMEOUT_S),
            "CLOUD_HUB_LEARNING_RUN_CONFIG": LEARN_RUN_CONFIG,
            SUPEREXEC_POLL_ENV: SUPEREXEC_POLL_S}  # fmt: skip


class LearningWatch:
    """Asks the hub for one training run at ``at`` and prints how it goes, agent by agent."""

    def __init__(self, hub: Child, agents: list[Child], at: float) -> None:
        self.hub, self.agents, self.at = hub, agents, at
        self.asked_at: float | None = None  # wall clock, to tell our run from older ones
        self.deadline = 0.0
        self.next_poll = 0.0
        self.nodes_shown: list[str] = []
        self.version: int | None = None
        self.ended = False
        self.verdicts: dict[str, tuple[bool, str]] = {}
        self.done = False

    def summary(self) -> list[str]:
        """Return the closing summary's lines: the model trained and each agent's verdict."""
        if self.asked_at is None:
            return ["summary: learning: no training run asked yet"]
        if self.version is None:
            return ["summary: learning: the run did not register a model (see above)"]
        lines = [f"summary: learning: model v{self.version} registered"]
        for name, (accepted, why) in self.verdicts.items():
            lines.append(f"summary: learning: {name} {'accepted' if accepted else 'kept'}: {why}")
        return lines

    def step(self) -> None:
        """Do what is due now (call often; it polls the hub at most once a second)."""
        now = time.monotonic()
        if self.done or now < max(self.at, self.next_poll):
            return
        self.next_poll = now + 1.0
        if self.asked_at is None:
            self.asked_at = time.time()
            self.deadline = now + LEARN_DEADLINE_S
            call(f"{self.hub.url}/v1/learning/runs", "POST", {}, self.hub.admin_token)
            print("learning: asked the hub for a training run; agents start their SuperNodes")
            return
        doc = call(f"{self.hub.url}/v1/learning")
        ours = [r for r in doc["runs"] if r["started_at"] >= self.asked_at - 1.0]
        reports: dict[str, Any] = doc["agents"]
        if ours and not self.ended:
            self._show_run(ours[0], doc, reports)
        if self.ended and not self.done:
            self._show_verdicts(reports)
        if not self.done and now > self.deadline:
            print(f"learning: not finished within {LEARN_DEADLINE_S:g} s; see the logs")
            self.done = True
        sys.stdout.flush()

    def _show_run(self, run: dict[str, Any], doc: dict[str, Any], reports: dict[str, Any]) -> None:
        nodes = sorted(a for a, r in reports.items() if (r.get("supernode") or {}).get("running"))
        if run["status"] == "running":
            if nodes != self.nodes_shown and nodes:
                print(f"learning: SuperNodes running on {', '.join(nodes)} "
                      f"(SuperLink {doc['superlink']})")  # fmt: skip
            self.nodes_shown = nodes
            return
        self.ended = True
        if run["status"] != "completed" or run["model_version"] is None:
            print(f"learning: run {run['run_id']} {run['status']}: {run.get('error')}")
            self.done = True
            return
        self.version = int(run["model_version"])
        model = next(m for m in doc["models"] if m["version"] == self.version)
        m = model["metrics"]
        print(f"learning: run {run['run_id']} completed, {m.get('rounds_completed', 0):g} round, "
              f"{run.get('nodes', 0)} nodes; "
              f"model v{self.version} registered; federated eval rel. MAE "
              f"{m.get('eval_rel_mae', float('nan')):.3f} vs EWMA "
              f"{m.get('ewma_rel_mae', float('nan')):.3f}")  # fmt: skip

    def _show_verdicts(self, reports: dict[str, Any]) -> None:
        final = 0
        for agent in self.agents:
            report = reports.get(agent.name) or {}
            verdict = (report.get("model") or {}).get("last_verdict") or {}
            if verdict.get("version") != self.version:
                continue
            key = (bool(verdict["accepted"]), str(verdict["reason"]))
            waiting = key[1].startswith(NOT_ENOUGH_DATA)
            final += not waiting
            if key == self.verdicts.get(agent.name):
                continue
            self.verdicts[agent.name] = key
            what = "not validated yet" if waiting else ("accepted" if key[0] else "refused")
            print(f"learning: {agent.name:<26} model v{self.version} {what}: {key[1]}")
        if final == len(self.agents):
            print(f"learning: done; the dashboard's learning panel: {self.hub.url}/#learning")
            self.done = True
