"""What the demo shows beyond routine placements: the mesh (trust, the peer table, work
only a peer can run), each site's grid, deferrable work held for a cleaner hour, and the
hub's re-evaluation with the moves it issues."""

from __future__ import annotations

import sys
import time
from typing import Any

from cloud_hub.demo.fleet import named
from cloud_hub.demo.processes import Child, call
from edge_agent.clikit import columns

MESH_TIMEOUT_S = 30.0


#: Work the receiving board cannot run, so its agent offloads it to a peer:
#: (submitted to, a profile that can run it, label, why the first cannot, contract).
MESH_TASKS: tuple[tuple[str, str, str, str, dict[str, Any]], ...] = (
    ("jetson_orin_nano", "rk3588", "npu-int8 (NPU only)", "it has no NPU",
     {"task_class": "npu-int8", "tenant": "vision",
      "semantics": {"gflops": 2.0, "precision": "int8"},
      "requirements": {"kinds": ["npu"], "precision": "int8", "model_format": None}}),
    ("rk3588", "kria_kv260", "dpu-config-1 (FPGA only)", "it has no FPGA",
     {"task_class": "dpu-config-1", "tenant": "vision",
      "semantics": {"gflops": 2.0, "precision": "int8"},
      "requirements": {"config_id": 1, "precision": "int8", "model_format": None}}),
)  # fmt: skip


#: Deferrable work for the dirtiest site: held for a cleaner hour before its deadline.
DEFERRABLE: dict[str, Any] = {
    "task_class": "nightly-batch", "tenant": "batch", "deferrable": True,
    "semantics": {"gflops": 2.0},
    "requirements": {"model_format": None, "deadline_s": 8 * 3600.0},
}  # fmt: skip


DEFERRABLE_COUNT = 2


#: The re-evaluation is asked for once the dirty site's heartbeats carried its held work
#: (or after this long); issued moves are followed this long for their outcome.
REEVAL_WAIT_S = 20.0


MOVE_FOLLOW_S = 10.0


FINAL_MOVE = ("done", "failed", "refused", "expired")


def wait_trusted(agents: list[Child], timeout_s: float) -> None:
    """Wait (bounded) until every agent trusts every other one; print the peer table."""
    if len(agents) < 2:
        print("mesh: one agent, no peers (--agents 2 or more shows offload)", flush=True)
        return
    started, names = time.monotonic(), {a.name for a in agents}
    while True:
        docs = {a.name: call(f"{a.url}/v1/peers") for a in agents}
        online = {n: {named(p["agent_id"], agents) for p in d["peers"] if p["state"] == "online"}
                  for n, d in docs.items()}  # fmt: skip
        lacking = {
            n: sorted(names - {n} - seen) for n, seen in online.items() if names - {n} - seen
        }
        waited = time.monotonic() - started
        if not lacking or waited > timeout_s:
            break
        time.sleep(0.2)
    if lacking:
        print(f"mesh: not all agents trust each other after {timeout_s:g} s: "
              + "; ".join(f"{n} lacks {', '.join(m)}" for n, m in lacking.items()))  # fmt: skip
    else:
        print(f"mesh: all {len(agents)} agents trust each other after {waited:.1f} s")
    print("mesh: ids " + ", ".join(f"{a.name} = {a.mesh_id}" for a in agents))
    rows = [("mesh:", "AGENT", "PEER", "ADDRESS", "STATE", "RTT MS", "KINDS")]
    for name, doc in docs.items():
        for p in doc["peers"]:
            rtt = "-" if p.get("rtt_ms") is None else f"{p['rtt_ms']:.1f}"
            peer = named(p["agent_id"], agents)
            rows.append(("mesh:", name, peer, p["address"], p["state"], rtt, p["kinds"]))
    print("\n".join(columns(rows, right={5})), flush=True)


def submit_mesh_work(agents: list[Child]) -> None:
    """Submit to a board work only another board can run: its agent offloads it to a peer."""
    by_profile = {a.name.removeprefix("demo-"): a for a in agents}
    for to, needs, label, why, contract in MESH_TASKS:
        agent = by_profile.get(to)
        if agent is None or needs not in by_profile:
            continue
        task = call(f"{agent.url}/v1/tasks", "POST", contract)["task"]
        agent.pending[task["id"]] = label
        print(f"mesh: submitted {label} to {agent.name}: {why}, a peer runs it")
    sys.stdout.flush()


def show_sites(agents: list[Child]) -> Child | None:
    """Print each agent's grid and intensity now; return the dirtiest site's agent."""
    now = {a.name: a.site.now() for a in agents if a.site is not None}
    for agent in agents:
        if agent.site is not None:
            print(f"carbon: {agent.name:<26} {agent.site.label()}, "
                  f"{now[agent.name]:.0f} g/kWh now")  # fmt: skip
    sys.stdout.flush()
    return max(agents, key=lambda a: now.get(a.name, -1.0)) if now else None


