"""Workload files: a trace (JSON lines or CSV) or a generator spec (model mix + load)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cloud_hub.simulator.errors import SimulationInputError
from cloud_hub.simulator.fleet import Fleet
from cloud_hub.simulator.models import MODELS
from edge_agent.resources.vocab import Precision, parse_name

SCHEMA = "hetmesh.sim.workload/1"
TRACE_FIELDS = (
    "t",
    "model",
    "precision",
    "max_latency_ms",
    "priority",
    "tenant",
    "origin",
    "work",
    "deferrable",
    "deadline_s",
    "config_id",
)
MIX_FIELDS = (
    "model",
    "precision",
    "weight",
    "max_latency_ms",
    "priority",
    "tenant",
    "deferrable",
    "deadline_s",
    "config_id",
)


@dataclass(frozen=True)
class Task:
    """One inference request: when, what, its SLO, and the box it arrives at."""

    index: int
    t: float
    model: str
    precision: str
    max_latency_s: float
    priority: int
    tenant: str
    origin: int  # box instance index
    work: float = 1.0  # units of the model (inferences, training steps)
    deferrable: bool = False  # may be held and started later, finishing by the deadline
    deadline_s: float = 0.0  # seconds after ``t`` by which a deferrable task must finish
    config_id: int = 0  # FPGA configuration the task needs (0 = none)


@dataclass(frozen=True)
class Workload:
    """A parsed workload: trace rows (origin may be None) or a generator spec."""

    path: str
    rows: tuple[dict[str, Any], ...] = ()
    mix: tuple[dict[str, Any], ...] = ()
    load: float = 0.0
    n_tasks: int = 0
    origins: tuple[str, ...] | None = None

    def types(self) -> list[tuple[str, str]]:
        """Return the (model, precision) pairs this workload uses."""
        return list(dict.fromkeys((r["model"], r["precision"]) for r in self.rows or self.mix))

    def count(self) -> int:
        """Return how many tasks this workload yields."""
        return len(self.rows) if self.rows else self.n_tasks


def _fail(path: str, field: str, problem: str, line: int | None = None) -> SimulationInputError:
    return SimulationInputError(path, field, problem, line)


def _row(
    raw: Mapping[str, Any], fields: tuple[str, ...], path: str, line: int | None, where: str
) -> dict[str, Any]:
    """Validate one trace row or mix entry and return it with defaults filled in."""
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise _fail(path, f"{where}{unknown[0]}", f"unknown; allowed: {', '.join(fields)}", line)
    out: dict[str, Any] = {}
    model = raw.get("model")
    if model not in MODELS:
        raise _fail(
            path, f"{where}model", f"unknown model {model!r}; known: {', '.join(MODELS)}", line
        )
    out["model"] = model
    prec = raw.get("precision") or "int8"
    try:
        parse_name(Precision, str(prec), what="precision")
    except ValueError as err:
        raise _fail(path, f"{where}precision", str(err), line) from None
    out["precision"] = str(prec).lower()
    numeric: list[tuple[str, float | None, float]] = [("max_latency_ms", None, 1e-9)]
    numeric += (
        [("t", None, 0.0), ("work", 1.0, 1e-9)] if "t" in fields else [("weight", 1.0, 1e-12)]
    )
    for key, default, low in numeric:
        value = raw.get(key, default)
        try:
            number = float(value) if not isinstance(value, bool) and value is not None else math.nan
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number) or number < low:
            raise _fail(path, f"{where}{key}", f"expected a number >= {low:g}, got {value!r}", line)
        out[key] = number
    try:
        out["priority"] = int(raw.get("priority", 0) or 0)
    except (TypeError, ValueError):
        raise _fail(
            path, f"{where}priority", f"expected an integer, got {raw.get('priority')!r}", line
        ) from None
    out["tenant"] = str(raw.get("tenant") or "default")
    _extras(raw, out, path, line, where)
    if "origin" in fields:
        out["origin"] = raw.get("origin") or None
    return out


def _extras(
    raw: Mapping[str, Any], out: dict[str, Any], path: str, line: int | None, where: str
) -> None:
    """Validate the deferral and FPGA fields (deferrable, deadline_s, config_id)."""
    flag = raw.get("deferrable", False)
    if isinstance(flag, str):  # CSV cells
        flag = {"true": True, "1": True, "false": False, "0": False, "": False}.get(flag.lower())
    if not isinstance(flag, bool):
        raise _fail(path, f"{where}deferrable", f"expected true or false, got {flag!r}", line)
    try:
        deadline = float(raw.get("deadline_s", 0.0))
    except (TypeError, ValueError):
        deadline = math.nan
    if not math.isfinite(deadline) or deadline < 0 or (flag and deadline <= 0):
        raise _fail(
            path,
            f"{where}deadline_s",
            f"a deferrable task needs seconds > 0 after arrival, got {raw.get('deadline_s')!r}",
            line,
        )
    value = raw.get("config_id", 0)
    try:
        config = int(value) if float(value) == int(float(value)) else -1
    except (TypeError, ValueError, OverflowError):
        config = -1
    if isinstance(value, bool) or not 0 <= config <= 2**31 - 1:
        raise _fail(path, f"{where}config_id", f"expected an integer >= 0, got {value!r}", line)
    out["deferrable"], out["deadline_s"], out["config_id"] = flag, deadline, config


def load_workload(path: str | Path) -> Workload:
    """Load a ``.jsonl`` / ``.csv`` trace or a ``.json`` generator spec, validating every row."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise _fail(where, "(file)", f"cannot be read: {err.strerror}") from None
    suffix = Path(path).suffix.lower()
    if suffix == ".csv":
        reader = csv.DictReader(text.splitlines())
        missing = {"t", "model", "max_latency_ms"} - set(reader.fieldnames or ())
        if missing:
            raise _fail(where, ",".join(sorted(missing)), "missing from the CSV header", 1)
        rows = [
            _row({k: v for k, v in r.items() if v != ""}, TRACE_FIELDS, where, reader.line_num, "")
            for r in reader
        ]
    elif suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as err:
                raise _fail(where, "(line)", f"not valid JSON: {err.msg}", n) from None
            if not isinstance(raw, Mapping):
                raise _fail(where, "(line)", "expected a JSON object per line", n)
            rows.append(_row(raw, TRACE_FIELDS, where, n, ""))
    elif suffix == ".json":
        return _generator(text, where)
    else:
        raise _fail(where, "(file)", "expected a .jsonl or .csv trace, or a .json generator spec")
    if not rows:
        raise _fail(where, "(file)", "the trace has no tasks")
    rows.sort(key=lambda r: r["t"])
    return Workload(where, rows=tuple(rows))


