"""The agent's HTTP API (aiohttp): tasks, explanations, devices, models, health, metrics.

Every error is ``{"ok": false, "error": "<what to fix>", "status": <code>}``; bad input is
a 4xx naming the problem, never a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import operator
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import quote

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.deferral import held_until
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.intake_queue import Stored, SubmitCoalescer
from edge_agent.agent.core.store import STATES, IdempotencyConflict
from edge_agent.agent.mesh.link import MESH, PREFIX, MeshLink
from edge_agent.agent.service import Agent
from edge_agent.agent.web.api_auth import TokenCheck, token_check
from edge_agent.agent.web.local_status import add_status_routes
from edge_agent.agent.web.openapi import MAX_BATCH, document
from edge_agent.errors import InvalidInput
from edge_agent.http_errors import (
    ApiError,
    json_errors,
    missing_files,
    parse_json_body,
)
from edge_agent.http_express import LATER, Answer, Express, Headers, Later, Route, Tell
from edge_agent.http_limits import BODY_CAP, GUARD, KEEPALIVE_S, ConnectionGuard, ServerLimits
from edge_agent.http_logging import quiet_bad_requests
from edge_agent.id_prefix import MAX_SHOWN, resolve_id
from edge_agent.storage.db import StoreError

_log = logging.getLogger(__name__)

CONFIG = web.AppKey("config", AgentConfig)
AGENT = web.AppKey("agent", Agent)
SUBMITS = web.AppKey("submits", SubmitCoalescer)  # single submissions, stored in groups
SHAPES = web.AppKey("shapes", dict)  # recent single submissions' shared fields, as JSON
SHAPES_LIMIT = 256
MAX_KEY = 200
_ID = r"{task_id:[^/:]{1,128}}"  # a whole id or a unique prefix of one (see _task_id)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_errors = json_errors("the agent", {IdempotencyConflict: 409})


async def _json(request: web.Request) -> Any:
    """Return the request's JSON body; 400 naming the problem when it is not JSON.

    JSON has one number type: ``640.0`` is the integer 640 (as JSON Schema says too), so
    whole floats are read as ints and an integer field given as ``640.0`` is accepted.
    """
    return parse_json_body(await request.read(), whole=True)


def _key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if not _key_ok(key):
        raise ApiError(400, f"Idempotency-Key: expected 1-{MAX_KEY} printable characters")
    return key


def _key_ok(key: str | None) -> bool:
    """Return whether an Idempotency-Key header (None: absent) is one the API takes."""
    return key is None or (0 < len(key) <= MAX_KEY and key.isprintable())


async def _task_id(request: web.Request) -> str:
    """Return the whole id the path's ``task_id`` names (an id or a unique prefix); 404 else."""
    given = request.match_info["task_id"]
    matches = await request.app[AGENT].store.ids_starting(given, MAX_SHOWN + 1)
    return resolve_id(given, matches, "task")


def task_doc(row: dict[str, Any], waiting: str | None = None) -> dict[str, Any]:
    """Return a stored task as its API document (``waiting``: why its pool holds it back).

    ``held_until`` (ISO 8601 UTC) is set only for a deferrable task that was really held for a
    later hour; a deferrable task released at once has none.
    """
    hidden = {"request_hash"}
    doc = {k: v for k, v in row.items() if k not in hidden}
    if waiting:
        doc["waiting"] = waiting
    doc["held_until"] = held_until(row)
    doc["links"] = _links(row["id"])
    return doc


def _links(task_id: str) -> dict[str, str]:
    """Return a task document's ``links`` (its own URL and its explanation's)."""
    return {"self": f"/v1/tasks/{task_id}", "explain": f"/v1/tasks/{task_id}/explain"}


# a task's own fields in its document (a deadline differs from task to task too)
_OWN = ("id", "idempotency_key", "links", "contract", "deadline_at")
#: A new task's fields in its document apart from its own (``_OWN``) and ``submitted_at``,
#: which every group of single submissions stores at another time: the rest of a group's
#: documents, and of the next group's, is the same text around that time.
_SHARED_SKIP = frozenset({*_OWN, "request_hash", "submitted_at"})
#: A row's keys -> the fields new tasks share and a getter of their values (``_shared_names``).
_SHARED_NAMES: dict[tuple[str, ...], tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}
#: A shape's text: the fields before ``submitted_at`` and those after it, as JSON members.
Shape = tuple[str, str]
#: How long a batch's handler leaves the loop idle once the scheduler has queued the batch's
#: decisions for the writer thread: long enough for that thread to take the GIL and start
#: the transaction, which it would otherwise wait for behind the 202's encoding (Python's
#: 5 ms switch interval). The 202 goes out that much later; placement starts that much sooner.
HANDOFF_S = 0.001


