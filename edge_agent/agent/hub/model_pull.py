"""The agent's load model: pulled from the hub, validated locally, kept on disk, and its SuperNode.

``LocalModel`` holds the Forecaster and persists the accepted model in
``<data_dir>/predictor/`` (``model.onnx`` + ``state.json``), so a restarted agent forecasts with
it even with the hub gone. ``ModelPuller`` posts the agent's learning report to the hub
(signed; ``POST /v1/agents/{id}/learning``) every heartbeat interval; the answer names the
hub's latest model and whether rounds are wanted. A new model is downloaded, its sha256
checked, then offered to the Forecaster's gate on this agent's own recent per-device
utilization: it replaces the current one only if its MAE is no worse than the current model's
or EWMA's (by the gate's margin). With ``[predictor] personalise`` on (the default) the agent
also trains its own candidate from the pulled model (Ditto, ``edge_agent.predictor.personalise``)
on its older telemetry, in a thread; both candidates face the gate on the newest telemetry,
which neither training nor the choice of mu and epochs saw, and the better one that passes is
adopted. Every verdict is recorded with its reason. While the hub wants rounds, the SuperNode
runs (``SuperNodeSupervisor``); otherwise it is stopped (SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from edge_agent.agent.hub.local_model import LocalModel
from edge_agent.agent.hub.model_candidates import (
    personal_candidate,
    personalise_buckets,
    recent_series,
)
from edge_agent.agent.sensing.forecast import DeviceForecasts
from edge_agent.errors import HetmeshError, InvalidInput
from edge_agent.placement import Placer
from edge_agent.predictor.onnx_export import read_metadata, spec_from_metadata
from edge_agent.predictor.personalise import Personalised
from edge_agent.predictor.runtime import NOT_ENOUGH_DATA, Verdict
from edge_agent.predictor.supernode import SuperNodeSupervisor
from edge_agent.protocol.hub_client import REQUEST_TIMEOUT_S, HubRejected, HubUnreachable

_log = logging.getLogger(__name__)


class ModelPuller:
    """Polls the hub for models and run instructions; ``run`` until cancelled."""

    def __init__(
        self,
        local: LocalModel,
        link: Any,  # HubLink: url, agent_id, interval_s, client (key, session)
        db_path: Path,
        devices: Sequence[str],
        supernode: SuperNodeSupervisor | None,
        clock: Callable[[], float] = time.time,
        personalise: bool = True,
    ) -> None:
        self.local, self.link, self.db_path = local, link, db_path
        self.personalise = personalise
        self.devices, self.supernode, self.clock = list(devices), supernode, clock
        self.refused: set[str] = set()  # sha256 of candidates this agent scored and refused
        self.polls = 0
        self.last_error: str | None = None

    async def run(self) -> None:
        """Poll every heartbeat interval; ride out hub outages."""
        while True:
            try:
                await self.poll_once()
                self.last_error = None
            except (HetmeshError, KeyError, ValueError, TypeError) as err:
                if self.last_error is None:
                    _log.warning("learning poll: %s", err)
                self.last_error = str(err)
            await asyncio.sleep(self.link.interval_s)

    async def _download(self, path: str) -> bytes:
        """GET a model file from the hub (not signed: its sha256 is checked instead)."""
        client = self.link.client
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        try:
            async with client.session.get(client.base_url + path, timeout=timeout) as resp:
                data: bytes = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise HubUnreachable(f"no answer from {client.base_url}: {err}") from err
        if resp.status >= 500:
            raise HubUnreachable(f"hub answered {resp.status} to {path}")
        if resp.status >= 400:
            raise HubRejected(resp.status, data[:200].decode(errors="replace"))
        return data

    def report(self) -> dict[str, Any]:
        """The learning report the agent posts."""
        doc: dict[str, Any] = {"model": self.local.report()}
        if self.supernode is not None:
            doc["supernode"] = self.supernode.status()
            doc["supernode_public_key"] = self.supernode.public_key
        return doc

    async def poll_once(self) -> dict[str, Any]:
        """Report, then act on the answer: pull a newer model, start or stop the SuperNode."""
        if self.link.client.key is None:
            return {}  # not enrolled yet: the hub link enrols first
        answer: dict[str, Any] = await self.link.client.learning(self.report())  # signed both ways
        self.polls += 1
        latest = answer.get("latest")
        if isinstance(latest, dict) and latest.get("sha256") not in (
            self.local.sha256,
            self.local.global_sha256,  # a personalised model's source is not pulled again
            *self.refused,
        ):
            await self.pull(latest)
        if self.supernode is not None:
            run = answer.get("run")
            await asyncio.to_thread(self.supernode.want, run if isinstance(run, dict) else {})
        return answer

    async def pull(self, entry: dict[str, Any]) -> Verdict | None:
        """Download one model version, check its sha256, validate it locally; the verdict."""
        sha, version = str(entry["sha256"]), int(entry["version"])
        data = await self._download(str(entry["url"]))
        if hashlib.sha256(data).hexdigest() != sha:
            raise InvalidInput(f"model v{version} download does not match its sha256; retrying")
        spec = self.local.forecaster.spec
        if self.local.forecaster.current is None:
            with contextlib.suppress(InvalidInput):
                spec = spec_from_metadata(read_metadata(data))
        now = self.clock()
        personal: Personalised | None = None
        note = ""
        if self.personalise:
            buckets = personalise_buckets(len(self.devices))
            series = await asyncio.to_thread(
                recent_series, self.db_path, self.devices, spec, now, buckets
            )
            personal, series, note = await asyncio.to_thread(personal_candidate, data, series, spec)
        else:
            series = await asyncio.to_thread(recent_series, self.db_path, self.devices, spec, now)
        verdict = await asyncio.to_thread(self.local.offer, data, version, series, personal, note)
        reason = self.local.history[-1]["reason"]
        if verdict.accepted:
            _log.info("load model v%s accepted: %s", version, reason)
        elif verdict.reason.startswith(NOT_ENOUGH_DATA):
            _log.info("load model v%s not validated yet: %s", version, reason)
        else:
            self.refused.add(sha)  # worse, or unusable here: not downloaded again
            _log.warning("load model v%s refused: %s", version, reason)
        return verdict


class AgentLearning:
    """The agent's predictor parts together: model on disk, forecasts, and, with a hub, pulls."""

    def __init__(
        self,
        data_dir: Path,
        db_path: Path,
        devices: Sequence[str],
        placer: Placer,
        link: Any | None,  # HubLink, or None without a hub
        forecast: bool = True,
        personalise: bool = True,
    ) -> None:
        self.local = LocalModel(data_dir / "predictor")
        self.forecasts = DeviceForecasts(db_path, devices, placer, lambda: self.local.forecaster)
        self.link, self.db_path, self.devices, self.forecast = link, db_path, devices, forecast
        self.data_dir, self.personalise = data_dir, personalise
        self.supernode: SuperNodeSupervisor | None = None
        self.puller: ModelPuller | None = None

    async def start(self, spawn: Callable[[Callable[[], Any], str], None]) -> None:
        """Restore the model from disk; start forecasting and (with a hub) the puller."""
        await asyncio.to_thread(self.local.load)
        if self.forecast:
            spawn(self.forecasts.run, "agent-forecast")
        if self.link is not None:
            try:
                self.supernode = await asyncio.to_thread(
                    SuperNodeSupervisor, self.data_dir / "supernode", self.db_path
                )
            except ImportError as err:  # no `learning` extra: pull models, never train
                _log.info("no SuperNode on this box (%s); install hetmesh[learning]", err)
            self.puller = ModelPuller(
                self.local,
                self.link,
                self.db_path,
                self.devices,
                self.supernode,
                personalise=self.personalise,
            )
            spawn(self.puller.run, "agent-model-pull")

    async def stop(self) -> None:
        """Stop the SuperNode (SIGTERM: a planned restart or shutdown)."""
        if self.supernode is not None:
            await asyncio.to_thread(self.supernode.stop)

    def status(self) -> dict[str, Any]:
        """Model in use, latest forecasts, SuperNode (for the health document)."""
        return {
            "model": self.local.report(),
            "forecasts": self.forecasts.last,
            "supernode": None if self.supernode is None else self.supernode.status(),
        }
