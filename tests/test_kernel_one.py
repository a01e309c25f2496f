"""The kernel's ``hm_place_one`` (place_one's ordinary call) and its twin (``reference_one``):
the same book ticks, the same decisions among a kept set's row, the same pressed flags; and
a decided call equals a plain restricted call on the same state."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_agent.placement import kernel
from edge_agent.placement import layout as L
from edge_agent.placement.reference_one import pressed
from edge_agent.placement.workspace import Workspace
from tests.test_kernel_property import problems

pytestmark = pytest.mark.skipif(
    not kernel.native_available(), reason="compiled kernel not installed"
)

CONGESTED = 4.0


def _book(n_classes: int, every: list[int], untried: list[int], *, counting: int = 1) -> np.ndarray:
    book = np.zeros(L.BK_GLOBALS + n_classes * L.BK_CLASS_FIELDS, np.int64)
    book[L.BK_COUNTING] = counting
    book[L.BK_EXPLORING] = 1
    book[L.BK_PROBE_EVERY] = 5
    book[L.BK_HOPELESS_EVERY] = 2
    rows = book[L.BK_GLOBALS :].reshape(n_classes, L.BK_CLASS_FIELDS)
    rows[:, L.BK_EVERY] = every
    rows[:, L.BK_UNTRIED] = untried
    return book


@st.composite
def sequences(draw: st.DrawFn) -> tuple:
    """A fleet, a few tasks of its classes, kept sets, and a sequence of (task, set) calls."""
    devices, tasks, corr, weights, _ = draw(problems(min_devices=1, tasks=(1, 4)))
    n_dev, n_classes = len(devices), len(corr)
    sets = draw(
        st.lists(
            st.lists(st.integers(0, 1), min_size=n_dev, max_size=n_dev), min_size=1, max_size=3
        )
    )
    every = draw(st.lists(st.integers(1, 6), min_size=n_classes, max_size=n_classes))
    divisors = draw(
        st.none()
        | st.lists(
            st.lists(st.sampled_from([1.0, 1.0, 2.0, 8.0]), min_size=n_dev, max_size=n_dev),
            min_size=n_classes,
            max_size=n_classes,
        )
    )
    busy = draw(st.lists(st.sampled_from([0, 0, 1]), min_size=n_dev, max_size=n_dev))
    untried = draw(st.lists(st.integers(0, 1), min_size=n_classes, max_size=n_classes))
    calls = draw(
        st.lists(
            st.tuples(st.integers(0, len(tasks) - 1), st.integers(-1, len(sets))),
            min_size=1,
            max_size=24,
        )
    )
    return devices, tasks, corr, weights, sets, every, untried, calls, divisors, busy


def _run(backend: kernel.Backend, case: tuple, counting: int) -> tuple[list, np.ndarray, list]:
    """Run the calls on a fresh workspace; return (statuses, the book, each decided row)."""
    devices, tasks, corr, weights, sets, every, untried, calls, divisors, busy = case
    ws = Workspace(devices.copy(), corr.copy(), L.EX_ROWS, True)
    ws.weights[:] = weights
    for k, flags in enumerate(sets):
        ws.sets[1 + k] = flags
    book = _book(len(corr), every, untried, counting=counting)
    call = kernel.bind(ws, backend)
    rows_bound = None if divisors is None else np.array(divisors, np.float64)
    call.bind_book(book, CONGESTED, rows_bound, np.array(busy, np.uint8))
    statuses, rows = [], []
    for task, slot in calls:
        ws.tasks[0] = 0.0  # the call copies the task's row in itself
        ws.out[:] = 0.0  # so that rows a call leaves alone compare equal
        row = np.asarray(tasks[task], np.float64).tobytes()
        status = call.one(slot, row)
        if status != L.ST_BAD_SHAPE:  # copied first, and left there (a due pass reads it)
            assert ws.tasks[0].tobytes() == row
        statuses.append(status)
        if status == L.ST_OK or status >= L.ONE_EXPLORED:
            rows.append((ws.out.tolist(), ws.reasons[:2].tolist(), ws.devices.tolist()))
    return statuses, book, rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=sequences(), counting=st.sampled_from([1, 1, 0]))
def test_native_and_twin_keep_the_same_book_and_decide_alike(case: tuple, counting: int) -> None:
    """Statuses (decided, exploration due or run with the divisor rows bound, probe due,
    refused), books and rows agree."""
    native = _run("native", case, counting)
    twin = _run("python", case, counting)
    assert native[0] == twin[0]
    assert native[1].tolist() == twin[1].tolist()
    assert native[2] == twin[2]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(min_devices=1, tasks=(1, 1)))
def test_a_decided_call_is_a_plain_restricted_call_and_the_ticks_come_first(
    problem: tuple,
) -> None:
    """With an interval of 3 and the probe every 5: calls 3 and 6 are exploration decisions
    (nothing decided, the probe not ticked), 7 the probe (its fifth tick); the other four
    decide as ``restricted(1)`` does."""
    devices, tasks, corr, weights, _ = problem
    tasks[0, L.TASK_CLASS] = 0
    for backend in ("native", "python"):
        ws = Workspace(devices.copy(), corr.copy(), 1, True)
        ws.weights[:] = weights
        ws.tasks[0] = tasks[0]
        ws.sets[1] = [1, 0] * (len(devices) // 2) + [1] * (len(devices) % 2)
        plain = Workspace(devices.copy(), corr.copy(), 1, True)
        plain.weights[:] = weights
        plain.tasks[0] = tasks[0]
        plain.allowed[:] = ws.sets[1]
        book = _book(len(corr), [3] * len(corr), [1] * len(corr))
        book[L.BK_HOPELESS_EVERY] = 3  # pressed or not, the interval stays 3
        call, reference = kernel.bind(ws, backend), kernel.bind(plain, backend)
        call.bind_book(book, CONGESTED, None, None)
        got = [call.one(1, ws.tasks[0].tobytes()) for _ in range(7)]
        due = {3: L.ONE_EXPLORE, 6: L.ONE_EXPLORE, 7: L.ONE_PROBE}
        assert got == [due.get(k + 1, L.ST_OK) for k in range(7)]
        for _ in range(got.count(L.ST_OK)):
            assert reference.restricted(1) == (L.ST_OK, -1)
        assert ws.devices.tolist() == plain.devices.tolist()  # the same four commits
        assert ws.out[0].tolist() == plain.out[0].tolist()
        assert book[L.BK_DECISIONS] == 7 and book[L.BK_PROBE_TICK] == 0


@settings(max_examples=10, deadline=None)
@given(problem=problems(min_devices=1, tasks=(1, 1)), backend=st.sampled_from(["native", "python"]))
def test_a_set_outside_the_kept_rows_is_refused(problem: tuple, backend: kernel.Backend) -> None:
    devices, tasks, corr, weights, _ = problem
    ws = Workspace(devices.copy(), corr.copy(), 1, True)
    ws.weights[:] = weights
    ws.tasks[0] = tasks[0]
    book = _book(len(corr), [16] * len(corr), [0] * len(corr))
    call = kernel.bind(ws, backend)
    call.bind_book(book, CONGESTED, None, None)
    before = ws.devices.copy()
    for slot in (-2, ws.sets.shape[0]):
        assert call.one(slot, ws.tasks[0].tobytes()) == L.ST_BAD_SHAPE
    assert book[L.BK_DECISIONS] == 0 and (ws.devices == before).all()  # nothing counted


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(min_devices=1, tasks=(1, 1)), divisor=st.sampled_from([2.0, 8.0]))
def test_a_due_exploration_run_in_the_one_call_is_the_explore_mode_call(
    problem: tuple, divisor: float
) -> None:
    """With the divisor rows bound, a due class is explored in the one call exactly as the
    separate ``explore`` call over the set's flags decides (rows, reasons, charges), and the
    class's pressed flag is set from the usual row, as an ordinary decision sets it."""
    devices, tasks, corr, weights, _ = problem
    tasks[0, L.TASK_CLASS] = 0
    n_dev = len(devices)
    divisors = np.ones((len(corr), n_dev))
    divisors[0, ::2] = divisor
    busy = np.zeros(n_dev, np.uint8)
    flags = [1, 1, 0] * n_dev
    for backend in ("native", "python"):
        one = Workspace(devices.copy(), corr.copy(), L.EX_ROWS, True)
        two = Workspace(devices.copy(), corr.copy(), L.EX_ROWS, True)
        for ws in (one, two):
            ws.weights[:] = weights
            ws.tasks[0] = tasks[0]
        one.sets[1] = flags[:n_dev]
        two.allowed[:] = flags[:n_dev]
        call = kernel.bind(one, backend)
        book = _book(len(corr), [1] * len(corr), [1] * len(corr))
        book[L.BK_GLOBALS + L.BK_PRESSED] = 7  # overwritten by the exploration's usual row
        call.bind_book(book, CONGESTED, divisors, busy)
        status = call.one(1, one.tasks[0].tobytes())
        assert status >= L.ONE_EXPLORED
        usual = one.out[L.EX_ROW_USUAL].tolist()
        assert book[L.BK_GLOBALS + L.BK_PRESSED] == int(pressed(usual, CONGESTED))
        expected = kernel.bind(two, backend).explore(divisors[0].copy(), busy, True)
        assert expected[0] == L.ST_OK and status == L.ONE_EXPLORED + expected[2]
        assert one.out.tolist() == two.out.tolist()
        assert one.reasons[:2].tolist() == two.reasons[:2].tolist()
        assert one.devices.tolist() == two.devices.tolist()
