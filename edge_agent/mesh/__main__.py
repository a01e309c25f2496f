"""``python -m edge_agent.mesh``: one standalone mesh node with emulated boards, until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
from pathlib import Path

from edge_agent.mesh.admin import serve_admin
from edge_agent.mesh.config import MeshConfig, new_agent_id, parse_overrides
from edge_agent.mesh.credential import FleetKey
from edge_agent.mesh.standalone import emulated_node, serve


async def _main(args: argparse.Namespace) -> None:
    key = FleetKey(Path(args.fleet_key_file).read_text(encoding="utf-8"))
    cfg = MeshConfig(
        agent_id=args.agent_id or new_agent_id(),
        interfaces=(args.address,),
        address=args.address,
        heartbeat_s=args.heartbeat_s,
        probe_name=args.agent_id is not None,  # a generated id is unique: no need to probe
    )
    cfg = dataclasses.replace(cfg, **parse_overrides(args.set))
    node = emulated_node(cfg, key, args.profile, Path(args.ledger), time_scale=args.time_scale)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        port = await stack.enter_async_context(serve(node, args.address, args.port))
        if args.admin_socket:
            await stack.enter_async_context(serve_admin(node, args.admin_socket))
        state = {
            "pid": os.getpid(),
            "agent_id": cfg.agent_id,
            "port": port,
            "fingerprint": key.fingerprint,
            "config": dataclasses.asdict(cfg),
        }
        tmp = Path(args.state_file + ".tmp")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        tmp.replace(args.state_file)
        await stop.wait()


def main() -> None:
    """Parse arguments and run the node."""
    p = argparse.ArgumentParser(prog="python -m edge_agent.mesh", description=__doc__)
    p.add_argument("--profile", action="append", required=True, help="firmware profile name")
    p.add_argument("--fleet-key-file", required=True)
    p.add_argument("--ledger", required=True, help="SQLite file for the idempotency ledger")
    p.add_argument("--state-file", required=True, help="written once listening: port, id")
    p.add_argument("--agent-id")
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--heartbeat-s", type=float, default=2.0)
    p.add_argument("--time-scale", type=float, default=1.0, help="emulated time multiplier")
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--admin-socket", help="Unix socket for local control: status, submit, ledger")
    p.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="a MeshConfig field"
    )
    args = p.parse_args()
    logging.basicConfig(level=args.log_level)
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
