"""The C header and layout.py agree, and both kernels refuse bad input the same way."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from edge_agent.placement import (
    Capability,
    Device,
    Requirements,
    Semantics,
    TaskContract,
    native_available,
)
from edge_agent.placement import layout as L
from edge_agent.placement.codec import device_row, prepare
from edge_agent.placement.kernel import bind
from edge_agent.placement.workspace import Workspace
from edge_agent.resources.vocab import DeviceKind, Precision
from tests.support.placer_fleet import BACKENDS

HEADER = Path(__file__).parents[1] / "native" / "hetmesh_kernel.h"
_DEFINE = re.compile(
    r"^\s*#\s*define\s+HM_(?P<name>[A-Z0-9_]+)\s+\(?\s*(?P<value>[-+]?[0-9][0-9.eE+-]*)\s*\)?\s*"
    r"(?:/\*.*\*/|//.*)?$"
)
NATIVE_ONLY = ("ABI_VERSION",)  # header constants with no Python twin by design


def header_constants() -> dict[str, float]:
    """Return every numeric ``#define HM_<NAME> <number>`` of the header."""
    found: dict[str, float] = {}
    for line in HEADER.read_text().splitlines():
        m = _DEFINE.match(line)
        if m:
            found[m["name"]] = float(m["value"])
    return found


