"""The load model this agent accepted, kept on disk so a restart forecasts with it, hub or not.

``LocalModel`` holds the Forecaster and persists the accepted model in
``<data_dir>/predictor/`` (``model.onnx`` + ``state.json``, with the recent verdicts); each
offered candidate faces the Forecaster's gate and is adopted only if it passes. Pulling from
the hub is ``model_pull``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edge_agent.errors import InvalidInput
from edge_agent.predictor.features import FeatureSpec
from edge_agent.predictor.onnx_export import read_metadata, spec_from_metadata
from edge_agent.predictor.personalise import Personalised
from edge_agent.predictor.runtime import Forecaster, OrtPredictor, Verdict

_log = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
STATE_FILE = "state.json"
#: Verdicts kept in state.json.
HISTORY = 20


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
