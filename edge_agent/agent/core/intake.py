"""Submissions to contracts: JSON bodies, models by name (inside the model dirs) or by upload.

Everything here is blocking (file system, ONNX parsing): the API calls it in a thread.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edge_agent.errors import ContractError
from edge_agent.placement.codec import PreparedTask, prepare
from edge_agent.tasks.contract import Semantics, TaskContract

#: Fields of a submission that are the agent's, not the contract's.
AGENT_FIELDS = ("command", "deferrable")
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_CACHE_LIMIT = 256
#: Plain contracts (no model, no command) remembered by their canonical JSON text: a fleet
#: submits the same few task kinds over and over, and a repeat then costs one ``json.dumps``
#: and one sha256 instead of a parse, a range check and an encoding (about 0.3 ms).
CONTRACT_CACHE_LIMIT = 1024
#: Largest single-submission body remembered by its bytes (``Intake.remember_body``): a
#: plain contract is a few hundred bytes, and padding must not make the cache hold megabytes.
BODY_CACHE_MAX_BYTES = 4096


@dataclass(frozen=True)
class NewTask:
    """A validated submission, ready to be stored (``Store.submit``)."""

    contract: TaskContract
    request_hash: str
    idempotency_key: str | None = None
    command: tuple[str, ...] | None = None
    contract_json: str = ""  # the contract as stored; computed here when empty
    deferrable: bool = False  # held until a low-carbon, low-load hour before its deadline
    deferral: dict[str, Any] | None = None  # the agent's plan (stored state "deferred")
    prepared: PreparedTask | None = None  # the contract's kernel row, checked at intake

    def stored_contract(self) -> str:
        """Return the contract's JSON text (as ``TaskContract.to_dict`` writes it)."""
        return self.contract_json or self.contract.to_json()


def checked_row(contract: TaskContract) -> PreparedTask:
    """Return the contract's kernel row; ContractError if it is not finite.

    The parser bounds each number, so only a sum can overflow (and then the sum of the row
    is not finite either: no finite sum of finite bounded terms overflows). The row goes
    with the task to placement, which then does not encode the contract again.
    """
    prepared = prepare(contract)
    if not math.isfinite(sum(prepared.row)):
        raise ContractError("contract: numbers too large (their sums overflow to infinity)")
    return prepared


#: ``json.dumps(doc, sort_keys=True)`` without building a new encoder on every call
_canonical = json.JSONEncoder(sort_keys=True).encode


def _known(found: NewTask, key: str | None) -> NewTask:
    """Return a remembered plain contract (its task without a key) as a new submission.

    Tasks are frozen, so copies without a key share one object; with a key, the record is
    copied rather than built field by field (a third of a batch item's intake).
    """
    if key is None:
        return found
    task = object.__new__(NewTask)
    task.__dict__.update(found.__dict__, idempotency_key=key)
    return task


def _remembered(task: NewTask) -> NewTask:
    return task if task.idempotency_key is None else dataclasses.replace(task, idempotency_key=None)


def _onnx_semantics(model: Path | bytes) -> Semantics:
    """Return a model's semantics; onnx is imported on first use (it weighs ~15 MB)."""
    from edge_agent.tasks.onnx_semantics import semantics_from_onnx

    return semantics_from_onnx(model)


