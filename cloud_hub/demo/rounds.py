"""The mixed workload, submitted in rounds, and what became of it."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cloud_hub.demo.fleet import named
from cloud_hub.demo.processes import Child, call

#: One round of the mixed workload: the example models plus opaque contracts.
WORKLOAD: tuple[dict[str, Any], ...] = (
    {"model": "tiny_cnn_int8", "priority": 1, "tenant": "vision",
     "requirements": {"max_latency_s": 0.05}},
    {"model": "tiny_cnn_fp32", "tenant": "vision"},
    {"model": "mlp_fp32", "tenant": "batch"},
    {"model": "tiny_attention_fp32", "requirements": {"max_latency_s": 0.02}},
    {"task_class": "yolov8n-detect", "priority": 2, "tenant": "traffic",
     "semantics": {"gflops": 8.7, "param_bytes": 3.2e6, "precision": "int8"},
     "requirements": {"max_latency_s": 0.1}},
    {"task_class": "resnet50-classify", "tenant": "retail",
     "semantics": {"gflops": 8.2, "param_bytes": 25.6e6, "precision": "int8"},
     "requirements": {"max_latency_s": 0.2}},
    {"task_class": "batch-embed", "tenant": "batch", "semantics": {"gflops": 2.0}},
)  # fmt: skip


def submit_round(agents: list[Child], counter: Iterator[int]) -> None:
    for agent in agents:
        for contract in WORKLOAD:
            label = str(contract.get("model") or contract["task_class"])
            task = call(f"{agent.url}/v1/tasks", "POST", contract)["task"]
            agent.pending[task["id"]] = f"{label}#{next(counter)}"


@dataclass
class Tally:
    """What became of the submitted work: printed per task (``verbose``) or per round."""

    agents: list[Child]
    verbose: bool = False
    rounds: int = 0
    #: (agent, device) -> tasks done there since the start / since the last round line
    ran: Counter[tuple[str, str]] = field(default_factory=Counter)
    fresh: Counter[str] = field(default_factory=Counter)
    failed: dict[str, str] = field(default_factory=dict)  # task id -> "label on agent: why"
    offloads: list[str] = field(default_factory=list)  # "label from origin: ran on ...; chain"
    fresh_other: Counter[str] = field(default_factory=Counter)  # "offloaded", "failed"

    def collect(self) -> int:
        """Record (and, verbose, print) the tasks that finished since the last call."""
        shown = 0
        for agent in self.agents:
            if not agent.pending:
                continue
            for task in call(f"{agent.url}/v1/tasks?limit=1000")["tasks"]:
                label = agent.pending.get(task["id"])
                if label is None or task["state"] not in ("done", "failed", "cancelled"):
                    continue
                del agent.pending[task["id"]]
                shown += 1
                self._record(agent, label, task)
        sys.stdout.flush()
        return shown

    def _record(self, agent: Child, label: str, task: dict[str, Any]) -> None:
        head = f"{task['id'][:8]}  {label:<24} {agent.name:<26}"
        if task["state"] != "done":
            why = str(task.get("error") or "").removeprefix("not placed: ")
            self.failed[task["id"]] = f"{label} on {agent.name}: {task['state']}: {why}"
            self.fresh_other["failed"] += 1
            if self.verbose:
                print(f"{head} {task['state']}: {why}")
            return
        result = task.get("result") or {}
        est, got = result.get("estimate_s"), result.get("latency_s")
        ms = f"est {1000 * (est or 0.0):8.3f} ms  measured {1000 * (got or 0.0):8.3f} ms"
        device = named(task["device"], self.agents)
        self.ran[(agent.name, device)] += 1
        if task.get("ran_on"):  # offloaded: always shown, with its chain, origin -> peer
            links = named(chain(task), self.agents)
            print(f"{head} offloaded, ran on {device}  {ms}\n          chain: {links}")
            self.offloads.append(f"{label} from {agent.name}: ran on {device}; chain {links}")
            self.fresh_other["offloaded"] += 1
            return
        self.fresh[agent.name] += 1
        if self.verbose:
            print(f"{head} {task['device']:<28} {ms}")

    def round_line(self, extra: str = "") -> None:
        """Print (unless verbose) one line for the work finished since the last one."""
        self.rounds += 1
        if not self.verbose:
            placed = ", ".join(f"{a} {self.fresh[a]}" for a in self._names()) or "none"
            other = "".join(f"; {k} {v}" for k, v in sorted(self.fresh_other.items()))
            print(f"round {self.rounds}: done {placed}{other}{extra}", flush=True)
        self.fresh.clear()
        self.fresh_other.clear()

    def _names(self) -> list[str]:
        return [a.name for a in self.agents]

    def summary(self) -> list[str]:
        """Return the closing summary's lines about the workload."""
        lines = [f"summary: {self.rounds} rounds, {sum(self.ran.values())} tasks done, "
                 f"{len(self.offloads)} offloaded, {len(self.failed)} failed"]  # fmt: skip
        for name in self._names():
            where = sorted(((d, n) for (a, d), n in self.ran.items() if a == name),
                           key=lambda dn: -dn[1])  # fmt: skip
            ran = ", ".join(f"{d} {n}" for d, n in where) or "nothing"
            lines.append(f"summary: {name:<26} ran on {ran}")
        lines += [f"summary: offloaded {line}" for line in self.offloads]
        lines += [f"summary: failed {why}" for why in list(self.failed.values())[:5]]
        return lines


def chain(task: dict[str, Any]) -> str:
    """Return a task's decision chain as "origin: action -> peer: action"."""
    links = task.get("chain") or []
    return " -> ".join(f"{link.get('node')}: {link.get('action')}" for link in links) or "-"


def drain(hub: Child, agents: list[Child], until: float) -> None:
    """Wait (until ``until``) for every agent's outbox to reach the hub; print the hub's view."""
    base = {a.name: call(f"{a.url}/v1/health")["hub"]["heartbeats"] for a in agents}
    while time.monotonic() < until:
        links = {a.name: call(f"{a.url}/v1/health")["hub"] for a in agents}
        # two heartbeats later, a whole exchange (heartbeat, then sync) began after the call
        if all(s["heartbeats"] >= base[n] + 2 and s["pending"] == 0 for n, s in links.items()):
            break
        time.sleep(0.1)
    fleet = call(f"{hub.url}/v1/fleet")
    for row in fleet["agents"]:
        peers = named(",".join(row.get("peers") or []), agents) or "-"
        print(f"hub: {row['id']:<26} {row['state']:<12} board {row['board']:<18} "
              f"records synced {row['applied']}, lost {row['lost']}; "
              f"mesh peers {peers}")  # fmt: skip
    print(f"hub: {len(fleet['decisions'])} recent decisions on the dashboard", flush=True)
