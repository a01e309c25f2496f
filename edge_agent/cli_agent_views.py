"""``edge-agent submit / tasks / status / explain / peers / pools``: clients of the local agent."""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from edge_agent.cli_agent_http import base_url, client_options, request
from edge_agent.clikit import columns, positive_int
from edge_agent.errors import InvalidInput


def submit_options(parser: argparse.ArgumentParser) -> None:
    client_options(parser)
    parser.add_argument("model", metavar="MODEL", help="a model name or a local .onnx file")
    parser.add_argument("--max-latency-ms", type=float, metavar="MS", help="latency bound")
    parser.add_argument("--precision", metavar="P", help="run at precision P (int8, fp16, ...)")
    parser.add_argument("--kinds", metavar="K,K", help="allowed device kinds (npu,gpu,cpu)")
    parser.add_argument("--priority", type=int, default=0, help="higher runs first")
    parser.add_argument("--idempotency-key", metavar="KEY", help="make retries safe")
    parser.add_argument("--deadline-s", type=float, metavar="S", help="finish within S seconds")
    parser.add_argument("--tenant", metavar="NAME", help="the tenant (its pool and fair share)")
    parser.add_argument("--task-class", metavar="NAME", help="task class (tier rules route it)")
    parser.add_argument(
        "--deferrable",
        action="store_true",
        help="may wait for a low-carbon, low-load hour before its deadline (needs --deadline-s)",
    )


def submit(args: argparse.Namespace) -> int:
    """Submit a model to the local agent; print the task id."""
    base, model = base_url(args), args.model
    local = Path(model)
    if model.endswith(".onnx") or os.sep in model:  # a local file, not a model name
        if not local.is_file():
            raise InvalidInput(
                f"no such file: {model} (give an existing .onnx file, or a model name the "
                "agent has: GET /v1/models)"
            )
        name = urllib.parse.quote(local.stem)
        model = request(base, "POST", f"/v1/models?name={name}", local.read_bytes())["model"]
    requirements: dict[str, Any] = {}
    if args.max_latency_ms is not None:
        requirements["max_latency_s"] = args.max_latency_ms / 1e3
    if args.precision:
        requirements["precision"] = args.precision
    if args.kinds:
        requirements["kinds"] = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.deadline_s is not None:
        requirements["deadline_s"] = args.deadline_s
    body = {"model": model, "requirements": requirements, "priority": args.priority}
    for key in ("tenant", "task_class"):
        if getattr(args, key):
            body[key] = getattr(args, key)
    if args.deferrable:
        body["deferrable"] = True
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    doc = request(base, "POST", "/v1/tasks", body, headers)
    print(json.dumps(doc, indent=2) if args.json else doc["task"]["id"])
    return 0


def tasks_options(parser: argparse.ArgumentParser) -> None:
    client_options(parser)
    parser.add_argument("--state", metavar="STATE", help="only tasks in STATE")
    parser.add_argument("--limit", type=positive_int, default=20, metavar="N")
    parser.add_argument(
        "--wide", action="store_true", help="whole messages (default: cut to fit the column)"
    )


#: Width of the NOTE column unless ``--wide`` (longer messages end in "…").
NOTE_WIDTH = 60


