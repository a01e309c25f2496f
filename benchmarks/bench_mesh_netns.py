"""Mesh across network namespaces: join time of a new host, and mDNS traffic with 10 hosts.

    sudo python benchmarks/bench_mesh_netns.py [--hosts 10] [--joins 5] [--window-s 20]
        [--settle-s 5]

Builds a throwaway LAN (a bridge namespace and one namespace per host, private addresses
inside them only), runs one ``python -m edge_agent.mesh`` process per host, and measures:

* ``discovery_netns_ms`` (p50; ``_max_ms``, ``_n`` joins): from a new host's node listening
  (state file written, mDNS registration begun) until every other host trusts it and it
  trusts them all; polled over the nodes' admin sockets every 20 ms. ``--joins`` new hosts
  join one after another, each in its own namespace, with a fresh identity, beside the
  ``--hosts`` - 1 resident ones; each joiner but the last is stopped before the next one
  starts. ``discovery_netns_spawn_ms`` adds process start-up.
* ``mdns_pkts_per_s``: UDP port-5353 packets *sent by the hosts* (frames entering the
  bridge's veth ports, counted by an AF_PACKET socket in the bridge namespace) per second,
  over ``--window-s`` after all hosts trust each other and ``--settle-s`` has passed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edge_agent.mesh.netns import Lan
from edge_agent.mesh.netns_processes import NodeProcess

COUNTER = """
import socket, sys, time
prefix, window = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL
s.settimeout(0.2)
n = total = 0
end = time.monotonic() + window
while time.monotonic() < end:
    try:
        frame, (ifname, _proto, pkttype, *_rest) = s.recvfrom(65535)
    except TimeoutError:
        continue
    if not ifname.startswith(prefix) or pkttype == socket.PACKET_OUTGOING:
        continue
    total += 1
    if frame[12:14] == b"\\x08\\x00" and frame[23] == 17:  # IPv4, UDP
        ihl = (frame[14] & 0x0F) * 4
        ports = frame[14 + ihl : 14 + ihl + 4]
        if ports[:2] == b"\\x14\\xe9" or ports[2:] == b"\\x14\\xe9":  # 5353
            n += 1
print(n, total)
"""


def wait_all_trusted(nodes: list[NodeProcess], timeout_s: float) -> None:
    """Return once every node trusts every other; TimeoutError if not within timeout."""
    ids = {n.agent_id for n in nodes}
    deadline = time.monotonic() + timeout_s
    pending = list(nodes)
    while pending:
        pending = [n for n in pending if not n.online() >= ids - {n.agent_id}]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{[n.agent_id for n in pending]} not converged in {timeout_s}s")
        time.sleep(0.02)


def main() -> None:
    """Run the benchmark and print figures, JSON last."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=10)
    p.add_argument("--window-s", type=float, default=20.0)
    p.add_argument("--settle-s", type=float, default=5.0)
    p.add_argument("--joins", type=int, default=5, help="joins timed (>= 1)")
    args = p.parse_args()
    joins = max(1, args.joins)
    lan = Lan(hosts=args.hosts - 1 + joins)
    work = Path(tempfile.mkdtemp(prefix="hmbench-"))
    key_file = work / "fleet.key"
    key_file.write_text("bench-netns-fleet-key-0000000000", encoding="utf-8")
    nodes: list[NodeProcess] = []
    join_ms: list[float] = []
    spawn_ms: list[float] = []
    try:

        def spawn(i: int, profile: str) -> NodeProcess:
            node = NodeProcess(lan.ns(i), work, f"host{i}", profile, lan.address(i), key_file)
            nodes.append(node)
            return node

        for i in range(args.hosts - 1):
            spawn(i, "rk3588" if i == 0 else "rpi5")
        for n in nodes:
            n.wait_ready(90.0)  # residents start together: slow on a loaded machine, not timed
        wait_all_trusted(nodes, 60)
        for j in range(joins):
            spawned = time.perf_counter()
            new = spawn(args.hosts - 1 + j, "intel_n100")
            new.wait_ready()
            ready = time.perf_counter()
            wait_all_trusted(nodes, 30)
            done = time.perf_counter()
            join_ms.append((done - ready) * 1e3)
            spawn_ms.append((done - spawned) * 1e3)
            if j < joins - 1:  # make room for the next joiner: 10 hosts again
                new.stop()
                nodes.remove(new)
        time.sleep(args.settle_s)
        ports = f"{lan.tag}b"  # the bridge's ends of the host veths
        counter = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                lan.bridge_ns,
                sys.executable,
                "-c",
                COUNTER,
                ports,
                str(args.window_s),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=args.window_s + 30,
        )
        mdns, frames = (int(x) for x in counter.stdout.split())
        wait_all_trusted(nodes, 5)  # still converged at the end of the window
    finally:
        for n in nodes:
            n.stop()
        lan.close()
        shutil.rmtree(work)
    figures = {
        "hosts": args.hosts,
        "discovery_netns_ms": round(statistics.median(join_ms), 1),
        "discovery_netns_max_ms": round(max(join_ms), 1),
        "discovery_netns_n": len(join_ms),
        "discovery_netns_spawn_ms": round(statistics.median(spawn_ms), 1),
        "discovery_netns_spawn_max_ms": round(max(spawn_ms), 1),
        "mdns_pkts_per_s": round(mdns / args.window_s, 2),
        "all_pkts_per_s": round(frames / args.window_s, 2),
        "window_s": args.window_s,
        "counted_with": "AF_PACKET on the bridge's veth ports (frames sent by the hosts)",
    }
    for k, v in figures.items():
        print(f"{k}: {v}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
