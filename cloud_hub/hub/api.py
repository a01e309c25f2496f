"""The hub's HTTP API (aiohttp): enrol, signed heartbeat and outbox sync, fleet views, policies.

Every error is ``{"ok": false, "error": "<what to fix>", "status": <code>}``.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from cloud_hub.hub import models_api, wire
from cloud_hub.hub.clock import Clock
from cloud_hub.hub.config import HubConfig
from cloud_hub.hub.openapi import document
from cloud_hub.hub.policies import NotFound
from cloud_hub.hub.request_auth import HUB, Handler, require_admin, sign_answers, signed_request
from cloud_hub.hub.service import Hub
from cloud_hub.hub.stream import events
from edge_agent.http_errors import (
    ApiError,
    json_errors,
    missing_files,
    parse_json_body,
)
from edge_agent.http_limits import BODY_CAP, GUARD, ConnectionGuard, ServerLimits
from edge_agent.http_logging import quiet_bad_requests
from edge_agent.http_page import add_shared_files, html_page, page_handler
from edge_agent.protocol.hub_auth import AGENT_HEADER, hub_proof
from edge_agent.protocol.hub_discovery import PROOF_PATH, check_nonce

_log = logging.getLogger(__name__)

DASHBOARD = Path(__file__).with_name("dashboard")


_errors = json_errors("the hub", {NotFound: 404})


async def _enrol(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    e = wire.enrolment(parse_json_body(await request.read()))
    if not hmac.compare_digest(e.join_token.encode(), hub.join_token.encode()):
        hub.metrics.auth_failures.labels("join_token").inc()
        raise ApiError(401, "wrong join token: ask the hub operator for the fleet's join token")
    if hub.store.key(e.agent_id) is not None:  # taken: only its key's holder may re-enrol
        await _prove_current_key(request, e.agent_id)
    key = await hub.store.enrol(e, hub.clock())
    _log.debug("agent %s enrolled (board %s)", e.agent_id, e.board)
    return web.json_response(
        {
            "ok": True,
            "agent_id": e.agent_id,
            "hub_id": hub.hub_id,  # whom the agent signs its requests for
            "key": key,
            "heartbeat_interval_s": hub.heartbeat_interval_s(),
        },
        status=201,
    )


async def _prove_current_key(request: web.Request, agent_id: str) -> None:
    """Raise unless this enrolment is signed with the enrolled agent's current key.

    The join token is every box's, so it cannot decide who an agent id belongs to: without
    this, any box could enrol under another's id and take over its identity (its policies,
    its records, its SuperNode key). 409 ``reason: "enrolled"`` to an unsigned request (the
    agent then signs it with the key it holds); 401 to a signature that does not hold.
    """
    release = f"`cloud-hub agents release {agent_id}` on the hub"
    if AGENT_HEADER not in request.headers:
        raise ApiError(
            409,
            f"agent id {agent_id!r} is enrolled already: re-enrol signed with its current key; "
            f"if that box is gone or lost its key, release the id first ({release})",
            reason="enrolled",
        )
    try:
        await signed_request(request, agent_id)
    except ApiError as err:
        if err.status != 401 or err.fields.get("reason") == "stale":
            raise
        raise ApiError(
            401,
            f"agent id {agent_id!r} is enrolled with another key ({err}); to give the id "
            f"to this box, release it first ({release})",
        ) from None


async def _release(request: web.Request) -> web.Response:
    """Forget an agent's key (admin): its id may then be enrolled by whoever has the token."""
    require_admin(request)
    agent_id = request.match_info["agent_id"]
    if not await request.app[HUB].store.release(agent_id):
        raise ApiError(404, f"no enrolled agent {agent_id!r} (GET /v1/agents lists them)")
    _log.warning("agent %s released by the admin: its id may be enrolled again", agent_id)
    return web.json_response({"ok": True, "agent_id": agent_id, "released": True})


