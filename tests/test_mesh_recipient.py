"""Finding 12.2 on loopback: signed mesh requests are bound to their recipient.

Three members: an in-process origin whose peer calls go through a recording ClientSession
(the capture: exact URL, headers and body bytes of what it signed), and two real agent
daemons with an NPU, B and C. A forward captured on its way to B and replayed to C is
refused, counted (``hetmesh_mesh_events_total{event="wrong_recipient"}``) and never run; a
hello captured on its way to B and replayed to C from another address (127.0.0.2) is
refused and C does not re-point the origin there; even a genuine, never-delivered hello for
C arriving from another address does not re-point the origin until that address proves it
is the origin (it cannot). A clock excursion on the receiver does not re-open a replay.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from edge_agent.agent.config import AgentConfig
from edge_agent.mesh import FleetKey, MeshConfig
from edge_agent.mesh.credential import sign_request
from edge_agent.mesh.replay import Verifier
from edge_agent.mesh.standalone import emulated_node, serve
from edge_agent.placement import Requirements, Semantics, TaskContract

pytestmark = pytest.mark.asyncio
KEY_TEXT = "recipient-test-fleet-key-0000000"
KEY = FleetKey(KEY_TEXT)
NPU_INT8 = TaskContract(
    Semantics(gflops=2.0, precision="int8"),
    Requirements(kinds=("npu",), precision="int8", model_format=None),
)
#: The conftest fixtures ``agent_daemon``, ``until``, ``get_json``, ``peer_online``.
Serve = Callable[[AgentConfig], AbstractAsyncContextManager[str]]
Until = Callable[..., Awaitable[Any]]
GetJson = Callable[[aiohttp.ClientSession, str], Awaitable[Any]]
PeerOnline = Callable[[aiohttp.ClientSession, str, str], Awaitable[None]]
#: The conftest fixtures ``recorder`` (a Recorder), ``replay`` and ``metric``.
Replay = Callable[..., Awaitable[tuple[int, Any]]]
Metric = Callable[..., Awaitable[float]]


async def test_captured_forward_and_hello_are_refused_by_any_other_member(
    tmp_path: Path,
    emulated_agent: Callable[..., AgentConfig],
    agent_daemon: Serve,
    until: Until,
    get_json: GetJson,
    peer_online: PeerOnline,
    recorder: Any,
    replay: Replay,
    metric: Metric,
) -> None:
    def member(name: str) -> AgentConfig:
        return emulated_agent(
            data_dir=tmp_path / name,
            profile="rk3588",
            mesh_fleet_key=KEY_TEXT,
            mesh_heartbeat_s=0.3,
            mesh_agent_id=name,
        )

    config = MeshConfig(agent_id="origin", heartbeat_s=0.3, announce_burst=100)
    origin = emulated_node(
        config, KEY, ["rpi5"], tmp_path / "origin.db", time_scale=0.0, session=recorder.session
    )

    def event(http: aiohttp.ClientSession, base: str, name: str) -> Awaitable[float]:
        """Return ``hetmesh_mesh_events_total{event=name}`` from the agent's /metrics."""
        return metric(http, f"{base}/metrics", f'hetmesh_mesh_events_total{{event="{name}"}}')

    async with (
        aiohttp.ClientSession() as http,
        agent_daemon(member("b")) as b,
        agent_daemon(member("c")) as c,
        serve(origin) as origin_port,
    ):
        b_port, c_port = (int(u.rsplit(":", 1)[1]) for u in (b, c))
        await origin.wait_for(lambda: origin.trusts("b") and origin.trusts("c"), 20)
        await peer_online(http, c, "origin")
        out = await origin.submit(NPU_INT8, {"frame": "f1"}, key="task-1", to="b")
        assert out["state"] == "done" and out["ran_on"] == "b"
        assert len((await get_json(http, f"{b}/v1/tasks"))["tasks"]) == 1

        # the forward to B, replayed byte for byte to C within the window: refused, not run
        forward = recorder.last(f"127.0.0.1:{b_port}/mesh/v1/tasks")
        assert json.loads(forward[2])["key"] == "task-1"
        status, doc = await replay(forward, c_port)
        assert status == 401 and "signed for 'b'" in doc["error"], doc
        assert await event(http, c, "wrong_recipient") == 1.0
        assert (await get_json(http, f"{c}/v1/tasks"))["tasks"] == []
        # ...and to B itself again: a replay, refused; B ran it once
        status, doc = await replay(forward, b_port)
        assert status == 401 and "replayed" in doc["error"], doc
        assert len((await get_json(http, f"{b}/v1/tasks"))["tasks"]) == 1

        # the origin's hello to B, replayed to C from another address: refused, no re-point
        hello = recorder.last(f"127.0.0.1:{b_port}/mesh/v1/hello")
        status, doc = await replay(hello, c_port, source="127.0.0.2")
        assert status == 401, doc
        assert await event(http, c, "wrong_recipient") == 2.0

        # a genuine hello for C that a man in the middle kept back and delivers from another
        # address: answered (it is signed), but C re-points nobody until 127.0.0.2 proves it
        # is the origin; nothing there can
        body = json.dumps({"api_port": origin_port, "to": f"127.0.0.1:{c_port}"}).encode()
        headers = sign_request(KEY, "origin", "POST", "/mesh/v1/hello", body, to="c")
        status, _ = await replay(("http://x/mesh/v1/hello", headers, body), c_port, "127.0.0.2")
        assert status == 200
        await until(lambda: event(http, c, "challenge_unreachable"))
        peers = (await get_json(http, f"{c}/v1/peers"))["peers"]
        row = next(p for p in peers if p["agent_id"] == "origin")
        assert row["address"] == f"127.0.0.1:{origin_port}", row
        # a hello sent to C's address but delivered to B's: refused as misdirected
        body = json.dumps({"api_port": origin_port, "to": f"127.0.0.1:{c_port}"}).encode()
        headers = sign_request(KEY, "origin", "POST", "/mesh/v1/hello", body, to="b")
        status, doc = await replay(("http://x/mesh/v1/hello", headers, body), b_port)
        assert status == 421 and "not to 127.0.0.1" in doc["error"], doc
        assert await event(http, b, "wrong_address") == 1.0