def _cut(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def _waiting(task: dict[str, Any]) -> str | None:
    """Why a task waits now: its pool is full, or it is held for a cleaner hour."""
    if task["state"] == "deferred":
        return str((task.get("deferral") or {}).get("why") or "held")
    return task.get("waiting")


def _task_rows(tasks: list[dict[str, Any]], wide: bool = False) -> list[str]:
    """One row per task: HELD UNTIL for held work; NOTE: the error, or why it waits now."""
    rows = [("ID", "STATE", "CLASS", "DEVICE", "EMU", "HELD UNTIL", "NOTE")]
    width = None if wide else NOTE_WIDTH
    for t in tasks:
        rows.append(
            (
                t["id"],
                t["state"],
                t["contract"].get("task_class", "-"),
                t.get("device") or "-",
                "yes" if t.get("emulated") else "no",
                t.get("held_until") or "-",
                _cut(t.get("error") or _waiting(t) or "", width),
            )
        )
    return columns(rows)


def tasks(args: argparse.Namespace) -> int:
    """List the agent's tasks, newest first."""
    query = f"?limit={args.limit}" + (
        f"&state={urllib.parse.quote(args.state)}" if args.state else ""
    )
    doc = request(base_url(args), "GET", "/v1/tasks" + query)
    rows = _task_rows(doc["tasks"], args.wide)
    print(json.dumps(doc, indent=2) if args.json else "\n".join(rows))
    return 0


def status(args: argparse.Namespace) -> int:
    """Show health, devices, queue and recent decisions."""
    base = base_url(args)
    health = request(base, "GET", "/v1/health")
    devices = request(base, "GET", "/v1/devices")["devices"]
    recent = request(base, "GET", "/v1/tasks?limit=5")["tasks"]
    if args.json:
        print(json.dumps({"health": health, "devices": devices, "recent": recent}, indent=2))
        return 0
    print(
        f"agent {health['version']} at {base}: {health['status']}"
        f"{': ' + health['problem'] if health.get('problem') else ''}, policy {health['policy']}, "
        f"queue {health['queue_depth']}, on devices {health['backlog']}"
    )
    rows = [("DEVICE", "KIND", "EMU", "QUEUED S", "RUNNING")]
    for d in devices:
        rows.append(
            (
                d["id"],
                d["kind"],
                "yes" if d["emulated"] else "no",
                f"{d['live']['queued_s']:.4f}",
                ", ".join(d.get("running_tasks") or []) or "-",
            )
        )
    print("\n".join(columns(rows, right={3})))
    print("recent tasks:")
    print("\n".join(_task_rows(recent)))
    return 0


def explain_options(parser: argparse.ArgumentParser) -> None:
    client_options(parser)
    parser.add_argument("task_id", metavar="TASK_ID")
    parser.add_argument("--device", metavar="ID", help="only why not this device")


def explain(args: argparse.Namespace) -> int:
    """Explain a task's placement: why here, why not elsewhere."""
    path = f"/v1/tasks/{urllib.parse.quote(args.task_id)}/explain"
    if args.device:
        path += f"?device={urllib.parse.quote(args.device)}"
    doc = request(base_url(args), "GET", path)
    if args.json:
        print(json.dumps(doc, indent=2))
    elif args.device:
        print(doc["why"])
    else:
        print(f"{doc['task_id']} ({doc['state']}): {doc['why_here']}")
        if doc.get("deferral") and doc.get("placed"):
            print(f"  was {doc['deferral']['why']}")
        if "policy" in doc:
            print(f"policy {doc['policy']}, kernel {doc['backend']}")
        for why in doc.get("why_not", {}).values():
            print(f"  {why}")
        if doc.get("chain"):
            ran_on = doc.get("ran_on")
            print(f"mesh: ran on {ran_on or 'this agent'}; decisions, origin -> peer:")
            for link in doc["chain"]:
                summary = f" ({link['summary']})" if link.get("summary") else ""
                print(f"  #{link.get('attempt', '?')} {link['node']}: {link['action']}{summary}")
    return 0


def peers(args: argparse.Namespace) -> int:
    """List the agent's mesh peers: id, address, state, trust, last seen, device kinds."""
    doc = request(base_url(args), "GET", "/v1/peers")
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    if not doc.get("enabled"):
        print("mesh off: no fleet key (edge-agent init --fleet-key KEY, or [mesh] fleet_key)")
        return 0
    print(f"agent {doc['agent_id']} (fleet key {doc['fingerprint']}), {len(doc['peers'])} peers")
    rows = [("ID", "ADDRESS", "STATE", "TRUSTED", "SEEN S AGO", "RTT MS", "KINDS")]
    for p in doc["peers"]:
        rtt = "-" if p.get("rtt_ms") is None else f"{p['rtt_ms']:.1f}"
        trusted = "yes" if p.get("trusted") else "no"
        seen = f"{p['seen_ago_s']:.1f}"
        rows.append((p["agent_id"], p["address"], p["state"], trusted, seen, rtt, p["kinds"]))
    print("\n".join(columns(rows, right={4, 5})))
    return 0


def _figure(used: float | None, quota: float | None, unit: str) -> str:
    if quota is None:
        return f"{used or 0:g} {unit} (no limit)"
    return f"{used or 0:g}/{quota:g} {unit}"


def pools(args: argparse.Namespace) -> int:
    """Show each tenant's resource pool: quota, used, borrowed, lent, waiting tasks."""
    doc = request(base_url(args), "GET", "/v1/pools")
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    if not doc["pools"]:
        print("no resource pools: every tenant unlimited ([pools.TENANT] or the policy's pools)")
        return 0
    rows = [("POOL", "CPU CORES", "MEMORY", "ACCELERATOR", "BORROWED", "LENT", "TASKS", "WAITING")]
    for p in doc["pools"]:
        used, quota = p["used"], p["quota"]
        rows.append(
            (
                p["pool"],
                _figure(used["cpu_cores"], quota["cpu_cores"], "cores"),
                _figure(used["memory_mb"], quota["memory_mb"], "MB"),
                _figure(used["accelerator_s"], quota["accelerator_s"], "s"),
                f"{p['borrowed']['cpu_cores']:g} cores, {p['borrowed']['memory_mb']:g} MB"
                if p["borrow"]
                else "off",
                f"{p['lent']['cpu_cores']:g} cores, {p['lent']['memory_mb']:g} MB",
                str(p["tasks"]),
                str(p["waiting"]),
            )
        )
    print("\n".join(columns(rows, right={6, 7})))
    return 0