def _number(value: Any) -> str:
    """Return a number (or None) as ``json`` writes it; a finite float is its ``repr``."""
    if value is None:
        return "null"
    if type(value) is float and math.isfinite(value):
        return repr(value)
    return json.dumps(value)


def _own_json(doc: dict[str, Any]) -> list[str]:
    """Return a new task's own fields (but its contract) as ``"name": JSON`` texts.

    A new task's id is hex (``task_ids.new_ids``), so it and its links need no escaping;
    a float deadline is its ``repr``, as ``json`` writes it. Anything else is encoded.
    """
    task_id = doc["id"]
    if isinstance(task_id, str) and task_id.isascii() and task_id.isalnum():  # _links as text
        ident = f'"{task_id}"'
        links = f'{{"self": "/v1/tasks/{task_id}", "explain": "/v1/tasks/{task_id}/explain"}}'
    else:
        ident, links = json.dumps(task_id), json.dumps(_links(task_id))
    key = doc["idempotency_key"]
    return [
        f'"id": {ident}',
        f'"idempotency_key": {"null" if key is None else json.dumps(key)}',
        f'"links": {links}',
        f'"deadline_at": {_number(doc["deadline_at"])}',
    ]


def _task_json(
    row: dict[str, Any], task: NewTask, created: bool, shapes: dict[Any, Shape] | None = None
) -> str:
    """Return a stored task's API document (``task_doc``) as JSON text, its contract not
    encoded again.

    A new row's ``contract`` was parsed from the task's own ``stored_contract()`` text, so
    that text is spliced in; a retry's row is encoded as read. ``shapes`` keeps the JSON of
    the other fields by their typed values (a batch's, or the app's recent single
    submissions'), in two parts around ``submitted_at``: new tasks differ in their id, key,
    deadline and submission time only, so the rest is encoded once.
    """
    if not created:
        return json.dumps(task_doc(row))
    names, pick = _shared_names(tuple(row))
    values = pick(row)
    held = None if row.get("deferral") is None else held_until(row)
    try:  # typed: False, 0 and 0.0 are equal keys but not the same JSON
        shape: Any = (names, values, tuple(map(type, values)), held)
        parts = None if shapes is None else shapes.get(shape)
    except TypeError:  # an unhashable value (a command, a plan): encoded every time
        shape, parts = None, None
    if parts is None:
        others = dict(zip(names, values, strict=True))
        others["held_until"] = held
        parts = _shape_json(row, others)
        if shapes is not None and shape is not None:
            shapes[shape] = parts
    own = _own_json(row)
    own.append(f'"contract": {task.stored_contract()}')
    before, after = parts
    if "submitted_at" in row:
        own.append(f'{before}"submitted_at": {_number(row["submitted_at"])}{after}')
    elif before:
        own.append(before)
    return "{" + ", ".join(own) + "}"


def _shared_names(
    keys: tuple[str, ...],
) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """Return a row's fields (by its keys) that new tasks share, and a getter of their values."""
    found = _SHARED_NAMES.get(keys)
    if found is None:
        if len(_SHARED_NAMES) >= SHAPES_LIMIT:
            _SHARED_NAMES.clear()
        names = tuple(k for k in keys if k not in _SHARED_SKIP)
        pick: Callable[[Any], tuple[Any, ...]] = (
            operator.itemgetter(*names) if len(names) > 1 else lambda r: tuple(r[k] for k in names)
        )
        found = _SHARED_NAMES[keys] = (names, pick)
    return found


def _shape_json(row: dict[str, Any], others: dict[str, Any]) -> Shape:
    """Return ``others`` as JSON members in the row's order, split where ``submitted_at``
    stands: (members before it with a trailing ", ", ", " and the members after it)."""
    names = [k for k in row if k in others or k == "submitted_at"] + ["held_until"]
    cut = names.index("submitted_at") if "submitted_at" in names else len(names)
    head = json.dumps({k: others[k] for k in names[:cut]})[1:-1]
    tail = json.dumps({k: others[k] for k in names[cut + 1 :]})[1:-1]
    if cut == len(names):
        return head, ""
    return (f"{head}, " if head else ""), (f", {tail}" if tail else "")


def _accepted(text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=text, status=202, content_type="application/json", headers=headers)


