"""A peer that finishes a task while cut off from its origin: recorded ``duplicate``, never
a second ``done``.

The cut is made on loopback by holding every answer of the peer's HTTP server (requests
still reach it, answers do not come back), which is what a partition looks like to the
origin; healing releases them. The peer finishes attempt 1 within its lease, the origin
gives it up (``lost``) and places attempt 2 on another NPU peer; once the first peer
answers heartbeats again the origin asks it about attempt 1 and records it ``duplicate``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from edge_agent.mesh import FleetKey, MeshConfig, MeshNode
from edge_agent.mesh.accept import MESH_META
from edge_agent.mesh.client import PREFIX
from edge_agent.mesh.standalone import emulated_node, emulated_run
from edge_agent.placement import Decision, Requirements, Semantics, TaskContract

pytestmark = pytest.mark.asyncio
KEY = FleetKey("reconcile-test-fleet-key-0000000")
FAST: dict[str, Any] = {
    "heartbeat_s": 0.2,
    "announce_burst": 100,
    "lease_min_s": 0.8,
    "lease_factor": 0.0,
    "lease_grace_s": 0.1,
    "challenge_timeout_s": 0.3,
    "cancel_timeout_s": 0.3,
    "offline_after": 2,
    "probe_name": False,  # fixed, unique test ids: no mDNS name probing (1.2 s each)
}
NPU = TaskContract(
    Semantics(gflops=2.0, precision="int8"),
    Requirements(kinds=("npu",), precision="int8", model_format=None),
)


@contextlib.asynccontextmanager
async def serve_cuttable(node: MeshNode, cut: asyncio.Event) -> AsyncIterator[int]:
    """Serve ``node``; while ``cut`` is set, no answer leaves (held until it clears)."""

    @web.middleware
    async def partition(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resp = await handler(request)
        while cut.is_set():
            await asyncio.sleep(0.02)
        return resp

    app = web.Application(middlewares=[partition])
    app.add_subapp(PREFIX, node.app())
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(next(a[1] for a in runner.addresses if isinstance(a, tuple)))
    await node.start(port)
    try:
        yield port
    finally:
        cut.clear()
        await node.stop()
        await runner.cleanup()


async def test_a_task_finished_by_a_cut_off_peer_is_recorded_duplicate_not_done_twice(
    tmp_path: Any,
) -> None:
    runs: list[tuple[str, int]] = []
    cuts = {"npu-a": asyncio.Event(), "npu-b": asyncio.Event()}

    def runner_for(name: str) -> Any:
        async def run(c: TaskContract, d: Decision, p: dict[str, Any]) -> dict[str, Any]:
            attempt = p[MESH_META]["attempt"]
            runs.append((name, attempt))
            if attempt == 1:
                cuts[name].set()  # the link goes down while this peer runs attempt 1
            return await emulated_run(c, d, {"emulate_s": {d.device_id: 0.1}}, time_scale=0.0)

        return run

    origin = emulated_node(
        MeshConfig(agent_id="origin", **FAST), KEY, ["rpi5"], tmp_path / "origin.db"
    )
    peers = {
        name: emulated_node(
            MeshConfig(agent_id=name, **FAST),
            KEY,
            ["rk3588"],
            tmp_path / f"{name}.db",
            run_task=runner_for(name),
        )
        for name in cuts
    }
    duplicates: list[tuple[str, int, str]] = []

    async def noted(key: str, attempt: int, peer: str, doc: dict[str, Any]) -> None:
        duplicates.append((key, attempt, peer))

    origin.on_duplicate = noted
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(serve_cuttable(origin, asyncio.Event()))
        for name, peer in peers.items():
            await stack.enter_async_context(serve_cuttable(peer, cuts[name]))
        await origin.wait_for(lambda: all(origin.trusts(n) for n in peers), 10)

        out = await origin.submit(NPU, key="task-1")
        assert out["state"] == "done"
        first, second = (name for name, attempt in sorted(runs, key=lambda r: r[1]))
        assert runs == [(first, 1), (second, 2)] and out["ran_on"] == second
        # the peer cut off finished attempt 1 within its lease: its own ledger says done
        assert [
            (r["attempt"], r["state"]) for r in await peers[first].ledger.attempts("task-1")
        ] == [(1, "done")]
        attempts = await origin.ledger.attempts("task-1", "origin")
        assert [(a["target"], a["state"]) for a in attempts] == [(first, "lost"), (second, "done")]

        cuts[first].clear()  # the link heals: heartbeats answer, the origin reconciles
        await origin.wait_for(lambda: origin.counters["duplicate_runs"] >= 1, 10)
        attempts = await origin.ledger.attempts("task-1", "origin")
        assert [(a["target"], a["state"]) for a in attempts] == [
            (first, "duplicate"),
            (second, "done"),
        ]
        assert [a["state"] for a in attempts].count("done") == 1  # one completion, ever
        assert duplicates == [("task-1", 1, first)]
        assert not origin.offloader.lost.get(first)  # asked once; nothing left to reconcile
