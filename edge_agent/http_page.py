"""One HTML head for the agent's status page and the hub's dashboard, and their shared files.

Each page keeps only its ``<main>`` and footer in ``body.html``; ``html_page`` puts the
shared head and header (``page_assets/head.html``: charset, viewport, title, stylesheets,
deferred scripts, the page header with its summary and connection badge) before it, once,
when the server starts. The head's stylesheet ``base.css`` and the script ``common.js`` are
shared files too (``page_assets/``), served at ``/base.css`` and ``/common.js`` by
``add_shared_files``.
"""

from __future__ import annotations

import html
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from aiohttp import web

#: The files both pages share: head.html, base.css, common.js.
ASSETS = Path(__file__).with_name("page_assets")
HEAD = ASSETS / "head.html"
#: The shared files a page loads, served at the root of both services.
SHARED_FILES = ("base.css", "common.js")
#: Pages load their own files only; they are small and change with the package.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'", "Cache-Control": "no-cache"}


def html_page(
    body: Path, name: str, summary: str, styles: Sequence[str], scripts: Sequence[str]
) -> bytes:
    """Return the page: the shared head and page header ("hetmesh ``name``", an empty
    ``#summary`` described as ``summary``, ``#conn`` saying loading…) with ``styles`` and
    ``scripts`` (URLs), then ``body`` (a file holding ``<main>…</main>…</body></html>``).
    The body starts with class ``loading``: the page's script removes it with its first
    data."""
    links = [f'  <link rel="stylesheet" href="{html.escape(s)}">' for s in styles]
    links += [f'  <script src="{html.escape(s)}" defer></script>' for s in scripts]
    head = HEAD.read_text().format(
        name=html.escape(name), summary=html.escape(summary), links="\n".join(links)
    )
    return (head + body.read_text()).encode()


def page_handler(page: bytes) -> Callable[[web.Request], Awaitable[web.Response]]:
    """Return a handler that answers with ``page`` (from ``html_page``)."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", headers=PAGE_HEADERS)

    return handler


def add_shared_files(router: web.UrlDispatcher) -> None:
    """Serve the shared files at ``/base.css`` and ``/common.js`` (the same paths on both)."""
    for name in SHARED_FILES:
        router.add_get(f"/{name}", _shared_file(ASSETS / name))


def _shared_file(path: Path) -> Callable[[web.Request], Awaitable[web.FileResponse]]:
    async def handler(request: web.Request) -> web.FileResponse:
        return web.FileResponse(path, headers=PAGE_HEADERS)

    return handler