async def test_a_mesh_clock_excursion_does_not_reopen_a_replay(
    tmp_path: Path, replay: Replay
) -> None:
    """Finding 12.3 (mesh): B's wall clock stepped 90 s forward, a request, then back."""
    wall = {"offset": 0.0}
    b = emulated_node(MeshConfig(agent_id="b"), KEY, ["rk3588"], tmp_path / "b.db")
    b.verifier = Verifier(KEY, "b", clock=lambda: time.time() + wall["offset"])
    async with serve(b) as port:
        body = b"{}"
        captured = sign_request(KEY, "a", "POST", "/mesh/v1/heartbeat", body, to="b")
        sent = ("http://x/mesh/v1/heartbeat", captured, body)
        assert (await replay(sent, port))[0] == 200
        wall["offset"] = 90.0  # stepped forward past the window and then some
        ahead = time.time() + 90.0
        fresh = sign_request(KEY, "a", "POST", "/mesh/v1/heartbeat", body, to="b", now=ahead)
        assert (await replay(("http://x/mesh/v1/heartbeat", fresh, body), port))[0] == 200
        wall["offset"] = 0.0  # ...and back: the capture is inside the window again
        status, doc = await replay(sent, port)
        assert status == 401 and "replayed" in doc["error"], doc
        assert b.counters["auth_rejected_replay"] == 1


async def test_a_hello_must_name_an_address_it_can_reach_us_on(
    tmp_path: Path, replay: Replay
) -> None:
    """The arrival address, or the advertised one (behind a port mapping they differ)."""
    config = MeshConfig(agent_id="b", address="10.9.9.9")  # advertised, not bound here
    b = emulated_node(config, KEY, ["rk3588"], tmp_path / "b.db")
    async with serve(b) as port:
        for to, status in [
            (f"127.0.0.1:{port}", 200),  # where it arrived
            (f"10.9.9.9:{port}", 200),  # where b says it is
            (f"127.0.0.2:{port}", 421),  # another address: sent somewhere else, replayed here
            (f"127.0.0.1:{port + 1}", 421),
            (None, 421),
        ]:
            doc = {"api_port": 9} | ({} if to is None else {"to": to})
            body = json.dumps(doc).encode()
            headers = sign_request(KEY, "a", "POST", "/mesh/v1/hello", body, to="b")
            got, answer = await replay(("http://x/mesh/v1/hello", headers, body), port)
            assert got == status, (to, answer)
        assert b.counters["wrong_address"] == 3