async def _proof(request: web.Request) -> web.Response:
    """Answer a nonce with proof of the join token, bound to the address the question came to."""
    hub = request.app[HUB]
    doc = parse_json_body(await request.read())
    nonce = check_nonce(doc.get("nonce") if isinstance(doc, dict) else None)
    sock = None if request.transport is None else request.transport.get_extra_info("sockname")
    if not isinstance(sock, tuple) or len(sock) < 2:
        raise ApiError(503, "cannot tell which address this request arrived on; retry")
    endpoint = f"{sock[0]}:{sock[1]}"
    proof = hub_proof(hub.join_token, hub.hub_id, endpoint, nonce)
    return web.json_response(
        {"ok": True, "hub_id": hub.hub_id, "endpoint": endpoint, "proof": proof}
    )


async def _heartbeat(request: web.Request) -> web.Response:
    hub, started = request.app[HUB], time.perf_counter()
    agent_id, body = await signed_request(request)
    doc = parse_json_body(body)
    hb = wire.heartbeat(doc)
    hub.reevaluator.observe(agent_id, doc)  # its grid, work and move outcomes (re-evaluation)
    hub.mesh_links.observe(agent_id, doc, hub.clock())  # its mesh peers, state and RTT
    desired = await hub.store.heartbeat(agent_id, hb, hub.clock())
    reply: dict[str, Any] = {
        "ok": True,
        "heartbeat_interval_s": hub.heartbeat_interval_s(),
        "desired_policy": None,
        "policy": None,
        "moves": hub.reevaluator.pending(agent_id),  # work to forward to a peer (§12)
    }
    if desired is not None:
        reply["desired_policy"] = f"{desired['name']}@{desired['version']}"
        if hb.policy != (desired["name"], desired["version"]):
            reply["policy"] = desired
    hub.metrics.heartbeats.inc()
    hub.metrics.heartbeat_seconds.observe(time.perf_counter() - started)
    return web.json_response(reply)


async def _reevaluation(request: web.Request) -> web.Response:
    """The latest fleet re-evaluation and the moves issued (``?fresh=1``: evaluate now)."""
    hub = request.app[HUB]
    if request.query.get("fresh") == "1":
        return web.json_response({"ok": True, **await hub.reevaluator.evaluate_hub(hub)})
    return web.json_response({"ok": True, **hub.reevaluator.view()})


async def _sync(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    agent_id, body = await signed_request(request)
    batch = wire.sync_batch(parse_json_body(body))
    result = await hub.store.sync(agent_id, batch, hub.clock())
    for outcome, key in (("applied", "applied"), ("duplicate", "duplicates"), ("lost", "lost")):
        if result[key]:
            hub.metrics.sync_records.labels(outcome).inc(result[key])
    return web.json_response({"ok": True, **result})


async def _sync_state(request: web.Request) -> web.Response:
    agent_id, _ = await signed_request(request)
    state = await request.app[HUB].store.sync_state(agent_id)
    return web.json_response({"ok": True, "acked": state["acked_seq"]})


async def _fleet(request: web.Request) -> web.Response:
    return web.json_response(await request.app[HUB].snapshot())


def _part(key: str) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, key: (await request.app[HUB].snapshot())[key]})

    return handler


async def _put_policy(request: web.Request) -> web.Response:
    require_admin(request)
    stored = await request.app[HUB].policies.put(parse_json_body(await request.read()))
    return web.json_response({"ok": True, **stored}, status=201)


async def _policies(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "policies": await request.app[HUB].policies.heads()})


async def _history(request: web.Request) -> web.Response:
    rows = await request.app[HUB].policies.history(request.match_info["name"])
    return web.json_response({"ok": True, "versions": rows})