class Intake:
    """Turns submission documents into ``NewTask`` records for one agent's model dirs."""

    def __init__(self, model_dirs: Sequence[Path], allowlist: Sequence[str]) -> None:
        self.model_dirs = [d.resolve() for d in model_dirs]
        self.allowlist = frozenset(allowlist)
        self._cache: dict[tuple[str, int, int], Semantics] = {}
        self._lock = threading.Lock()
        # canonical text -> (contract, its stored JSON, deferrable, request hash)
        self._plain: dict[str, NewTask] = {}
        self._bodies: dict[bytes, NewTask] = {}  # body -> the same

    def task(self, doc: object, key: str | None, where: str = "body") -> NewTask:
        """Return the task a JSON document asks for; ContractError naming the field if bad."""
        if type(doc) is not dict and not isinstance(doc, Mapping):  # (the ABC check is slow)
            raise ContractError(f"{where}: expected a JSON object, got {type(doc).__name__}")
        if "model" in doc or "command" in doc:  # reads files or the allowlist: never cached
            return self._task(doc, key, where)
        text = _canonical(doc)
        found = self._plain.get(text)
        if found is None:
            task = self._task(doc, key, where, text)
            if len(self._plain) >= CONTRACT_CACHE_LIMIT:
                self._plain.clear()  # a new mix of task kinds: start again
            self._plain[text] = _remembered(task)
            return task
        return _known(found, key)

    def known_body(self, body: bytes, key: str | None) -> NewTask | None:
        """Return the task of a single submission's exact body if one like it was parsed.

        Only plain contracts are remembered (``remember_body``): a repeat then costs a dict
        lookup, not a JSON parse, a canonical encoding and a digest.
        """
        found = self._bodies.get(body)
        return None if found is None else _known(found, key)

    def remember_body(self, body: bytes, doc: object, task: NewTask) -> None:
        """Remember that ``body`` (parsed: ``doc``) is ``task``: a plain contract, and small."""
        if len(body) > BODY_CACHE_MAX_BYTES or not isinstance(doc, Mapping):
            return
        if "model" in doc or "command" in doc:
            return
        if len(self._bodies) >= CONTRACT_CACHE_LIMIT:
            self._bodies.clear()
        self._bodies[bytes(body)] = _remembered(task)

    def _task(
        self, doc: Mapping[str, Any], key: str | None, where: str, canonical: str | None = None
    ) -> NewTask:
        """Parse and check ``doc`` in full (``task`` without its cache); ``canonical``: its
        ``json.dumps(doc, sort_keys=True)`` when the caller has it (not encoded again)."""
        fields = dict(doc)
        command = self._command(fields.pop("command", None), where)
        deferrable = fields.pop("deferrable", False)
        if not isinstance(deferrable, bool):
            raise ContractError(f"{where}.deferrable: expected true or false, got {deferrable!r}")
        model = fields.get("model")
        if model is not None:
            if not isinstance(model, str):
                raise ContractError(f"{where}.model: expected a string, got {model!r}")
            path = self.resolve_model(model)
            fields["model"] = str(path)
            fields.setdefault("task_class", path.stem)
            if "semantics" not in fields:
                fields["semantics"] = asdict(self.semantics(path))
        elif command is not None:
            fields.setdefault("semantics", {"gflops": 0.0})
            requirements = fields.setdefault("requirements", {})
            if isinstance(requirements, dict):
                requirements.setdefault("model_format", None)
        try:
            contract = TaskContract.from_dict(fields)
            prepared = checked_row(contract)
        except ContractError as err:
            raise ContractError(f"{where}: {err}") from None
        if deferrable and contract.requirements.deadline_s <= 0:
            raise ContractError(
                f"{where}.deferrable: a deferrable task needs requirements.deadline_s > 0 "
                "(seconds from submission by which it must finish)"
            )
        if canonical is None:
            canonical = _canonical(doc)
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        text = contract.to_json()
        return NewTask(contract, digest, key, command, text, deferrable, None, prepared)

    def _command(self, value: object, where: str) -> tuple[str, ...] | None:
        """Return the argv of a command task if the allowlist permits it."""
        if value is None:
            return None
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise ContractError(f"{where}.command: expected a non-empty list of strings")
        if value[0] not in self.allowlist:
            allowed = ", ".join(sorted(self.allowlist)) or "none (command tasks are disabled)"
            raise ContractError(
                f"{where}.command: {value[0]!r} is not in the config's command_allowlist "
                f"(allowed: {allowed})"
            )
        return tuple(value)

    def resolve_model(self, name: str) -> Path:
        """Return the model file ``name`` names inside a model dir; ContractError otherwise."""
        if not name or "\x00" in name:
            raise ContractError("model: expected a model name or a path inside the model dir")
        relative = name if name.endswith(".onnx") else f"{name}.onnx"
        for root in self.model_dirs:
            path = (root / relative).resolve()
            if not path.is_relative_to(root):
                raise ContractError(
                    f"model {name!r}: not a model name and not inside the model directories; "
                    "upload the file first (`edge-agent submit FILE.onnx` does, or POST "
                    f"/v1/models), or name one of: {', '.join(self.models()) or 'none yet'}"
                )
            if path.is_file():
                return path
        raise ContractError(f"model {name!r} not found; available: {', '.join(self.models())}")

    def models(self) -> list[str]:
        """Return the names of the models in the model dirs."""
        names = {p.stem for root in self.model_dirs if root.is_dir() for p in root.glob("*.onnx")}
        return sorted(names)

    def semantics(self, path: Path) -> Semantics:
        """Return the model's semantics, cached by (path, mtime, size)."""
        try:
            st = path.stat()
        except OSError as err:
            raise ContractError(f"model {path.name}: cannot read: {err}") from None
        key = (str(path), st.st_mtime_ns, st.st_size)
        with self._lock:
            found = self._cache.get(key)
        if found is None:
            found = _onnx_semantics(path)
            with self._lock:
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = found
        return found

    def save_upload(self, name: str, data: bytes) -> tuple[Path, str, Semantics]:
        """Validate an uploaded ONNX model and store it as ``name`` in the first model dir."""
        if not MODEL_NAME.fullmatch(name.removesuffix(".onnx")):
            raise ContractError(
                "name: expected 1-64 letters, digits, '_', '.', '-' (no path), got " + repr(name)
            )
        sem = _onnx_semantics(data)  # ContractError naming the problem when invalid
        root = self.model_dirs[0]
        root.mkdir(parents=True, exist_ok=True)
        path = root / f"{name.removesuffix('.onnx')}.onnx"
        tmp = path.with_suffix(".onnx.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path, hashlib.sha256(data).hexdigest(), sem