async def _single(agent: Agent, body: bytes, key: str | None) -> NewTask:
    """Return one submission's task (raises what the API answers 400)."""
    found = _single_now(agent, body, key)
    if isinstance(found, NewTask):
        return found
    return await asyncio.to_thread(agent.intake.task, found, key)


def _single_now(agent: Agent, body: bytes, key: str | None) -> NewTask | Any:
    """Return one submission's task when it needs no file or model read, else its parsed
    document for ``Intake.task`` in a thread (raises what the API answers 400)."""
    task = agent.intake.known_body(body, key)  # a repeat of a plain contract: no parsing
    if task is not None:
        return task
    doc = parse_json_body(body, whole=True)
    if isinstance(doc, dict) and "model" not in doc:
        task = agent.intake.task(doc, key)  # pure parsing, no file or model to read
        agent.intake.remember_body(body, doc, task)
        return task
    return doc


def _accepted_text(app: web.Application, task: NewTask, row: dict[str, Any], created: bool) -> str:
    """Return a single submission's 202 document (the group's shared fields encoded once)."""
    shapes = app[SHAPES]
    if len(shapes) >= SHAPES_LIMIT:
        shapes.clear()
    doc = _task_json(row, task, created, shapes)  # a group's tasks share their other fields
    return f'{{"ok": true, "created": {"true" if created else "false"}, "task": {doc}}}'


async def _submit(request: web.Request) -> web.Response:
    app, body, key = request.app, await request.read(), _key(request)
    task = await _single(app[AGENT], body, key)
    row, created = await app[SUBMITS].submit(task)
    text = _accepted_text(app, task, row, created)
    return _accepted(text, _location(row))


def _express_submit(app: web.Application, express: Express, check: TokenCheck | None) -> Route:
    """Return ``POST /v1/tasks`` for the express lane (``http_express``): ``_submit`` without
    aiohttp's request and response objects, nor a task, coroutine or future per request: the
    group's commit tells the lane's teller (``LATER``). It declines (None: aiohttp answers
    the request as always) a request without the API token, with a bad Idempotency-Key or
    body, or whose store write failed (rolled back: nothing stored); the 202 is the same
    document."""

    def answer(task: NewTask, stored: Stored) -> bytes:
        row, created = stored
        text = _accepted_text(app, task, row, created)
        return express.answer(202, "Accepted", text.encode(), _location(row))

    def resolve(tell: Tell, task: NewTask, stored: Stored | None, err: Exception | None) -> None:
        """The group's write is done (``SubmitCoalescer.then``): answer, never raise."""
        if isinstance(err, InvalidInput | StoreError):  # rolled back: aiohttp's answer
            tell(None)
            return
        try:
            if err is not None or stored is None:
                raise err or RuntimeError("a submission's group gave no outcome")
            text = answer(task, stored)
        except BaseException as failed:
            tell(failed)
            return
        tell(text)

    async def slow(doc: Any, key: str | None) -> Answer:  # a model to read: in a thread
        try:
            task = await asyncio.to_thread(app[AGENT].intake.task, doc, key)
        except Exception:  # nothing stored yet: aiohttp's answer names the problem
            return None
        try:
            stored = await app[SUBMITS].submit(task)
        except (InvalidInput, StoreError):  # the group's transaction rolled back
            return None
        return answer(task, stored)

    def submit(
        headers: Headers, body: bytes, tell: Tell
    ) -> Answer | asyncio.Future[Answer] | Later:
        if check is not None and not check.allows(headers.get("authorization", "")):
            return None
        key = headers.get("idempotency-key")
        if not _key_ok(key):
            return None
        try:
            found = _single_now(app[AGENT], body, key)
        except Exception:  # nothing stored yet: aiohttp's answer names the problem
            return None
        if not isinstance(found, NewTask):
            return asyncio.ensure_future(slow(found, key))
        app[SUBMITS].then(found, partial(resolve, tell, found))
        return LATER

    return submit


def _location(row: dict[str, Any]) -> dict[str, str]:
    """Return a 202's Location header for the stored task ``row``, the same on both request
    paths (the id as a URL path segment: new ids are hex and pass unchanged)."""
    task_id = row["id"]
    safe = task_id if task_id.isascii() and task_id.isalnum() else quote(task_id, safe="")
    return {"Location": f"/v1/tasks/{safe}"}


