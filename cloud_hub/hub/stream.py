"""The dashboard's live feed: server-sent events carrying the fleet snapshot as it changes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from cloud_hub.hub.service import Hub

#: Seconds between keep-alive comments on an idle stream (patchable in tests).
KEEPALIVE_S = 15.0
_CLOSE = ""


class Broadcaster:
    """Fan-out of the latest snapshot to subscribers; a slow one skips to the newest."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[str]] = set()

    def subscribe(self) -> asyncio.Queue[str]:
        """Return a queue that receives every later snapshot (the newest only, if behind)."""
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        self._queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[str]) -> None:
        """Stop sending to ``queue``."""
        self._queues.discard(queue)

    def __len__(self) -> int:
        return len(self._queues)

    def publish(self, text: str) -> None:
        """Offer ``text`` to every subscriber, replacing any snapshot it has not read yet."""
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(text)

    def close(self) -> None:
        """End every open stream (the hub is shutting down)."""
        self.publish(_CLOSE)


def _event(text: str) -> bytes:
    return f"event: fleet\ndata: {text}\n\n".encode()


def events(key: web.AppKey[Hub]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Return the ``GET /v1/events`` handler: the snapshot now, then each change."""

    async def handler(request: web.Request) -> web.StreamResponse:
        hub = request.app[key]
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await resp.prepare(request)
        queue = hub.stream.subscribe()
        hub.metrics.stream_clients.set(len(hub.stream))
        try:
            first: dict[str, Any] = await hub.snapshot()
            await resp.write(_event(json.dumps(first)))
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_S):
                        text = await queue.get()
                except TimeoutError:
                    await resp.write(b": keep-alive\n\n")
                    continue
                if text == _CLOSE:
                    break
                await resp.write(_event(text))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            hub.stream.unsubscribe(queue)
            hub.metrics.stream_clients.set(len(hub.stream))
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
        return resp

    return handler
