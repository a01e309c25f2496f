"""A local-only control channel for a standalone node: HTTP over a Unix socket (mode 0600).

Tests and benchmarks drive node processes through it, including nodes in other network
namespaces (a Unix socket lives in the file system, not in a network namespace). Routes:
``GET /status``, ``POST /tasks`` (``{"contract": {...}, "payload": {...}, "key": "..."}``)
and ``GET /ledger/{key}``. It is never bound to a network address.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from edge_agent.mesh.node import MeshNode
from edge_agent.placement import TaskContract

ADMIN_NODE = web.AppKey("mesh_admin_node", MeshNode)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"ok": False, "error": message, "status": status}, status=status)


async def _status(request: web.Request) -> web.Response:
    return web.json_response(request.app[ADMIN_NODE].status())


async def _submit(request: web.Request) -> web.Response:
    node = request.app[ADMIN_NODE]
    try:
        doc: Any = json.loads(await request.read())
        if not isinstance(doc, dict) or not isinstance(doc.get("contract"), dict):
            raise ValueError("body must be a JSON object with a 'contract' object")
        contract = TaskContract.from_dict(doc["contract"])
        payload = doc.get("payload") or {}
        key = doc.get("key")
        if not isinstance(payload, dict) or not (key is None or isinstance(key, str)):
            raise ValueError("'payload' must be an object and 'key' a string")
    except (ValueError, KeyError, TypeError) as err:
        return _error(400, f"bad task: {err}")
    return web.json_response(await node.submit(contract, payload, key))


async def _ledger(request: web.Request) -> web.Response:
    node = request.app[ADMIN_NODE]
    return web.json_response(await node.ledger.attempts(request.match_info["key"]))


@asynccontextmanager
async def serve_admin(node: MeshNode, path: str) -> AsyncIterator[None]:
    """Serve the control routes for ``node`` on the Unix socket ``path`` (owner-only)."""
    app = web.Application()
    app[ADMIN_NODE] = node
    app.router.add_get("/status", _status)
    app.router.add_post("/tasks", _submit)
    app.router.add_get("/ledger/{key}", _ledger)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    old = os.umask(0o177)
    try:
        await web.UnixSite(runner, path).start()
    finally:
        os.umask(old)
    try:
        yield
    finally:
        await runner.cleanup()
