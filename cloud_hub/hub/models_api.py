"""The hub's load-model routes: the model registry, federated runs, and agents' learning polls.

* ``GET /v1/models``: every version with its metrics (sha256, download URL), newest last.
* ``GET /v1/models/{version}/onnx``: the ONNX bytes, checked against the registered sha256
  before they are sent (header ``X-Model-Sha256``). ``version``: its number (``3`` or ``v3``)
  or a unique prefix (4+ characters) of its sha256, as git takes commits.
* ``POST /v1/models`` (admin token): register ``{"onnx_base64": "...", "metrics": {...}}``.
* ``GET /v1/learning``: runs, models and each agent's predictor error (the dashboard).
* ``GET /v1/learning/runs/{run_id}``: one run (a whole Flower run id or a unique prefix, 4+
  characters), with the nodes that took part and each round's replies.
* ``POST /v1/learning/runs`` (admin token): start a training run now.
* ``POST /v1/agents/{id}/learning`` (signed by the agent): the agent's predictor report; the
  answer names the latest model and whether its SuperNode should run now.

``register(app)`` adds the routes and a ``Federation`` that starts and stops with the hub.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from aiohttp import web

from cloud_hub.hub.request_auth import HUB, require_admin, signed_request
from cloud_hub.learning.federation import (
    Federation,
    LearningSettings,
    RunRecord,
    model_entry,
    parse_run_config,
)
from cloud_hub.learning.registry import ModelVersion
from edge_agent.errors import InvalidInput
from edge_agent.http_errors import ApiError, parse_json_body
from edge_agent.id_prefix import MIN_PREFIX, ids_starting, resolve_id
from edge_agent.predictor.supernode import ConfigValue

FEDERATION = web.AppKey("federation", Federation)
SHA_HEADER = "X-Model-Sha256"


async def _models(request: web.Request) -> web.Response:
    fed = request.app[FEDERATION]
    return web.json_response(
        {"ok": True, "models": [model_entry(v) for v in fed.registry.versions()]}
    )


def model_version(fed: Federation, given: str) -> ModelVersion:
    """The version ``given`` names: its number (``3``, ``v3``) or a unique sha256 prefix."""
    versions = fed.registry.versions()
    number = given[1:] if given[:1] in ("v", "V") else given
    by_number = {str(v.version): v for v in versions}
    if number in by_number:
        return by_number[number]
    if number.isdigit() and len(given) < MIN_PREFIX:  # a version number, none of ours
        raise ApiError(404, f"no model version {given!r}")
    by_sha = {v.sha256: v for v in versions}
    sha = given.lower()
    return by_sha[resolve_id(sha, ids_starting(sha, by_sha), "model version")]


def learning_run(fed: Federation, given: str) -> RunRecord:
    """The run ``given`` names: a whole Flower run id or a unique prefix of one."""
    by_id = {str(r.run_id): r for r in fed.runs if r.run_id is not None}
    return by_id[resolve_id(given, ids_starting(given, by_id), "learning run")]


def run_doc(run: RunRecord) -> dict[str, Any]:
    """A run as the API shows it: ids are strings (a Flower run id is a 64-bit integer, which
    a JavaScript number, a double, would round past 2**53)."""
    return asdict(run) | {"run_id": None if run.run_id is None else str(run.run_id)}


async def _download(request: web.Request) -> web.Response:
    fed = request.app[FEDERATION]
    entry = model_version(fed, request.match_info["version"])
    data = fed.registry.read(entry)  # InvalidInput if the file no longer matches its sha256
    return web.Response(
        body=data,
        content_type="application/octet-stream",
        headers={SHA_HEADER: entry.sha256, "ETag": f'"{entry.sha256}"'},
    )


async def _upload(request: web.Request) -> web.Response:
    require_admin(request)
    doc = parse_json_body(await request.read())
    if not isinstance(doc, dict) or not isinstance(doc.get("onnx_base64"), str):
        raise ApiError(400, "body.onnx_base64: expected the ONNX model, base64-encoded")
    try:
        data = base64.b64decode(doc["onnx_base64"], validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "body.onnx_base64: not valid base64") from None
    metrics = doc.get("metrics", {})
    if not isinstance(metrics, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        for v in metrics.values()
    ):
        raise ApiError(400, 'body.metrics: expected {"name": finite number, ...}')
    try:
        entry = request.app[FEDERATION].registry.add(data, metrics)
    except InvalidInput as err:
        raise ApiError(400, f"body.onnx_base64: {err}") from None
    return web.json_response({"ok": True, "model": model_entry(entry)}, status=201)


async def _learning(request: web.Request) -> web.Response:
    fed = request.app[FEDERATION]
    doc = fed.summary() | {"runs": [run_doc(r) for r in fed.recent_runs()]}
    return web.json_response({"ok": True, **doc})


async def _run(request: web.Request) -> web.Response:
    run = learning_run(request.app[FEDERATION], request.match_info["run_id"])
    return web.json_response({"ok": True, "run": run_doc(run)})


async def _run_now(request: web.Request) -> web.Response:
    require_admin(request)
    fed = request.app[FEDERATION]
    if not fed.settings.enabled:
        raise ApiError(409, "learning is off: set the hub's [learning] learning_port")
    busy = fed.busy()
    if busy is not None:  # one run at a time: say which, never start a second
        state, run_id = busy
        raise ApiError(
            409, f"a learning run is already {state}; GET /v1/learning follows it",
            run_id=run_id, state=state,
        )  # fmt: skip
    fed.run_now()
    return web.json_response({"ok": True, "queued": True}, status=202)


async def _agent_learning(request: web.Request) -> web.Response:
    agent_id, body = await signed_request(request)
    doc = parse_json_body(body)
    if not isinstance(doc, dict):
        raise ApiError(400, "body: expected the agent's learning report (a JSON object)")
    answer = await request.app[FEDERATION].agent_report(agent_id, doc)
    return web.json_response({"ok": True, **answer})


def register(app: web.Application) -> None:
    """Add the model and learning routes; the Federation starts and stops with the hub."""

    async def federation_ctx(app: web.Application) -> AsyncIterator[None]:
        config = app[HUB].config
        run_config: dict[str, ConfigValue] = {
            **parse_run_config(config.learning_run_config),
            "num-rounds": config.learning_rounds,
            "min-nodes": config.learning_min_nodes,
            "start-timeout-s": config.learning_start_timeout_s,
        }
        fed = Federation(
            LearningSettings(
                state_dir=config.data_dir / "learning",
                host=config.learning_host,
                port=config.learning_port,
                every_s=config.learning_every_s,
                run_config=run_config,
                gather_s=2 * config.heartbeat_interval_s + 1.0,  # every agent has polled
            ),
            poll_every_s=app[HUB].heartbeat_interval_s,  # longer for a large fleet
        )
        await fed.start()
        app[FEDERATION] = fed
        yield
        await fed.stop()

    app.cleanup_ctx.append(federation_ctx)
    r = app.router
    r.add_get("/v1/models", _models)
    r.add_post("/v1/models", _upload)
    r.add_get("/v1/models/{version:[^/]{1,80}}/onnx", _download)
    r.add_get("/v1/learning", _learning)
    r.add_post("/v1/learning/runs", _run_now)
    r.add_get("/v1/learning/runs/{run_id:[^/]{1,80}}", _run)
    r.add_post("/v1/agents/{agent_id:[A-Za-z0-9._-]{1,64}}/learning", _agent_learning)