def submit_deferrable(agent: Child, count: int) -> dict[str, str]:
    """Submit ``count`` deferrable tasks to ``agent``; print and return each one's deferral."""
    hours = DEFERRABLE["requirements"]["deadline_s"] / 3600
    held = {}
    for _ in range(count):
        task = call(f"{agent.url}/v1/tasks", "POST", DEFERRABLE)["task"]
        why = (task.get("deferral") or {}).get("why")
        what = why if task["state"] == "deferred" and why else f"{task['state']} (not held)"
        held[task["id"]] = f"{task['id'][:8]}  {DEFERRABLE['task_class']} (deadline {hours:g} h) "
        held[task["id"]] += f"on {agent.name}: {what}"
        print(f"carbon: {held[task['id']]}")
    sys.stdout.flush()
    return held


class MoveWatch:
    """Asks the hub for one re-evaluation once the dirty site reported its held work, then
    prints the moves issued for it and their outcomes (for ``MOVE_FOLLOW_S`` seconds)."""

    def __init__(self, hub: Child, agents: list[Child], dirty: Child, ids: list[str]) -> None:
        self.hub, self.agents, self.dirty, self.ids = hub, agents, dirty, set(ids)
        self.base = call(f"{dirty.url}/v1/health")["hub"]["heartbeats"]
        self.deadline = time.monotonic() + REEVAL_WAIT_S
        self.asked = False
        self.moves: dict[str, str] = {}  # move id -> last state printed
        self.next_poll = 0.0
        self.done = not ids

    def summary(self) -> list[str]:
        """Return the closing summary's lines: each move issued and where it ended."""
        if not self.asked:
            return ["summary: hub re-evaluation not asked yet"]
        if not self.moves:
            return ["summary: hub moves: none issued for the held tasks"]
        return [f"summary: hub move {m}: {state}" for m, state in self.moves.items()]

    def step(self) -> None:
        """Do what is due now (call often; it polls at most once a second)."""
        now = time.monotonic()
        if self.done or now < self.next_poll:
            return
        self.next_poll = now + 0.5
        if not self.asked:
            beats = call(f"{self.dirty.url}/v1/health")["hub"]["heartbeats"]
            if beats < self.base + 2 and now < self.deadline:
                return  # two heartbeats: one began after the tasks were held
            self._evaluate()
            return
        records = call(f"{self.hub.url}/v1/reevaluation")["executed"]
        for r in records:
            if r["id"] in self.moves and r["state"] != self.moves[r["id"]]:
                self.moves[r["id"]] = r["state"]
                print(named(f"hub move {r['id']}: {r['state']}" + _outcome(r), self.agents))
        # accepted: the origin holds the (deferred) task for the target's clean hour, later
        settled = all(s in ("accepted", *FINAL_MOVE) for s in self.moves.values())
        if settled or now > self.deadline:
            if not settled:
                print(f"hub moves: the origin did not answer within {MOVE_FOLLOW_S:g} s; "
                      "GET /v1/reevaluation shows the outcome later")  # fmt: skip
            self.done = True
        sys.stdout.flush()

    def _evaluate(self) -> None:
        self.asked = True
        doc = call(f"{self.hub.url}/v1/reevaluation?fresh=1")
        ours = [m for m in doc["moves"] if m["task_id"] in self.ids]
        print(f"hub re-evaluation (GET /v1/reevaluation?fresh=1): {doc['sites']} sites, "
              f"{doc['deferred']} deferred, {doc['queued']} queued; {len(doc['moves'])} moves "
              f"would pay, saving {doc['saving_g']:.3g} g CO2")  # fmt: skip
        for m in ours:
            at = time.strftime("%H:%M UTC", time.gmtime(m["start_at"]))
            how = (
                f"issued as {m['move_id']}"
                if m["move_id"]
                else "not issued ("
                + (
                    "already issued"
                    if m["executable"]
                    else "the target is no trusted mesh peer of the origin"
                )
                + ")"
            )
            print(f"hub move: {m['task_id'][:8]} {m['origin']} -> {m['target']}: "
                  f"{m['origin_g_per_kwh']:.0f} -> {m['target_g_per_kwh']:.0f} g/kWh at {at}, "
                  f"saving {m['saving_g']:.3g} g; {how}")  # fmt: skip
            if m["move_id"]:
                self.moves[m["move_id"]] = "issued"
        if not ours:
            print("hub move: none for the held tasks (no current site is >= 20 % cleaner "
                  "before their latest start with load <= 70 %)")  # fmt: skip
        self.deadline = time.monotonic() + MOVE_FOLLOW_S
        self.done = not self.moves
        sys.stdout.flush()


def _outcome(record: dict[str, Any]) -> str:
    """Return what a move's state means, for the line that prints it."""
    state = record["state"]
    if state == "accepted" and not record.get("queued"):
        at = time.strftime("%H:%M UTC", time.gmtime(record["start_at"]))
        return (f" — {record['origin']} holds the task until {record['target']}'s clean hour "
                f"({at}), then forwards it there; that is after this demo's window")  # fmt: skip
    if state == "done":
        return f" — ran on {record.get('ran_on')}"
    if state in ("failed", "refused", "expired"):
        return f" — {record.get('reason') or record.get('error') or ''}"
    return ""
