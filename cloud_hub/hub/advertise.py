"""Announcing the hub over mDNS as ``_hetmesh-hub._tcp.local.`` (``[discovery] advertise``).

The TXT record carries non-secret hints only (hub id, version, port, scheme); agents that find
the hub this way make it prove the join token first (``edge_agent.protocol.hub_discovery``). The
record format is defined there, the mDNS socket setup by the mesh (``confined_zeroconf``).
"""

from __future__ import annotations

import logging
import socket

from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

from edge_agent import __version__
from edge_agent.mesh.mdns_scope import confined_zeroconf
from edge_agent.protocol.hub_discovery import HUB_SERVICE_TYPE, hub_txt

_log = logging.getLogger(__name__)


class HubAdvertiser:
    """Registers the hub's service record on one IPv4 address; ``start`` then ``stop``."""

    def __init__(self, hub_id: str, address: str, port: int, scheme: str = "http") -> None:
        self.props = hub_txt(hub_id, __version__, port, scheme)
        self.address = address
        self.info = AsyncServiceInfo(
            HUB_SERVICE_TYPE,
            f"{hub_id}.{HUB_SERVICE_TYPE}",
            addresses=[socket.inet_aton(address)],
            port=port,
            properties=dict(self.props),
            server=f"{hub_id}.local.",
        )
        self._zc: AsyncZeroconf | None = None

    async def start(self) -> None:
        """Probe the name and announce it (a clashing name gets a suffix), heard and answered
        only on the announced address's interface."""
        self._zc, _ = await confined_zeroconf([self.address])
        await self._zc.async_register_service(self.info, allow_name_change=True)
        _log.info(
            "announcing hub %s as %s on %s:%s",
            self.props["id"],
            HUB_SERVICE_TYPE,
            self.address,
            self.props["port"],
        )

    async def stop(self) -> None:
        """Withdraw the announcement (goodbye packets) and close the mDNS sockets."""
        if self._zc is not None:
            await self._zc.async_unregister_all_services()
            await self._zc.async_close()