def _generator(text: str, where: str) -> Workload:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(where, "(file)", f"not valid JSON: {err.msg}", err.lineno) from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("generator"), Mapping):
        raise _fail(where, "generator", "expected an object with a 'generator' object")
    if doc.get("schema", SCHEMA) != SCHEMA:
        raise _fail(where, "schema", f"expected {SCHEMA!r}")
    gen = doc["generator"]
    unknown = sorted(set(gen) - {"load", "tasks", "mix", "origins"})
    if unknown:
        raise _fail(where, f"generator.{unknown[0]}", "unknown; allowed: load, tasks, mix, origins")
    load, tasks = gen.get("load"), gen.get("tasks", 2000)
    if isinstance(load, bool) or not isinstance(load, (int, float)) or not 0 < load <= 10:
        raise _fail(
            where, "generator.load", f"expected a fraction of capacity in (0, 10], got {load!r}"
        )
    if isinstance(tasks, bool) or not isinstance(tasks, int) or not 1 <= tasks <= 10_000_000:
        raise _fail(where, "generator.tasks", f"expected an integer >= 1, got {tasks!r}")
    mix = gen.get("mix")
    if not isinstance(mix, list) or not mix or not all(isinstance(m, Mapping) for m in mix):
        raise _fail(where, "generator.mix", "expected a non-empty list of objects")
    entries = tuple(
        _row(m, MIX_FIELDS, where, None, f"generator.mix[{i}].") for i, m in enumerate(mix)
    )
    origins = gen.get("origins")
    if origins is not None and not (
        isinstance(origins, list) and origins and all(isinstance(o, str) for o in origins)
    ):
        raise _fail(where, "generator.origins", "expected a list of box ids")
    return Workload(
        where,
        mix=entries,
        load=float(load),
        n_tasks=tasks,
        origins=tuple(origins) if origins else None,
    )


def _origin_index(fleet: Fleet, name: str, path: str, field: str) -> list[int]:
    """Return the box instances a name denotes (a box id, or a group id with copies)."""
    found = [b for b, box in enumerate(fleet.boxes) if name in (box, fleet.groups[b])]
    if not found:
        raise _fail(path, field, f"unknown box {name!r}; boxes: {', '.join(fleet.boxes)}")
    return found


def materialize(
    wl: Workload, fleet: Fleet, capacity: Callable[[list[float]], float], seed: int
) -> list[Task]:
    """Return the tasks, drawing generator arrivals at ``load`` x ``capacity(mix weights)``."""
    rng = np.random.default_rng(seed + 7919)
    n_box = len(fleet.boxes)
    if wl.rows:
        out = []
        for i, r in enumerate(wl.rows):
            origin = (
                _origin_index(fleet, r["origin"], wl.path, f"row {i}.origin")[0]
                if r["origin"]
                else int(rng.integers(n_box))
            )
            out.append(
                Task(
                    i,
                    r["t"],
                    r["model"],
                    r["precision"],
                    r["max_latency_ms"] / 1e3,
                    r["priority"],
                    r["tenant"],
                    origin,
                    r["work"],
                    r.get("deferrable", False),  # rows built elsewhere (gavel) may omit
                    r.get("deadline_s", 0.0),
                    r.get("config_id", 0),
                )
            )
        return out
    weights = np.array([m["weight"] for m in wl.mix])
    rate = wl.load * capacity([float(w) for w in weights / weights.sum()])
    if rate <= 0:
        raise _fail(wl.path, "generator.mix", "no device of the fleet can run any model of the mix")
    times = np.cumsum(rng.exponential(1.0 / rate, wl.n_tasks))
    kinds = rng.choice(len(wl.mix), size=wl.n_tasks, p=weights / weights.sum())
    pool = (
        [b for o in wl.origins for b in _origin_index(fleet, o, wl.path, "generator.origins")]
        if wl.origins
        else list(range(n_box))
    )
    origins = rng.choice(pool, size=wl.n_tasks)
    return [
        Task(
            i,
            float(times[i]),
            wl.mix[k]["model"],
            wl.mix[k]["precision"],
            wl.mix[k]["max_latency_ms"] / 1e3,
            wl.mix[k]["priority"],
            wl.mix[k]["tenant"],
            int(origins[i]),
            1.0,
            wl.mix[k]["deferrable"],
            wl.mix[k]["deadline_s"],
            wl.mix[k]["config_id"],
        )
        for i, k in enumerate(kinds.tolist())
    ]