async def _submit_batch(request: web.Request) -> web.Response:
    agent, doc, key = request.app[AGENT], await _json(request), _key(request)
    if not isinstance(doc, dict) or set(doc) != {"tasks"}:
        raise ApiError(400, 'body: expected {"tasks": [contract, ...]} and nothing else')
    items = doc["tasks"]
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise ApiError(400, f"tasks: expected a list of 1..{MAX_BATCH} contracts")

    def parse() -> list[NewTask]:
        return [
            agent.intake.task(item, None if key is None else f"{key}#{i}", f"tasks[{i}]")
            for i, item in enumerate(items)
        ]

    tasks = await asyncio.to_thread(parse)
    stored = await agent.submit(tasks)
    # the scheduler was woken: let it take the batch to the kernel and queue its decisions'
    # write, then let the writer thread start that write (HANDOFF_S), before this loop
    # spends its time on the 1,000 documents
    await asyncio.sleep(0)
    if any(created for _, created in stored):  # (a retry of a whole batch queues nothing)
        await asyncio.sleep(HANDOFF_S)
    shapes: dict[Any, Shape] = {}
    docs = ", ".join(
        f'{{"created": {"true" if c else "false"}, {_task_json(r, t, c, shapes)[1:]}'
        for t, (r, c) in zip(tasks, stored, strict=True)
    )
    return _accepted(f'{{"ok": true, "tasks": [{docs}]}}')


async def _get(request: web.Request) -> web.Response:
    task_id = await _task_id(request)
    row = await request.app[AGENT].store.get(task_id)
    if row is None:
        raise ApiError(404, f"no task {task_id!r}")
    why = request.app[AGENT].scheduler.pools.reason(row["id"])
    return web.json_response({"ok": True, "task": task_doc(row, why)})


async def _list(request: web.Request) -> web.Response:
    state = request.query.get("state") or None
    if state is not None and state not in STATES:
        raise ApiError(400, f"state: expected one of {', '.join(STATES)}, got {state!r}")
    text = request.query.get("limit", "100")
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise ApiError(400, f"limit: expected an integer 1..10000, got {text!r}")
    rows = await request.app[AGENT].store.list(state, int(text))
    pools = request.app[AGENT].scheduler.pools
    return web.json_response(
        {"ok": True, "tasks": [task_doc(r, pools.reason(r["id"])) for r in rows]}
    )


async def _cancel(request: web.Request) -> web.Response:
    task_id = await _task_id(request)
    found = await request.app[AGENT].cancel(task_id)
    if found is None:
        raise ApiError(404, f"no task {task_id!r}")
    row, before = found
    if row["state"] != "cancelled" or before == "cancelled":
        why = "it is running" if before == "running" else f"it is already {before}"
        raise ApiError(409, f"task {task_id} cannot be cancelled: {why}")
    return web.json_response({"ok": True, "task": task_doc(row)})


async def _explain(request: web.Request) -> web.Response:
    agent, task_id = request.app[AGENT], await _task_id(request)
    row = await agent.store.get(task_id)
    if row is None:
        raise ApiError(404, f"no task {task_id!r}")
    d = await agent.store.decision(task_id)
    if d is None and row.get("deferral") is not None:  # held: why, and until when
        why = row["deferral"]["why"]
        doc = {"ok": True, "task_id": task_id, "state": row["state"], "why_here": why}
        return web.json_response({**doc, "placed": False, "deferral": row["deferral"]})
    if d is None:
        why = agent.scheduler.pools.reason(task_id)  # e.g. "waiting: pool vision full (4/4 cores)"
        raise ApiError(
            409,
            f"task {task_id} has no placement decision yet (state {row['state']})"
            + (f": {why}" if why else ""),
        )
    device = request.query.get("device")
    if device is not None:
        if device not in d["why_not"]:
            raise ApiError(404, f"device {device!r} was not in the fleet when {task_id} was placed")
        return web.json_response({"ok": True, "device": device, "why": d["why_not"][device]})
    estimate = {k: d[k] for k in ("latency_s", "service_s", "energy_j", "carbon_g")}
    return web.json_response(
        {
            "ok": True,
            "task_id": task_id,
            "state": row["state"],
            "placed": d["placed"],
            "devices": d["devices"],
            "why_here": d["summary"],
            "estimate": estimate,
            "score": d["score"],
            "runner_up": d["runner_up"],
            "runner_up_score": d["runner_up_score"],
            "components": d["components"],
            "rejections": d["rejections"],
            "why_not": d["why_not"],
            "policy": d["policy"],
            "backend": d["backend"],
            "decided_at": d["decided_at"],
            "tier": d.get("tier"),  # None: no tier rule applied
            "spilled_from": d.get("spilled_from") or [],  # full tiers passed over
            "carbon_g": d.get("carbon_g"),
            "deferral": row.get("deferral"),
            "ran_on": row.get("ran_on"),  # a mesh peer's agent id; None: here
            "chain": row.get("chain"),  # mesh decisions, origin -> peer (None: not offloaded)
        }
    )


