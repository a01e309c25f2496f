"""Capture and replay of HTTP requests and /metrics reads for the attack tests; conftest's
``recorder``, ``replay`` and ``metric`` fixtures."""

from __future__ import annotations

from typing import Any

import aiohttp

#: A captured request: (URL, headers, body).
Sent = tuple[str, dict[str, str], bytes]


class Recorder:
    """A real ClientSession whose requests (URL, headers, body bytes) are kept as sent."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(self._start)
        trace.on_request_chunk_sent.append(self._chunk)
        self.session = aiohttp.ClientSession(trace_configs=[trace])

    async def _start(self, _s: Any, ctx: Any, params: aiohttp.TraceRequestStartParams) -> None:
        ctx.index = len(self.sent)  # this request's entry: another may start before its body
        self.sent.append((str(params.url), dict(params.headers), b""))

    async def _chunk(self, _s: Any, ctx: Any, params: aiohttp.TraceRequestChunkSentParams) -> None:
        url, headers, body = self.sent[ctx.index]
        self.sent[ctx.index] = (url, headers, body + params.chunk)

    def last(self, url_end: str) -> Sent:
        """Return the last request whose URL ends with ``url_end``."""
        return [s for s in self.sent if s[0].endswith(url_end)][-1]


async def replay(sent: Sent, port: int, source: str = "127.0.0.1") -> tuple[int, Any]:
    """Send a capture's path, headers and body unchanged to ``127.0.0.1:port`` from ``source``."""
    url, headers, body = sent
    path = url.split("/", 3)[3]
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.post(f"http://127.0.0.1:{port}/{path}", data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.json()


async def metric(session: Any, url: str, sample: str) -> float:
    async with session.get(url) as resp:
        text = await resp.text()
    found = [ln for ln in text.splitlines() if ln.startswith(sample + " ")]
    return float(found[0].split()[-1]) if found else 0.0