def layout_twin(name: str) -> float | None:
    """Return layout.py's value for header name ``name`` (NORM_FLOOR_<i> -> NORM_FLOOR[i])."""
    m = re.fullmatch(r"NORM_FLOOR_(\d+)", name)
    if m:
        i = int(m[1])
        return L.NORM_FLOOR[i] if i < len(L.NORM_FLOOR) else None
    value = getattr(L, name, None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def layout_numeric_names() -> set[str]:
    return {
        n
        for n, v in vars(L).items()
        if n.isupper() and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


# --- header <-> layout ---------------------------------------------------------------


def test_header_exists_and_parses() -> None:
    consts = header_constants()
    assert HEADER.is_file()
    assert consts["DEV_FIELDS"] == L.DEV_FIELDS  # sanity: the parser sees the basics
    assert "NO_DEVICE" in consts  # parenthesized negative value


def test_every_shared_constant_has_the_same_value() -> None:
    consts = header_constants()
    compared, mismatched = [], []
    for name, value in sorted(consts.items()):
        twin = layout_twin(name)
        if twin is None:
            continue
        compared.append(name)
        if not math.isclose(twin, value, rel_tol=0.0, abs_tol=0.0):
            mismatched.append(f"HM_{name}={value!r} vs layout {twin!r}")
    assert mismatched == []
    assert len(compared) > 60


def test_every_layout_number_has_a_header_twin() -> None:
    consts = header_constants()
    missing = sorted(n for n in layout_numeric_names() if n not in consts)
    assert missing == []
    assert {f"NORM_FLOOR_{i}" for i in range(len(L.NORM_FLOOR))} <= set(consts)
    assert len(L.NORM_FLOOR) == L.N_OBJECTIVES


@pytest.mark.parametrize("prefix", ["DEV_", "TASK_", "OBJ_", "EST_", "R_", "SCR_", "ST_"])
def test_each_family_is_fully_mirrored(prefix: str) -> None:
    consts = header_constants()
    py = {
        n: float(v)
        for n, v in vars(L).items()
        if n.startswith(prefix) and isinstance(v, int) and not isinstance(v, bool)
    }
    c = {n: v for n, v in consts.items() if n.startswith(prefix)}
    assert py == c


def test_columns_are_dense_and_counts_match() -> None:
    for prefix, count in (
        ("DEV_", L.DEV_FIELDS),
        ("TASK_", L.TASK_FIELDS),
        ("EST_", L.N_EST),
        ("R_", L.N_REASONS),
    ):
        cols = sorted(
            v
            for n, v in vars(L).items()
            if n.startswith(prefix) and isinstance(v, int) and not n.endswith("FIELDS")
        )
        assert cols == list(range(count)), prefix
    assert len(L.REASON_NAMES) == L.N_REASONS
    assert len(L.OBJECTIVE_NAMES) == L.N_OBJECTIVES
    assert set(L.STATUS_NAMES) == {v for n, v in vars(L).items() if n.startswith("ST_")}


def test_status_codes_mirror_the_header() -> None:
    consts = header_constants()
    for name in (
        "ST_OK",
        "ST_BAD_SHAPE",
        "ST_BAD_DEVICE",
        "ST_BAD_TASK",
        "ST_BAD_POLICY",
        "ST_BAD_CORRECTION",
    ):
        assert consts[name] == getattr(L, name)
    for name in ("R_OK", "R_OFFLINE", "R_PRECISION", "R_MEMORY", "R_LATENCY"):
        assert consts[name] == getattr(L, name)


# --- status codes through the low-level kernel call ----------------------------------

N_CLASSES = 3


def _device(id: str, int8: float) -> Device:
    cap = Capability(
        peak_int8_gops=int8,
        peak_fp16_gops=int8 / 2,
        peak_fp32_gops=int8 / 4,
        memory_bytes=8e9,
        memory_bw_gbs=50.0,
        idle_power_w=1.0,
        max_power_w=10.0,
        precision_mask=(1 << Precision.INT8) | (1 << Precision.FP16) | (1 << Precision.FP32),
    )
    return Device(id, DeviceKind.GPU_NVIDIA, id, cap)


def workspace() -> Workspace:
    """Return a 3-device, 2-task workspace with valid rows and weights."""
    rows = np.array([device_row(_device(f"d{i}", 1000.0 * (i + 1))) for i in range(3)])
    ws = Workspace(rows, np.ones((N_CLASSES, 3)), 4, True)
    ws.weights[:] = [0.5, 0.2, 0.1, 0.1, 0.05, 0.05, 0.0, 0.0, 0.0]
    row = prepare(
        TaskContract(Semantics(gflops=2.0, precision="int8"), Requirements(min_memory_bytes=1e9))
    ).row
    ws.tasks[0] = row
    ws.tasks[1] = row
    ws.tasks[1, L.TASK_CLASS] = 1
    return ws


def _snapshot(ws: Workspace) -> np.ndarray:
    return ws.devices.copy()


def _call(backend: str, ws: Workspace, n_task: int = 2) -> tuple[int, int]:
    return bind(ws, backend)(n_task)  # type: ignore[arg-type]


@BACKENDS
def test_valid_workspace_is_ok_and_charges_devices(backend: str) -> None:
    ws = workspace()
    before = _snapshot(ws)
    assert _call(backend, ws) == (L.ST_OK, -1)
    assert (ws.devices[:, L.DEV_QUEUE_S] > before[:, L.DEV_QUEUE_S]).any()
    assert ws.out[0, L.OUT_ASSIGNED] >= 0 and ws.out[1, L.OUT_ASSIGNED] >= 0


def _nan_device(ws: Workspace) -> None:
    ws.devices[1, L.DEV_MEM_BW] = math.nan


def _inf_device(ws: Workspace) -> None:
    ws.devices[2, L.DEV_QUEUE_S] = math.inf


def _negative_device(ws: Workspace) -> None:
    ws.devices[2, L.DEV_PEAK_FP16] = -1.0


def _bad_health(ws: Workspace) -> None:
    ws.devices[0, L.DEV_HEALTH] = 3.0


def _nan_task(ws: Workspace) -> None:
    ws.tasks[1, L.TASK_GFLOP] = math.nan


def _class_out_of_range(ws: Workspace) -> None:
    ws.tasks[1, L.TASK_CLASS] = N_CLASSES


def _fractional_class(ws: Workspace) -> None:
    ws.tasks[0, L.TASK_CLASS] = 0.5


def _zero_count(ws: Workspace) -> None:
    ws.tasks[1, L.TASK_COUNT] = 0.0


def _zero_weights(ws: Workspace) -> None:
    ws.weights[:] = 0.0


def _nan_weight(ws: Workspace) -> None:
    ws.weights[2] = math.nan


def _negative_congestion_charge(ws: Workspace) -> None:
    ws.weights[L.W_CONGESTION] = -0.5


def _zero_correction(ws: Workspace) -> None:
    ws.corrections[1, 2] = 0.0


def _nan_correction(ws: Workspace) -> None:
    ws.corrections[0, 1] = math.nan


CASES = [
    pytest.param(_nan_device, L.ST_BAD_DEVICE, 1, id="nan-device"),
    pytest.param(_inf_device, L.ST_BAD_DEVICE, 2, id="inf-device"),
    pytest.param(_negative_device, L.ST_BAD_DEVICE, 2, id="negative-device"),
    pytest.param(_bad_health, L.ST_BAD_DEVICE, 0, id="bad-health"),
    pytest.param(_nan_task, L.ST_BAD_TASK, 1, id="nan-task"),
    pytest.param(_class_out_of_range, L.ST_BAD_TASK, 1, id="class-out-of-range"),
    pytest.param(_fractional_class, L.ST_BAD_TASK, 0, id="fractional-class"),
    pytest.param(_zero_count, L.ST_BAD_TASK, 1, id="zero-device-count"),
    pytest.param(_zero_weights, L.ST_BAD_POLICY, -1, id="zero-weights"),
    pytest.param(_nan_weight, L.ST_BAD_POLICY, -1, id="nan-weight"),
    pytest.param(_negative_congestion_charge, L.ST_BAD_POLICY, -1, id="negative-congestion"),
    pytest.param(_zero_correction, L.ST_BAD_CORRECTION, 1 * 3 + 2, id="zero-correction"),
    pytest.param(_nan_correction, L.ST_BAD_CORRECTION, 1, id="nan-correction"),
]


@BACKENDS
@pytest.mark.parametrize(("spoil", "status", "index"), CASES)
def test_bad_input_gives_status_and_index_and_changes_no_device(
    backend: str, spoil, status: int, index: int
) -> None:
    ws = workspace()
    spoil(ws)
    before = _snapshot(ws)
    assert _call(backend, ws) == (status, index)
    assert np.array_equal(ws.devices, before, equal_nan=True)


@pytest.mark.skipif(not native_available(), reason="compiled kernel not built")
@pytest.mark.parametrize(("spoil", "status", "index"), CASES)
def test_both_backends_report_the_same_status_and_index(spoil, status: int, index: int) -> None:
    results = {}
    for backend in ("native", "python"):
        ws = workspace()
        spoil(ws)
        results[backend] = _call(backend, ws)
    assert results["native"] == results["python"] == (status, index)


@BACKENDS
def test_a_valid_first_task_is_not_committed_when_a_later_one_is_bad(backend: str) -> None:
    ws = workspace()
    _nan_task(ws)  # task 0 is fine, task 1 is not
    before = _snapshot(ws)
    status, bad = _call(backend, ws)
    assert (status, bad) == (L.ST_BAD_TASK, 1)
    assert np.array_equal(ws.devices, before, equal_nan=True)
    assert (ws.devices[:, L.DEV_QUEUE_S] == 0.0).all()


@BACKENDS
def test_workspace_is_usable_after_a_failed_call(backend: str) -> None:
    ws = workspace()
    call = bind(ws, backend)  # type: ignore[arg-type]
    ws.weights[:] = 0.0
    assert call(2) == (L.ST_BAD_POLICY, -1)
    ws.weights[:] = [1.0, 0, 0, 0, 0, 0, 0, 0, 0]
    assert call(2) == (L.ST_OK, -1)
    assert ws.out[0, L.OUT_ASSIGNED] == 2  # the fastest device
