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
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from edge_agent.agent.forecast import DeviceForecasts
from edge_agent.errors import HetmeshError, InvalidInput
from edge_agent.placement import Placer
from edge_agent.predictor.features import FeatureSpec, device_series
from edge_agent.predictor.onnx_export import read_metadata, spec_from_metadata
from edge_agent.predictor.personalise import (
    Personalised,
    TooLittleData,
    personalise,
    split_for_gate,
)
from edge_agent.predictor.runtime import NOT_ENOUGH_DATA, Forecaster, OrtPredictor, Verdict
from edge_agent.predictor.supernode import SuperNodeSupervisor
from edge_agent.protocol.hub_client import REQUEST_TIMEOUT_S, HubRejected, HubUnreachable

_log = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
STATE_FILE = "state.json"
#: Verdicts kept in state.json.
HISTORY = 20
#: A device's utilization series and the time its first bucket starts.
Series = tuple[np.ndarray[Any, Any], float]
#: Buckets of recent telemetry a candidate is validated on (per device), at most.
VALIDATE_BUCKETS = 240
#: Buckets of telemetry the personalised model is trained, chosen and gated on (per device), at
#: most, and across all devices together: bounds its CPU time (well under a second here).
PERSONALISE_BUCKETS = 720
PERSONALISE_BUDGET = 2880


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class LocalModel:
    """The Forecaster in use and its on-disk copy; blocking methods (call in a thread)."""

    def __init__(self, directory: Path, spec: FeatureSpec | None = None) -> None:
        """Start on EWMA with ``spec`` (default FeatureSpec()); ``load()`` restores a model."""
        self.dir = directory
        self.forecaster = Forecaster(spec or FeatureSpec())
        self.model_version: int | None = None
        self.accepted: dict[str, Any] | None = None  # the verdict that accepted the model
        self.history: list[dict[str, Any]] = []

    @property
    def sha256(self) -> str | None:
        """The model in use, or None on EWMA."""
        return self.forecaster.version

    def load(self) -> None:
        """Restore the last accepted model; a missing or damaged copy leaves EWMA in use."""
        try:
            state = json.loads((self.dir / STATE_FILE).read_text())
            data = (self.dir / MODEL_FILE).read_bytes()
        except FileNotFoundError:
            return
        except (OSError, ValueError) as err:
            _log.warning("stored load model unreadable (%s); forecasting with EWMA", err)
            return
        self.history = list(state.get("history", []))[-HISTORY:]
        if hashlib.sha256(data).hexdigest() != state.get("sha256"):
            _log.warning("stored load model does not match its sha256; forecasting with EWMA")
            return
        try:
            fc = Forecaster(spec_from_metadata(read_metadata(data)))
            fc.load_trusted(data)
        except InvalidInput as err:
            _log.warning("stored load model refused (%s); forecasting with EWMA", err)
            return
        self.forecaster = fc
        self.model_version = state.get("version")
        self.accepted = state.get("accepted")
        _log.info("load model v%s restored from %s", self.model_version, self.dir)

    @property
    def global_sha256(self) -> str | None:
        """The hub model the model in use came from (itself, unless personalised)."""
        if self.accepted is not None and self.accepted.get("global_sha256"):
            return str(self.accepted["global_sha256"])
        return self.sha256

    def offer(
        self,
        data: bytes,
        version: int,
        series: Sequence[tuple[np.ndarray[Any, Any], float]],
        personal: Personalised | None = None,
        note: str = "",
    ) -> Verdict:
        """Validate candidates on local series; swap in and persist the better one that passes.

        ``data`` is the hub's model, ``personal`` the agent's own candidate built from it (if
        any): both face the same gate on ``series``; of those that pass, the personalised one
        is adopted if its rel. MAE is lower than the hub model's by more than the gate's margin, the
        hub model otherwise. ``note`` (e.g. why nothing was personalised) leads the reason.
        """
        fc = self._forecaster_for(data)
        verdict = glob = fc.validate_many(data, list(series))
        chosen, mine = data, None
        if personal is not None:
            mine = fc.validate_many(personal.data, list(series))
            # the fleet's model unless the own one is clearly better (by the gate's margin)
            better = mine.candidate_rel_mae * (1.0 + fc.margin) < glob.candidate_rel_mae
            if mine.accepted and (not glob.accepted or better):
                verdict, chosen = mine, personal.data
        row: dict[str, Any] = {
            "version": version,
            "sha256": hashlib.sha256(chosen).hexdigest(),
            "global_sha256": hashlib.sha256(data).hexdigest(),
            "personalised": chosen is not data,
            "accepted": verdict.accepted,
            "candidate_rel_mae": _num(verdict.candidate_rel_mae),
            "current_rel_mae": _opt_num(verdict.current_rel_mae),
            "ewma_rel_mae": _num(verdict.ewma_rel_mae),
            "reason": self._reason(verdict, chosen is not data, personal, mine, note),
            "at": time.time(),
        }
        if personal is not None and mine is not None:
            row["global_rel_mae"] = _num(glob.candidate_rel_mae)
            row["personalised_rel_mae"] = _num(mine.candidate_rel_mae)
            row.update({k: v for k, v in personal.provenance().items() if k != "personalised"})
        self.history = [*self.history, row][-HISTORY:]
        if verdict.accepted:  # on disk first: what the agent shows in use survives a crash
            self.dir.mkdir(parents=True, exist_ok=True)
            _atomic_write(self.dir / MODEL_FILE, chosen)
            fc.current = OrtPredictor(chosen)
            self.forecaster, self.model_version, self.accepted = fc, version, row
        self._save()
        return verdict

    @staticmethod
    def _reason(
        verdict: Verdict,
        is_personal: bool,
        personal: Personalised | None,
        mine: Verdict | None,
        note: str,
    ) -> str:
        """What the gate decided, which candidate it names, and why (one line)."""
        if personal is None:
            return f"global model only ({note}): {verdict.reason}" if note else verdict.reason
        own = f"personalised (Ditto mu {personal.mu:g}, {personal.epochs} epochs)"
        if is_personal:
            return f"{own}: {verdict.reason}"
        assert mine is not None
        refused = "" if mine.accepted else " refused"
        other = f"{own} rel. MAE {mine.candidate_rel_mae:.4g}{refused}"
        return f"global model: {verdict.reason}; {other}"

    def _forecaster_for(self, data: bytes) -> Forecaster:
        """The Forecaster candidates are judged in: the current one, or one with their spec."""
        fc = self.forecaster
        if fc.current is None:
            try:  # no model yet: the first one defines the windows the agent feeds
                spec = spec_from_metadata(read_metadata(data))
                if spec != fc.spec:
                    fc = Forecaster(spec, fc.margin)
            except InvalidInput:
                pass  # validate_many reports it
        return fc

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        state = {
            "sha256": self.sha256,
            "version": self.model_version,
            "accepted": self.accepted,
            "history": self.history,
        }
        _atomic_write(self.dir / STATE_FILE, json.dumps(state, indent=1).encode())

    def report(self) -> dict[str, Any]:
        """The model part of the agent's learning report (and health)."""
        return {
            "version": self.model_version,
            "sha256": self.sha256,
            "source": "ewma" if self.sha256 is None else "model",
            "personalised": bool(self.accepted and self.accepted.get("personalised")),
            "accepted": self.accepted,
            "last_verdict": self.history[-1] if self.history else None,
        }


