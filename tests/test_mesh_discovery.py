"""Discovery on loopback: real mDNS bound to 127.0.0.1, trust only after a signed challenge."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

import pytest
from zeroconf.asyncio import AsyncServiceInfo

from edge_agent.mesh import FleetKey, MeshConfig, MeshNode
from edge_agent.mesh.advertise import SERVICE_TYPE, Hint, new_zeroconf
from edge_agent.mesh.client import Reply
from edge_agent.mesh.peers import OFFLINE
from edge_agent.mesh.standalone import emulated_node, serve
from edge_agent.placement import Requirements, Semantics, TaskContract

KEY = FleetKey("discovery-test-fleet-key-0000000")
WRONG = FleetKey("some-other-key-the-spoofer-holds")
pytestmark = pytest.mark.asyncio

NPU_INT8 = TaskContract(
    Semantics(gflops=2.0, precision="int8"),
    Requirements(kinds=("npu",), precision="int8", model_format=None),
)


def node(
    tmp: Path, agent: str, profile: str, key: FleetKey = KEY, heartbeat_s: float = 0.3
) -> MeshNode:
    cfg = MeshConfig(agent_id=agent, heartbeat_s=heartbeat_s, offline_after=2, announce_burst=100)
    return emulated_node(cfg, key, [profile], tmp / f"{agent}.db", time_scale=0.0)


def forged(agent_id: str, port: int, props: dict[str, str]) -> AsyncServiceInfo:
    return AsyncServiceInfo(
        SERVICE_TYPE,
        f"{agent_id}-forged.{SERVICE_TYPE}",
        addresses=[socket.inet_aton("127.0.0.1")],
        port=port,
        properties={"id": agent_id, "v": "0.1.0", "port": str(port), **props},
        server=f"{agent_id}-forged.local.",
    )


async def test_members_trust_each_other_and_spoofers_get_counted_never_work(
    tmp_path: Path,
) -> None:
    honest = [
        node(tmp_path, "n0", "rpi5"),
        node(tmp_path, "n1", "rk3588"),
        node(tmp_path, "n2", "intel_n100"),
    ]
    evil = node(tmp_path, "evil", "hailo8_host", WRONG)  # a faster NPU, if it were trusted
    async with contextlib.AsyncExitStack() as stack:
        for n in honest[:2]:
            await stack.enter_async_context(serve(n))
        leaver = contextlib.AsyncExitStack()
        await leaver.enter_async_context(serve(honest[2]))
        evil_port = await stack.enter_async_context(serve(evil))
        for n in honest:
            others = [m.agent_id for m in honest if m is not n]
            await n.wait_for(lambda n=n, o=others: all(n.trusts(a) for a in o), 10)  # type: ignore[misc]

        zc = new_zeroconf(["127.0.0.1"])
        stack.push_async_callback(zc.async_close)
        # same id as n1 and the fleet's public fingerprint, but served by a wrong-key node
        await zc.async_register_service(
            forged("n1", evil_port, {"fp": KEY.fingerprint, "kinds": "npu:1"}),
            cooperating_responders=True,
        )
        # a plausible agent that shows no key at all
        await zc.async_register_service(
            forged("ghost", evil_port, {"kinds": "npu:4"}), cooperating_responders=True
        )
        for n in honest:
            await n.wait_for(
                lambda n=n: n.counters["spoof_wrong_key"] >= 1 and n.counters["spoof_no_key"] >= 1,  # type: ignore[misc]
                10,
            )
            assert "evil" not in n.peers.peers and "ghost" not in n.peers.peers
        n1_port = honest[1].api_port
        assert honest[0].peers.peers["n1"].api_port == n1_port  # the spoof did not replace it
        # evil's own announcement shows its own key's fingerprint: another fleet, not ours
        await honest[0].wait_for(lambda: honest[0].counters["foreign_fleet"] >= 1, 10)

        out = await honest[0].submit(NPU_INT8)
        assert out["state"] == "done" and out["ran_on"] == "n1"
        bids = {b["peer"]: b["placed"] for b in out["chain"][0]["bids"]}
        assert bids == {"n1": True, "n2": False}  # only trusted members bid; n2 has no NPU
        assert evil.counters["forwards_received"] == 0
        assert evil.counters["auth_rejected_bad_signature"] >= 1  # our challenges, refused

        await leaver.aclose()  # n2 stops: its heartbeats fail
        for n in honest[:2]:
            await n.wait_for(lambda n=n: n.peers.peers["n2"].state == OFFLINE, 10)  # type: ignore[misc]


async def test_a_new_member_is_trusted_through_its_hello_and_its_goodbye_is_checked(
    tmp_path: Path,
) -> None:
    a = node(tmp_path, "a", "rpi5", heartbeat_s=3600)  # no heartbeats: only the goodbye
    b = node(tmp_path, "b", "rk3588", heartbeat_s=3600)
    async with serve(a):
        await a.wait_for(lambda: a.counters["advertised"] >= 1, 10)
        async with serve(b):
            # b found a's announcement and said hello, signed: each side proved the key
            await a.wait_for(lambda: a.trusts("b") and a.counters["trusted_via_hello"] >= 1, 10)
            await b.wait_for(lambda: b.trusts("a"), 5)
            await a.wait_for(lambda: a.counters["names_seen"] >= 1, 10)  # b's announcement
        # b said goodbye over mDNS; a checked with a signed heartbeat, which failed
        await a.wait_for(lambda: a.peers.peers["b"].state == OFFLINE, 10)
        assert a.counters["goodbyes"] == 1


async def test_an_announced_address_off_our_interfaces_is_ignored_and_counted(
    tmp_path: Path,
) -> None:
    """Heard on loopback, an announcement of a LAN address is no peer for a loopback agent."""
    n0 = node(tmp_path, "n0", "rpi5")
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(serve(n0))
        zc = new_zeroconf(["127.0.0.1"])
        stack.push_async_callback(zc.async_close)
        lan = forged("elsewhere", 8470, {"fp": KEY.fingerprint, "kinds": "npu:1"})
        lan.addresses = [socket.inet_aton("192.0.2.7")]  # a LAN address: not on lo
        await zc.async_register_service(lan, cooperating_responders=True)
        await n0.wait_for(lambda: n0.counters["foreign_interface"] >= 1, 10)
        assert n0.peers.peers == {}
        assert n0.counters["spoof_wrong_key"] == n0.counters["challenge_unreachable"] == 0


async def test_an_announcement_heard_while_its_peers_hello_is_checked_gives_the_peer_its_name(
    tmp_path: Path,
) -> None:
    """Regression (CI, avahi interop): b's signed hello reached a before b's announcement did.
    The hello starts a challenge of b's endpoint (no name); the announcement, heard while that
    challenge was in flight, was dropped as a duplicate challenge, so a trusted b without ever
    learning its mDNS name (its goodbye would go unrecognised)."""
    a = node(tmp_path, "a", "rpi5")
    answer = asyncio.Event()

    class SlowPeer:  # b, answering a's challenge once released
        calls = 0

        async def call(self, *args: object) -> Reply:
            SlowPeer.calls += 1
            await answer.wait()
            return Reply(200, {"agent_id": "b"}, 0.001)

    a.client = SlowPeer()  # type: ignore[assignment]
    await a.on_hello("b", "127.0.0.9", {"api_port": 9001, "version": "0.1.0", "kinds": "npu:1"})
    await asyncio.sleep(0)
    a._on_hint(Hint("b", "0.1.0", 9001, KEY.fingerprint, "npu:1", "127.0.0.9", "b-name"))
    answer.set()
    await a.wait_for(lambda: a.trusts("b"), 5)
    assert SlowPeer.calls == 1  # one challenge for the endpoint, not two
    assert a.counters["trusted_via_hello"] == 1 and a.counters["names_seen"] == 1
    assert a.peers.goodbye("b-name") == "b"  # the name is b's: its goodbye is recognised
