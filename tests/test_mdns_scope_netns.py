"""mDNS stays on the interfaces an agent serves: seen from another host (network namespaces).

Host 0 runs two mesh nodes: one bound to 127.0.0.1 (documented as "keeps it on one
machine") and one bound to host 0's LAN address. A plain zeroconf browser on host 1 (an
outsider, querying with the QU bit as browsers do first) must see the LAN node, whose
answer shows the browser works, and never the loopback one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_agent.mesh.advertise import SERVICE_TYPE
from edge_agent.mesh.netns import ROOT, Lan, NetnsUnavailable
from edge_agent.mesh.netns_processes import NodeProcess
from edge_agent.protocol.hub_discovery import HUB_SERVICE_TYPE

pytestmark = pytest.mark.slow
KEY_TEXT = "mdns-scope-test-fleet-key-000000"

#: Browse a service type from one address for a while; print {instance: [addresses]}.
BROWSE = """
import asyncio, json, sys
from zeroconf import IPVersion, ServiceStateChange
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf
async def main() -> None:
    address, seconds, kind = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    aiozc = AsyncZeroconf(interfaces=[address], ip_version=IPVersion.V4Only)
    names: set[str] = set()
    def changed(zeroconf, service_type, name, state_change) -> None:
        if state_change is not ServiceStateChange.Removed:
            names.add(name)
    browser = AsyncServiceBrowser(aiozc.zeroconf, kind, handlers=[changed])
    await asyncio.sleep(seconds)
    seen = {}
    for name in sorted(names):
        info = AsyncServiceInfo(kind, name)
        await info.async_request(aiozc.zeroconf, 1000)
        seen[name] = info.parsed_addresses(IPVersion.V4Only)
    await browser.async_cancel()
    await aiozc.async_close()
    print(json.dumps(seen))
asyncio.run(main())
"""


#: Announce two hubs from one host, on loopback and on the LAN address (argv: address).
HUBS = """
import asyncio, sys
from cloud_hub.hub.advertise import HubAdvertiser
async def main() -> None:
    loop, lan = HubAdvertiser("hub-loop", "127.0.0.1", 1), HubAdvertiser("hub-lan", sys.argv[1], 1)
    hubs = [loop, lan]
    for hub in hubs:
        await hub.start()
    print("ready", flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


@pytest.fixture(scope="module")
def lan() -> Iterator[Lan]:
    try:
        net = Lan(hosts=2)
    except NetnsUnavailable as err:
        pytest.skip(f"network namespaces unavailable: {err}")
    try:
        yield net
    finally:
        net.close()


def _browse(lan: Lan, host: int, seconds: float, kind: str) -> dict[str, list[str]]:
    cmd = ["ip", "netns", "exec", lan.ns(host), sys.executable, "-c", BROWSE]
    proc = subprocess.run(
        [*cmd, lan.address(host), str(seconds), kind],
        capture_output=True,
        timeout=seconds + 30,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    seen: dict[str, list[str]] = json.loads(proc.stdout)
    return seen


def test_an_agent_on_loopback_is_invisible_from_another_host(lan: Lan, tmp_path: Path) -> None:
    key = tmp_path / "fleet.key"
    key.write_text(KEY_TEXT, encoding="utf-8")
    local = NodeProcess(lan.ns(0), tmp_path, "on-loopback", "rpi5", "127.0.0.1", key)
    shared = NodeProcess(lan.ns(0), tmp_path, "on-the-lan", "rpi5", lan.address(0), key)
    try:
        local.wait_ready()
        shared.wait_ready()
        seen = _browse(lan, 1, 3.0, SERVICE_TYPE)
        local_status = local.status()
    finally:
        local.stop()
        shared.stop()
    # the companion: the same browser sees the node that serves the LAN, at its LAN address
    assert seen.get("on-the-lan._hetmesh._tcp.local.") == [lan.address(0)], seen
    # the loopback node never answered it: neither its name nor an A record of 127.0.0.1
    assert "on-loopback._hetmesh._tcp.local." not in seen, seen
    assert all("127.0.0.1" not in addresses for addresses in seen.values()), seen
    # and it never acts on the LAN node it shares the host with: not even a challenge
    assert local_status["peers"] == [], local_status["peers"]


def test_a_hub_announced_on_loopback_is_invisible_from_another_host(lan: Lan) -> None:
    cmd = ["ip", "netns", "exec", lan.ns(0), sys.executable, "-c", HUBS, lan.address(0)]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    hubs = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert hubs.stdout is not None and hubs.stdout.readline() == b"ready\n"
        seen = _browse(lan, 1, 3.0, HUB_SERVICE_TYPE)
    finally:
        hubs.kill()
        hubs.wait(5)
        if hubs.stdout is not None:
            hubs.stdout.close()
    assert seen.get(f"hub-lan.{HUB_SERVICE_TYPE}") == [lan.address(0)], seen
    assert f"hub-loop.{HUB_SERVICE_TYPE}" not in seen, seen
