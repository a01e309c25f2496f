"""mDNS kept to the interfaces a service serves, and discovery to addresses reachable there.

python-zeroconf, given ``interfaces=[addresses]``, joins the mDNS group only on those, but it
receives on one socket bound to ``0.0.0.0:5353``. Linux hands such a socket the multicast
arriving on *any* interface where something on the box joined the group (``IP_MULTICAST_ALL``
is on by default) and unicast sent to any local address; zeroconf answers them all, so an
agent on 127.0.0.1 answered queries from the LAN with an A record of 127.0.0.1. ``confine``
turns ``IP_MULTICAST_ALL`` off on zeroconf's sockets and binds each to its device
(``SO_BINDTODEVICE``; the shared one only when every address is on one device, else it is
limited to the groups it joined). ``Scope.allows`` tells which announced addresses an agent
may act on: only those in the networks of the interfaces it serves.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import ifaddr
from zeroconf import IPVersion
from zeroconf.asyncio import AsyncZeroconf

_log = logging.getLogger(__name__)

#: Linux's IP_MULTICAST_ALL (Python's socket module does not name it).
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)


@dataclass(frozen=True)
class Scope:
    """The interfaces one service serves: their devices and networks."""

    devices: dict[str, str]  # address -> device name ("" when no device has it)
    networks: tuple[ipaddress.IPv4Network, ...]

    @classmethod
    def of(cls, addresses: Sequence[str]) -> Scope:
        """Return the scope of ``addresses`` (IPv4) as this machine's interfaces define it."""
        devices: dict[str, str] = {}
        networks: list[ipaddress.IPv4Network] = []
        adapters = ifaddr.get_adapters()
        for text in addresses:
            address = ipaddress.IPv4Address(text)
            devices[text] = ""
            network = ipaddress.IPv4Network(text)
            for adapter in adapters:
                for ip in adapter.ips:
                    if not isinstance(ip.ip, str):
                        continue  # IPv6
                    iface = ipaddress.IPv4Interface(f"{ip.ip}/{ip.network_prefix}")
                    if iface.ip == address or (address.is_loopback and address in iface.network):
                        devices[text], network = (
                            adapter.name.split(":")[0],
                            iface.network,
                        )  # eth0:1: eth0
            networks.append(network)
        return cls(devices, tuple(networks))

    def allows(self, address: str) -> bool:
        """Return whether ``address`` is reachable on an interface this service serves."""
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.networks)


async def confined_zeroconf(addresses: Sequence[str]) -> tuple[AsyncZeroconf, Scope]:
    """Return an IPv4 AsyncZeroconf that hears and answers only on ``addresses``' interfaces."""
    scope = Scope.of(addresses)
    aiozc = AsyncZeroconf(interfaces=list(addresses), ip_version=IPVersion.V4Only)
    try:
        await aiozc.zeroconf.async_wait_for_start()
        confine(aiozc, scope)
    except BaseException:
        await aiozc.async_close()
        raise
    return aiozc, scope


def confine(aiozc: AsyncZeroconf, scope: Scope) -> None:
    """Limit a started AsyncZeroconf's sockets to ``scope``'s devices."""
    shared = set(scope.devices.values())
    only = next(iter(shared)) if len(shared) == 1 else ""
    for reader in aiozc.zeroconf.engine.readers:
        sock = reader.transport.get_extra_info("socket")
        bound = sock.getsockname()[0]
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
        device = only if bound == "0.0.0.0" else scope.devices.get(bound, "")
        if device:
            _bind_to_device(sock, device)
        elif bound == "0.0.0.0":
            _log.info(
                "mDNS on several devices (%s): multicast is kept to them, but unicast "
                "queries to port 5353 of other local addresses still reach it",
                ", ".join(sorted(shared)),
            )


def _bind_to_device(sock: socket.socket, device: str) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
    except PermissionError:  # before Linux 5.7 this needs CAP_NET_RAW
        _log.warning(
            "mDNS: cannot bind to device %s (needs Linux >= 5.7 or CAP_NET_RAW): "
            "unicast queries from other interfaces may still be answered",
            device,
        )
    except OSError as err:
        _log.warning("mDNS: cannot bind to device %s: %s", device, err)
