"""Property tests: the C kernel and its pure-Python twin agree on random fleets and batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_agent.placement import kernel
from edge_agent.placement import layout as L
from edge_agent.placement.workspace import Workspace
from edge_agent.resources.vocab import DeviceKind

pytestmark = pytest.mark.skipif(
    not kernel.native_available(), reason="compiled kernel not installed"
)

finite = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def device_rows(draw: st.DrawFn) -> list[float]:
    """Draw one plausible device row, including odd corners (zero peaks, offline, remote)."""
    r = [0.0] * L.DEV_FIELDS
    r[L.DEV_KIND] = draw(st.integers(0, 6))
    for col in (L.DEV_PEAK_INT8, L.DEV_PEAK_FP16, L.DEV_PEAK_FP32):
        r[col] = draw(st.one_of(st.just(0.0), st.floats(1.0, 1e5)))
    r[L.DEV_MEM_TOTAL] = draw(st.sampled_from([0.0, 1e8, 2e9, 8e9, 64e9]))
    r[L.DEV_MEM_FREE] = r[L.DEV_MEM_TOTAL] * draw(unit)
    r[L.DEV_MEM_BW] = draw(st.one_of(st.just(0.0), st.floats(1.0, 1000.0)))
    r[L.DEV_IDLE_W] = draw(st.floats(0.0, 50.0))
    r[L.DEV_MAX_W] = draw(st.floats(0.0, 400.0))
    r[L.DEV_PREC_MASK] = draw(st.integers(0, 31))
    r[L.DEV_OPS_MASK] = draw(st.integers(0, 1023))
    r[L.DEV_FORMAT_MASK] = draw(st.integers(0, 4095))
    r[L.DEV_EFFICIENCY] = draw(st.floats(0.01, 1.0))
    r[L.DEV_DISPATCH_S] = draw(st.floats(0.0, 0.01))
    r[L.DEV_RECONF_S] = draw(st.floats(0.0, 2.0))
    r[L.DEV_LINK_S] = draw(st.one_of(st.just(0.0), st.floats(1e-4, 0.05)))
    r[L.DEV_LINK_BW] = draw(st.one_of(st.just(0.0), st.floats(0.01, 10.0)))
    r[L.DEV_CARBON] = draw(st.floats(0.0, 900.0))
    r[L.DEV_UTIL] = draw(unit)
    r[L.DEV_QUEUE_S] = draw(st.one_of(st.just(0.0), st.floats(0.0, 5.0)))
    r[L.DEV_PRED_UTIL] = draw(unit)
    r[L.DEV_HEALTH] = draw(st.sampled_from([0, 0, 0, 1, 2]))
    r[L.DEV_SLOTS] = draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
    for col in L.SLOT_COLS:  # slots past the device's count hold stale ids: ignored
        r[col] = draw(st.integers(0, 3))
    r[L.DEV_SLOT_NEXT] = draw(st.integers(0, L.MAX_SLOTS - 1))
    return r


@st.composite
def task_rows(draw: st.DrawFn, n_classes: int) -> list[float]:
    """Draw one task row with a mix of loose and tight constraints."""
    r = [0.0] * L.TASK_FIELDS
    r[L.TASK_KINDS_MASK] = draw(st.one_of(st.just(0), st.integers(0, 127)))
    r[L.TASK_PREC] = draw(st.integers(0, 4))
    r[L.TASK_OPS_MASK] = draw(st.one_of(st.just(0), st.integers(0, 1023)))
    r[L.TASK_FORMAT] = draw(st.one_of(st.just(0), st.integers(0, 4095)))
    r[L.TASK_PREC_MASK] = draw(st.one_of(st.just(0), st.integers(0, 31)))
    r[L.TASK_FLAGS] = draw(st.integers(0, L.TF_DROP_IF_LATE))
    r[L.TASK_MEM] = draw(st.sampled_from([0.0, 1e6, 5e8, 4e9]))
    r[L.TASK_COUNT] = draw(st.integers(1, 3))
    r[L.TASK_MAX_LAT_S] = draw(st.one_of(st.just(0.0), st.floats(1e-4, 1.0)))
    r[L.TASK_DEADLINE_S] = draw(st.one_of(st.just(0.0), st.floats(1e-4, 10.0)))
    r[L.TASK_GFLOP] = draw(st.floats(0.0, 500.0))
    r[L.TASK_BYTES] = draw(st.floats(0.0, 1e9))
    r[L.TASK_IN_BYTES] = draw(st.floats(0.0, 1e7))
    r[L.TASK_CLASS] = draw(st.integers(0, n_classes - 1))
    r[L.TASK_CONFIG] = draw(st.integers(0, 3))
    return r


@st.composite
def problems(
    draw: st.DrawFn, min_devices: int = 0, tasks: tuple[int, int] = (0, 12)
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float], list[int] | None]:
    """Draw a fleet, a batch (``tasks``: how many, least and most), a correction matrix,
    policy weights and a candidate set."""
    n_dev = draw(st.integers(min_devices, 24))
    n_classes = draw(st.integers(1, 3))
    devices = np.array([draw(device_rows()) for _ in range(n_dev)]).reshape(n_dev, L.DEV_FIELDS)
    n_task = draw(st.integers(*tasks))
    tasks = np.array([draw(task_rows(n_classes)) for _ in range(n_task)])
    corr = np.array(
        draw(
            st.lists(st.floats(0.05, 20.0), min_size=n_classes * n_dev, max_size=n_classes * n_dev)
        )
    ).reshape(n_classes, n_dev)
    weights = draw(
        st.lists(st.floats(0.0, 1.0), min_size=L.N_OBJECTIVES, max_size=L.N_OBJECTIVES).filter(
            lambda w: sum(w) > 0
        )
    )
    weights = [*weights, draw(st.sampled_from([0.0, 1.0, 1.5, 3.0]))]  # the queue guard
    weights = [*weights, draw(st.sampled_from([0.0, 0.0, 0.5, 2.0]))]  # the congestion charge
    allowed = draw(
        st.one_of(st.none(), st.lists(st.integers(0, 1), min_size=n_dev, max_size=n_dev))
    )
    return devices, tasks.reshape(n_task, L.TASK_FIELDS), corr, weights, allowed


def _run(backend: kernel.Backend, problem: tuple) -> tuple[tuple[int, int], Workspace]:
    devices, tasks, corr, weights, allowed = problem
    ws = Workspace(devices.copy(), corr.copy(), max(len(tasks), 1), keep_reasons=True)
    ws.weights[:] = weights
    ws.tasks[: len(tasks)] = tasks
    call = kernel.bind(ws, backend)
    if allowed is None:
        return call(len(tasks)), ws
    ws.allowed[: len(allowed)] = allowed
    return call.restricted(len(tasks)), ws


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_kernel_and_twin_make_the_same_choices(problem: tuple) -> None:
    """Same assignments, runner-ups, reasons and device updates; estimates within 1e-9."""
    (st_c, ws_c) = _run("native", problem)
    (st_p, ws_p) = _run("python", problem)
    assert st_c == st_p == (L.ST_OK, -1)
    n = len(problem[1])
    exact = [L.OUT_ASSIGNED + j for j in range(L.MAX_GANG)] + [L.OUT_RUNNER_UP]
    exact += [L.OUT_COUNTS + r for r in range(L.N_REASONS)]
    assert np.array_equal(ws_c.out[:n, exact], ws_p.out[:n, exact])
    if ws_c.n_dev:
        assert np.array_equal(ws_c.reasons[:n], ws_p.reasons[:n])
    np.testing.assert_allclose(ws_c.out[:n], ws_p.out[:n], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ws_c.devices, ws_p.devices, rtol=1e-9, atol=1e-12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_a_batch_never_overbooks_memory(problem: tuple) -> None:
    """Free memory never goes negative and each placed task fits where it went."""
    status, ws = _run("native", problem)
    assert status == (L.ST_OK, -1)
    assert (ws.devices[:, L.DEV_MEM_FREE] >= 0).all()
    devices, tasks = problem[0], problem[1]
    free = devices[:, L.DEV_MEM_FREE].copy()  # replayed in batch order, from the input rows
    for t in range(len(tasks)):
        assigned = ws.out[t, L.OUT_ASSIGNED : L.OUT_ASSIGNED + L.MAX_GANG]
        chosen = [int(d) for d in assigned if d >= 0]
        counts = ws.out[t, L.OUT_COUNTS : L.OUT_COUNTS + L.N_REASONS]
        if chosen:
            assert len(chosen) == int(tasks[t, L.TASK_COUNT])
            assert len(set(chosen)) == len(chosen)
            for d in chosen:  # this task fits on each device it went to, when it went
                assert _fits(devices[d], tasks[t], free[d]), (t, d)
                free[d] -= tasks[t, L.TASK_MEM]
        else:
            assert counts.sum() >= ws.n_dev - int(tasks[t, L.TASK_COUNT]) + 1
    np.testing.assert_allclose(ws.devices[:, L.DEV_MEM_FREE], free, rtol=1e-12, atol=1e-3)


#: The peak column each precision runs at (Precision value -> column; int4 on the int8
#: units, bf16 on the fp16 units).
PEAK_OF = (L.DEV_PEAK_INT8, L.DEV_PEAK_FP16, L.DEV_PEAK_FP32, L.DEV_PEAK_INT8, L.DEV_PEAK_FP16)


def _fits(dev: np.ndarray, task: np.ndarray, free: float) -> bool:
    """Return True when ``task`` meets every hard constraint of ``dev`` with ``free`` bytes."""
    kind, prec = int(dev[L.DEV_KIND]), int(task[L.TASK_PREC])
    kinds, fmt = int(task[L.TASK_KINDS_MASK]), int(task[L.TASK_FORMAT])
    allowed = (int(task[L.TASK_PREC_MASK]) | (1 << prec)) & int(dev[L.DEV_PREC_MASK])
    runs = any((allowed >> p) & 1 and dev[PEAK_OF[p]] > 0.0 for p in range(L.PREC_BITS))
    return (
        dev[L.DEV_HEALTH] != 2.0  # not offline
        and (kinds == 0 or (kinds >> kind) & 1 == 1)
        and runs  # some precision the task allows, with a peak
        and int(task[L.TASK_OPS_MASK]) & ~int(dev[L.DEV_OPS_MASK]) == 0
        and (fmt == 0 or fmt & int(dev[L.DEV_FORMAT_MASK]) != 0)  # a format mask, 0 = any
        and (task[L.TASK_CONFIG] == 0.0 or kind == int(DeviceKind.FPGA))
        and task[L.TASK_MEM] <= free
    )


@settings(max_examples=100, deadline=None)
@given(
    problems(),
    st.integers(0, L.DEV_FIELDS - 1),
    st.sampled_from([float("nan"), float("inf"), -1.0]),
)
def test_poisoned_device_rows_give_a_status_and_change_nothing(
    problem: tuple, col: int, poison: float
) -> None:
    """A NaN, infinity or negative in any device field: same status from both, rows untouched."""
    devices = problem[0]
    if len(devices) == 0:
        return
    devices = devices.copy()
    devices[-1, col] = poison
    poisoned = (devices, *problem[1:])
    for backend in ("native", "python"):
        status, ws = _run(backend, poisoned)
        assert status == (L.ST_BAD_DEVICE, len(devices) - 1)
        np.testing.assert_array_equal(ws.devices, devices)
