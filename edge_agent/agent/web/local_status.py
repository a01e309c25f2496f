"""The agent's own status page: ``GET /`` (HTML) and ``GET /v1/status`` (what it shows).

It needs nothing but the agent itself, so it works with no hub configured or the hub gone:
health, devices with live utilization, the queue (deferred tasks counted, each listed with
its ``held_until``), recent tasks with their decision summary, the mesh peers with their
state and round-trip time, the hub link's state and the policy in force. The page's own
files are in ``status_page/`` beside this module (the head, ``/base.css`` and ``/common.js``:
``edge_agent.http_page``); it polls ``/v1/status`` once a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from edge_agent.agent.core.deferral import held_until
from edge_agent.agent.hub.devices import DeviceReporter
from edge_agent.agent.service import Agent
from edge_agent.http_page import add_shared_files, html_page, page_handler

STATUS_PAGE = Path(__file__).with_name("status_page")
#: Recent tasks the page lists.
RECENT_TASKS = 15
#: Deferred (held) tasks the page lists; the queue figure counts them all.
DEFERRED_TASKS = 50
_TASK_FIELDS = ("id", "state", "device", "tenant", "priority", "submitted_at", "finished_at")


async def status_document(agent: Agent, reporter: DeviceReporter) -> dict[str, Any]:
    """Return everything the status page shows, from the agent's own state."""
    ex = agent.executor
    devices = [
        {**entry, "running_tasks": [job.task_id for job in ex.running_jobs(entry["id"])]}
        for entry in reporter.entries()
    ]
    tasks = []
    for row in await agent.store.list(None, RECENT_TASKS):
        doc = {k: row.get(k) for k in _TASK_FIELDS}
        result = row.get("result") or {}
        doc["latency_s"] = result.get("latency_s") if isinstance(result, dict) else None
        doc["error"] = row.get("error")
        decision = await agent.store.decision(row["id"])
        doc["why_here"] = None if decision is None else decision.get("summary")
        tasks.append(doc)
    counts = await agent.store.counts()
    deferred = [
        {"id": row["id"], "held_until": held_until(row), "submitted_at": row.get("submitted_at")}
        for row in await agent.store.list("deferred", DEFERRED_TASKS)
    ]
    return {
        "ok": True,
        "health": agent.health(),
        "devices": devices,
        "tasks": tasks,
        "counts": counts,
        "queue": {  # waiting for a device now, held for a later hour, running on a device
            "waiting": agent.scheduler.depth(),
            "deferred": counts.get("deferred", 0),
            "running": counts.get("running", 0),
        },
        "deferred": deferred,
        "mesh": _mesh(agent),
        "policy": agent.policy.to_dict(),
    }


def _mesh(agent: Agent) -> dict[str, Any]:
    """Return the mesh as ``GET /v1/peers`` shows it (``enabled: false`` without a mesh)."""
    if agent.mesh is None:
        return {"enabled": False, "agent_id": None, "peers": []}
    doc = agent.mesh.peers_doc()
    return {"enabled": True, "agent_id": doc["agent_id"], "peers": doc["peers"]}


def add_status_routes(app: web.Application, agent_key: web.AppKey[Agent]) -> None:
    """Serve the status page at ``/`` (files under ``/status/``) and its data at ``/v1/status``."""

    reporters: dict[int, DeviceReporter] = {}  # one per running agent, made on first use

    async def status(request: web.Request) -> web.Response:
        agent = request.app[agent_key]
        reporter = reporters.get(id(agent))
        if reporter is None:  # utilization is the busy share since the previous poll
            reporter = DeviceReporter(agent.fleet, agent.placer, agent.executor.busy_s.__getitem__)
            reporters.clear()
            reporters[id(agent)] = reporter
        return web.json_response(await status_document(agent, reporter))

    page = html_page(
        STATUS_PAGE / "body.html",
        "agent",
        "agent health",
        ["/base.css", "/status/style.css"],
        ["/common.js", "/status/app.js"],
    )
    app.router.add_get("/", page_handler(page))
    app.router.add_get("/v1/status", status)
    add_shared_files(app.router)  # base.css, common.js: the hub's dashboard loads them too
    app.router.add_static("/status/", STATUS_PAGE, append_version=False)