async def _upload_model(request: web.Request) -> web.Response:
    agent, name = request.app[AGENT], request.query.get("name", "")
    data = await request.read()
    if not data:
        raise ApiError(400, "body is empty: expected the bytes of an ONNX model")
    path, digest, sem = await asyncio.to_thread(agent.intake.save_upload, name, data)
    await agent.store.model_added(path.stem, digest, str(path), len(data))
    return web.json_response(
        {
            "ok": True,
            "model": path.stem,
            "sha256": digest,
            "gflops": sem.gflops,
            "precision": sem.precision,
        },
        status=201,
    )


async def _models(request: web.Request) -> web.Response:
    names = await asyncio.to_thread(request.app[AGENT].intake.models)
    return web.json_response({"ok": True, "models": names})


async def _devices(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "devices": request.app[AGENT].devices()})


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, **request.app[AGENT].health()})


async def _openapi(request: web.Request) -> web.Response:
    """This agent's document: its models, its command allowlist, its mesh routes if on."""
    intake = request.app[AGENT].intake
    models = await asyncio.to_thread(intake.models)
    allowed = sorted(intake.allowlist)
    config = request.app[CONFIG]
    return web.json_response(document(models, allowed, config.mesh_on, config.auth_on))


async def _pools(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "pools": request.app[AGENT].scheduler.pools.snapshot()})


async def _peers(request: web.Request) -> web.Response:
    link = request.app[AGENT].mesh
    if link is None:
        return web.json_response({"ok": True, "enabled": False, "peers": []})
    return web.json_response({"ok": True, **link.peers_doc()})


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[AGENT].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _agent_ctx(app: web.Application) -> AsyncIterator[None]:
    agent = Agent(app[CONFIG], app.get(MESH))
    agent.metrics.registry.register(app[GUARD])  # connections and cuts on /metrics
    await agent.start()
    app[AGENT] = agent
    app[SUBMITS] = SubmitCoalescer(agent.submit)
    app[SHAPES] = {}
    yield
    await app[SUBMITS].drain()
    await agent.stop()


def make_app(config: AgentConfig) -> web.Application:
    """Return the agent's aiohttp application; the agent starts and stops with it."""
    quiet_bad_requests()
    guard = ConnectionGuard(ServerLimits.of(config))
    check = token_check(config)  # None: auth is off
    app = web.Application(
        client_max_size=config.max_body_bytes,
        # the guard first (see its doc), then the API token (none when auth is off)
        middlewares=[
            guard.middleware,
            *([check.middleware] if check else []),
            _errors,
            missing_files,
        ],
    )
    # single submissions skip aiohttp's request path when plain (http_express)
    express = guard.express = Express(config.max_body_bytes, KEEPALIVE_S)
    express.route("POST", "/v1/tasks", _express_submit(app, express, check))
    app[CONFIG], app[GUARD], app[BODY_CAP] = config, guard, config.max_body_bytes
    app.cleanup_ctx.append(_agent_ctx)
    if config.mesh_on:  # the signed peer endpoints; the daemon starts the node once listening
        app[MESH] = MeshLink(config)
        app.add_subapp(PREFIX, app[MESH].app())
    r = app.router
    r.add_post("/v1/tasks", _submit)
    r.add_post("/v1/tasks:batch", _submit_batch)
    r.add_get("/v1/tasks", _list)
    r.add_get(f"/v1/tasks/{_ID}", _get)
    r.add_post(f"/v1/tasks/{_ID}:cancel", _cancel)
    r.add_get(f"/v1/tasks/{_ID}/explain", _explain)
    r.add_post("/v1/models", _upload_model)
    r.add_get("/v1/models", _models)
    r.add_get("/v1/devices", _devices)
    r.add_get("/v1/health", _health)
    r.add_get("/v1/openapi.json", _openapi)
    r.add_get("/v1/peers", _peers)
    r.add_get("/v1/pools", _pools)
    r.add_get("/metrics", _metrics)
    add_status_routes(app, AGENT)  # the status page: GET / and GET /v1/status
    return app