def _num(value: float) -> float | None:
    """A JSON-safe number (NaN and infinities become None)."""
    return float(value) if np.isfinite(value) else None


def _opt_num(value: float | None) -> float | None:
    """As _num, keeping None."""
    return None if value is None else _num(value)


def recent_series(
    db_path: Path,
    devices: Sequence[str],
    spec: FeatureSpec,
    now: float,
    buckets: int = VALIDATE_BUCKETS,
) -> list[tuple[np.ndarray[Any, Any], float]]:
    """Each device's recent utilization series (at most ``buckets`` buckets) (blocking)."""
    since = now - spec.bucket_s * buckets
    return device_series(str(db_path), spec.bucket_s, devices, since, now)


def personalise_buckets(n_devices: int) -> int:
    """Buckets per device the personalised model is built and gated on (the CPU bound)."""
    return max(VALIDATE_BUCKETS, min(PERSONALISE_BUCKETS, PERSONALISE_BUDGET // max(n_devices, 1)))


def _newest(series: Sequence[Series], spec: FeatureSpec, buckets: int) -> list[Series]:
    """Each series' newest ``buckets`` buckets (the gate's usual slice)."""
    out = []
    for values, t0 in series:
        skip = max(0, values.shape[0] - buckets)
        out.append((values[skip:], t0 + spec.bucket_s * skip))
    return out


def personal_candidate(
    data: bytes, series: Sequence[Series], spec: FeatureSpec
) -> tuple[Personalised | None, list[Series], str]:
    """The agent's own candidate from ``data``, the series to gate on, and why there is none.

    Blocking (call in a thread). With enough older telemetry: Ditto on the older part of each
    device's series (``split_for_gate``), the newest part for the gate. Otherwise no
    candidate, the usual newest VALIDATE_BUCKETS for the gate, and the reason.
    """
    older, gate = split_for_gate(series, spec)
    try:
        return personalise(data, older, spec), gate, ""
    except TooLittleData as err:
        note = f"too little data to personalise: {err}"
    except InvalidInput as err:
        note = f"not personalised: {err}"
    return None, _newest(series, spec, VALIDATE_BUCKETS), note


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