async def _start_rollout(request: web.Request) -> web.Response:
    require_admin(request)
    doc = parse_json_body(await request.read(), whole=True)  # version 3.0 is 3
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        raise ApiError(400, "body.name: expected the policy's name")
    version, selector = doc.get("version"), doc.get("selector", {})
    if isinstance(version, bool) or not isinstance(version, int) or abs(version) > wire.MAX_INT:
        raise ApiError(400, "body.version: expected the policy version (an integer)")
    if not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values()):
        raise ApiError(400, 'body.selector: expected {"label": "value", "board": "..."}')
    fraction, misses = doc.get("canary_fraction", 1.0), doc.get("max_slo_misses", 0)
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ApiError(400, "body.canary_fraction: expected a number, 0 < x <= 1")
    if isinstance(misses, bool) or not isinstance(misses, int) or misses > wire.MAX_INT:
        raise ApiError(400, "body.max_slo_misses: expected an integer 0..2**63-1")
    hub = request.app[HUB]
    timeout = doc.get("gate_timeout_s", hub.config.canary_timeout_s)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        raise ApiError(400, "body.gate_timeout_s: expected seconds (> 0) or null (no limit)")
    rollout = await hub.policies.start(
        doc["name"],
        version,
        selector,
        float(fraction),
        misses,
        None if timeout is None else float(timeout),
    )
    return web.json_response({"ok": True, "rollout": rollout}, status=201)


async def _rollouts(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "rollouts": await request.app[HUB].policies.rollouts()})


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, **request.app[HUB].health()})


async def _openapi(request: web.Request) -> web.Response:
    return web.json_response(document())


async def _metrics(request: web.Request) -> web.Response:
    hub = request.app[HUB]
    await hub.refresh_state_gauge()
    return web.Response(body=hub.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_app(
    config: HubConfig, clock: Clock = time.time, monotonic: Clock = time.monotonic
) -> web.Application:
    """Return the hub's aiohttp application; the hub starts and stops with it.

    ``clock`` is the hub's wall clock, ``monotonic`` how long it remembers nonces (tests step
    them apart)."""
    quiet_bad_requests()
    # the first is outermost: the guard hands the request, its body read, to the rest (see
    # ConnectionGuard.middleware); then the signer, which signs error answers too
    guard = ConnectionGuard(ServerLimits.of(config))
    middlewares = [guard.middleware, sign_answers, _errors, missing_files]
    app = web.Application(client_max_size=config.max_body_bytes, middlewares=middlewares)
    app[GUARD], app[BODY_CAP] = guard, config.max_body_bytes

    async def hub_ctx(app: web.Application) -> AsyncIterator[None]:
        hub = Hub(config, clock, monotonic)
        hub.metrics.registry.register(guard)  # connections and cuts on /metrics
        await hub.start()
        app[HUB] = hub
        yield
        await hub.stop()

    async def close_streams(app: web.Application) -> None:
        app[HUB].stream.close()

    app.cleanup_ctx.append(hub_ctx)
    app.on_shutdown.append(close_streams)
    r = app.router
    agent = "/v1/agents/{agent_id:[A-Za-z0-9._-]{1,64}}"
    r.add_post("/v1/enrol", _enrol)
    r.add_delete(f"{agent}/key", _release)
    r.add_post(PROOF_PATH, _proof)
    r.add_post(f"{agent}/heartbeat", _heartbeat)
    r.add_post(f"{agent}/sync", _sync)
    r.add_get(f"{agent}/sync", _sync_state)
    r.add_get("/v1/fleet", _fleet)
    r.add_get("/v1/agents", _part("agents"))
    r.add_get("/v1/devices", _part("devices"))
    r.add_get("/v1/decisions", _part("decisions"))
    r.add_get("/v1/policies", _policies)
    r.add_post("/v1/policies", _put_policy)
    r.add_get("/v1/policies/{name}", _history)
    r.add_get("/v1/rollouts", _rollouts)
    r.add_post("/v1/rollouts", _start_rollout)
    r.add_get("/v1/events", events(HUB))
    r.add_get("/v1/health", _health)
    r.add_get("/v1/reevaluation", _reevaluation)
    r.add_get("/v1/openapi.json", _openapi)
    r.add_get("/metrics", _metrics)
    dashboard = html_page(
        DASHBOARD / "body.html",
        "fleet",
        "agents by state",
        ["/base.css", "/dashboard/style.css"],
        ["/common.js", "/dashboard/system.js", "/dashboard/app.js", "/dashboard/learning.js"],
    )
    r.add_get("/", page_handler(dashboard))
    add_shared_files(r)
    r.add_static("/dashboard/", DASHBOARD, append_version=False)
    models_api.register(app)  # load models and federated learning (after hub_ctx)
    return app
