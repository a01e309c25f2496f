"""Hub outage benchmark: busy agents keep working while the hub is down, then sync exactly once.

    python benchmarks/bench_hub_sync.py [--agents 3] [--up 2] [--down 3] [--rate 40]

Real edge agents (``edge_agent.agent`` daemons, each emulating a board, real SQLite) and a
real hub (``cloud_hub.hub`` on its own SQLite file) run in this process on 127.0.0.1. Each
agent gets ``--rate`` tasks per second over HTTP for ``--up`` seconds with the hub up,
``--down`` seconds with the hub stopped, and ``--up`` seconds after it restarts on the same
port. Then every record the agents wrote (task outcomes and decisions, from their own
databases) is compared with what the hub holds:

- ``sync_lost_records``: records an agent wrote that the hub does not hold (target 0),
  plus what the hub itself counted lost;
- ``sync_duplicate_records``: records the hub holds more than once (target 0).

The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cloud_hub.hub.api import make_app as hub_app  # noqa: E402
from cloud_hub.hub.config import HubConfig  # noqa: E402
from edge_agent.agent.config import AgentConfig  # noqa: E402
from edge_agent.agent.web.api import AGENT  # noqa: E402
from edge_agent.agent.web.api import make_app as agent_app  # noqa: E402

PROFILES = ("rk3588", "jetson_orin_nano", "kria_kv260", "hailo8_host")
TOKEN = "bench-join"
TASK = {"semantics": {"gflops": 0.5}, "tenant": "bench"}


async def serve(app: web.Application, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, int(runner.addresses[0][1])


async def load(session: aiohttp.ClientSession, url: str, rate: float, seconds: float) -> int:
    """Submit ``rate`` tasks per second to one agent for ``seconds``; return how many."""
    sent, start = 0, time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate) + 1
        while sent < due:
            async with session.post(f"{url}/v1/tasks", json=TASK) as resp:
                assert resp.status == 202, await resp.text()
            sent += 1
        await asyncio.sleep(1 / rate)
    return sent


def agent_records(db: Path) -> Counter[tuple[str, str]]:
    """Return the (kind, task id) records an agent produced, from its own database."""
    conn = sqlite3.connect(db)
    try:
        out: Counter[tuple[str, str]] = Counter()
        for (task_id,) in conn.execute("SELECT task_id FROM decisions"):
            out["decision", task_id] += 1
        for (task_id,) in conn.execute(
            "SELECT id FROM tasks WHERE state IN ('done', 'failed', 'cancelled')"
        ):
            out["task", task_id] += 1
        return out
    finally:
        conn.close()


def hub_records(db: Path, agent_id: str) -> Counter[tuple[str, str]]:
    conn = sqlite3.connect(db)
    try:
        out: Counter[tuple[str, str]] = Counter()
        for kind, payload in conn.execute(
            "SELECT kind, payload FROM records WHERE agent_id = ? AND kind != 'telemetry'",
            (agent_id,),
        ):
            doc = json.loads(payload)
            out[kind, doc["task_id"] if kind == "decision" else doc["id"]] += 1
        return out
    finally:
        conn.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-hub-sync-"))
    hub_config = HubConfig(
        data_dir=tmp / "hub", port=0, join_token=TOKEN, admin_token="x", heartbeat_interval_s=0.5
    )
    hub, port = await serve(hub_app(hub_config), 0)
    names = [f"bench-{PROFILES[i % len(PROFILES)]}-{i}" for i in range(args.agents)]
    agents = []
    for i, name in enumerate(names):
        config = AgentConfig(
            data_dir=tmp / name,
            port=0,
            profile=PROFILES[i % len(PROFILES)],
            telemetry_interval_s=1.0,
            shutdown_grace_s=5.0,
            hub_url=f"http://127.0.0.1:{port}",
            hub_join_token=TOKEN,
            hub_agent_id=name,
            hub_retry_s=0.2,
        )
        app = agent_app(config)
        runner, agent_port = await serve(app, 0)
        agents.append((name, app, runner, f"http://127.0.0.1:{agent_port}", config))
    async with aiohttp.ClientSession() as session:

        async def phase(seconds: float) -> int:
            sent = await asyncio.gather(
                *(load(session, url, args.rate, seconds) for _, _, _, url, _ in agents)
            )
            return sum(sent)

        submitted = await phase(args.up)
        await hub.cleanup()
        print(f"hub stopped for {args.down:g} s; agents keep working", flush=True)
        submitted += await phase(args.down)
        pending_at_return = sum(a[1][AGENT].health()["hub"]["pending"] for a in agents)
        hub, _ = await serve(hub_app(hub_config), port)
        back = time.monotonic()
        print(f"hub back; {pending_at_return} records waiting in the agents' outboxes", flush=True)
        submitted += await phase(args.up)
        load_ended = time.monotonic()
        while any(
            a[1][AGENT].health()["queue_depth"] or a[1][AGENT].executor.backlog() for a in agents
        ):
            await asyncio.sleep(0.05)
        idle = time.monotonic()
        heard = {a[0]: a[1][AGENT].health()["hub"]["heartbeats"] for a in agents}
        while not all(
            a[1][AGENT].health()["hub"]["heartbeats"] >= heard[a[0]] + 2
            and a[1][AGENT].health()["hub"]["pending"] == 0
            for a in agents
        ):
            await asyncio.sleep(0.05)
        done = time.monotonic()
        caught_up_s, settle_s, sync_s = done - back, idle - load_ended, done - idle
        async with session.get(f"http://127.0.0.1:{port}/v1/agents") as resp:
            rows = {r["id"]: r for r in (await resp.json())["agents"]}
    for _, _, runner, _, _ in agents:
        await runner.cleanup()
    await hub.cleanup()
    lost = duplicates = total = 0
    for name, _, _, _, config in agents:
        mine, held = agent_records(config.db_path), hub_records(hub_config.db_path, name)
        total += sum(mine.values())
        lost += sum(1 for key in mine if key not in held) + int(rows[name]["lost"])
        duplicates += sum(n - 1 for n in held.values() if n > 1)
    return {
        "agents": args.agents,
        "tasks_submitted": submitted,
        "records_written": total,
        "outage_s": args.down,
        "pending_at_return": pending_at_return,
        "all_synced_after_return_s": round(caught_up_s, 3),
        "work_drained_after_load_s": round(settle_s, 3),
        "all_synced_after_work_s": round(sync_s, 3),
        "sync_lost_records": lost,
        "sync_duplicate_records": duplicates,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--up", type=float, default=2.0, help="seconds of load with the hub up")
    parser.add_argument("--down", type=float, default=3.0, help="seconds the hub is stopped")
    parser.add_argument("--rate", type=float, default=40.0, help="tasks per second per agent")
    result = asyncio.run(main(parser.parse_args()))
    for key, value in result.items():
        print(f"{key}: {value}")
    print(json.dumps(result))
