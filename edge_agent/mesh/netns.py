"""A throwaway LAN of Linux network namespaces for mesh tests and benchmarks (needs root).

One bridge namespace and N host namespaces, each joined to the bridge by a veth pair, with
multicast on and a 224.0.0.0/4 route on every host interface. Addresses come from a private
test range and exist only inside these namespaces; nothing is routed out of them, and no
link is ever created in the caller's namespace. Node processes run there with
``ip netns exec``; the test drives them over their Unix admin sockets (file system, not
network, so they reach across namespaces): ``netns_processes``. ``netns_fleet`` starts a
fleet of them on a fresh LAN for a test.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from pathlib import Path

#: The /24 the hosts live in: 10.99.0.11, .12, ... (inside the namespaces only).
SUBNET = "10.99.0"
#: How long a node or agent process in a namespace may take to come up: a bound, not a wait
#: (a daemon on a busy 2-core box, importing, checking its database, can take tens of s).
START_TIMEOUT_S = 90.0
ROOT = Path(__file__).resolve().parents[2]


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, or no ``ip netns``)."""


def _ip(*args: str, first: bool = False) -> None:
    """Run ``ip``; a failure of the ``first`` call means namespaces are unavailable here."""
    try:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        raise NetnsUnavailable("the 'ip' command (iproute2) is not installed") from None
    if proc.returncode != 0:
        error = NetnsUnavailable if first else RuntimeError
        raise error(f"ip {' '.join(args)}: {proc.stderr.strip()}")


class Lan:
    """A bridge namespace plus ``hosts`` host namespaces; ``close()`` deletes them all."""

    def __init__(self, hosts: int) -> None:
        if os.geteuid() != 0:
            raise NetnsUnavailable("network namespaces need root")
        self.tag = f"hm{uuid.uuid4().hex[:6]}"  # unique per run; veth names stay <= 15 chars
        self.bridge_ns = f"{self.tag}-br"
        self.names: list[str] = []
        try:
            _ip("netns", "add", self.bridge_ns, first=True)
            self.names.append(self.bridge_ns)
            _ip("-n", self.bridge_ns, "link", "set", "lo", "up")
            _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
            _ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            for i in range(hosts):
                self.add_host(i)
        except BaseException:
            self.close()
            raise

    def ns(self, i: int) -> str:
        """Return host ``i``'s namespace name."""
        return f"{self.tag}-h{i}"

    def address(self, i: int) -> str:
        """Return host ``i``'s address."""
        return f"{SUBNET}.{11 + i}"

    def host_if(self, i: int) -> str:
        """Return host ``i``'s interface name (inside its namespace)."""
        return f"{self.tag}h{i}"

    def add_host(self, i: int) -> None:
        """Create host ``i``: a namespace, a veth pair to the bridge, address and routes."""
        ns, dev, peer = self.ns(i), self.host_if(i), f"{self.tag}b{i}"
        _ip("netns", "add", ns)
        self.names.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer,
            "netns", self.bridge_ns)  # fmt: skip
        _ip("-n", self.bridge_ns, "link", "set", peer, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", dev)
        _ip("-n", ns, "link", "set", dev, "multicast", "on", "up")
        _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", dev)

    def link(self, i: int, up: bool) -> None:
        """Cut (``up=False``) or restore host ``i``'s link, on the host's side."""
        _ip("-n", self.ns(i), "link", "set", self.host_if(i), "up" if up else "down")
        if up:
            with contextlib.suppress(NetnsUnavailable):  # the route goes with the link
                _ip("-n", self.ns(i), "route", "add", "224.0.0.0/4", "dev", self.host_if(i))

    def close(self) -> None:
        """Delete every namespace this LAN made (its veths go with them)."""
        for name in reversed(self.names):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        self.names.clear()
