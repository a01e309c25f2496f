"""The kernel's ``HM_MODE_EXPLORE`` (and its twin) decides in one call as the three passes
it replaces: the usual pass, the optimistic pass (untried corrections divided), the probe's
honest pass; ``HM_MODE_PROBE`` as a pass with the class's clamped factors set to 1."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_agent.placement import kernel, learning
from edge_agent.placement import layout as L
from edge_agent.placement.learning import CORRECTION_MAX, CORRECTION_MIN
from edge_agent.placement.workspace import Workspace
from tests.test_kernel_property import problems

pytestmark = pytest.mark.skipif(
    not kernel.native_available(), reason="compiled kernel not installed"
)

Problem = tuple[np.ndarray, np.ndarray, np.ndarray, list[float], list[int] | None]


@st.composite
def explorations(draw: st.DrawFn) -> tuple[Problem, np.ndarray, np.ndarray]:
    """Draw a one-task problem with each device's optimism divisor and busy flag."""
    devices, tasks, corr, weights, allowed = draw(problems(min_devices=1, tasks=(1, 1)))
    n_dev = len(devices)
    divisors = draw(
        st.lists(st.sampled_from([1.0, 1.0, 2.0, 4.0, 8.0]), min_size=n_dev, max_size=n_dev)
    )
    busy = draw(st.lists(st.sampled_from([0, 0, 0, 1]), min_size=n_dev, max_size=n_dev))
    return (
        (devices, tasks[:1], corr, weights, allowed),
        np.array(divisors, dtype=np.float64),
        np.array(busy, dtype=np.uint8),
    )


def _workspace(problem: Problem, corr: np.ndarray | None = None) -> Workspace:
    devices, tasks, corrections, weights, allowed = problem
    ws = Workspace(devices.copy(), (corrections if corr is None else corr).copy(), L.EX_ROWS, True)
    ws.weights[:] = weights
    ws.tasks[:1] = tasks
    if allowed is not None:
        ws.allowed[:] = allowed
    return ws


def _pass(
    backend: kernel.Backend, problem: Problem, *, corr: np.ndarray | None = None, only: int = -1
) -> Workspace:
    """One plain kernel call on a fresh copy of the state (``only``: that device alone)."""
    ws = _workspace(problem, corr)
    call = kernel.bind(ws, backend)
    if only >= 0:
        ws.allowed[:] = 0
        ws.allowed[only] = 1
    status = call.restricted(1) if problem[4] is not None or only >= 0 else call(1)
    assert status == (L.ST_OK, -1)
    return ws


def three_passes(
    backend: kernel.Backend, problem: Problem, divisors: np.ndarray, busy: np.ndarray
) -> tuple[int, Workspace, Workspace | None]:
    """Return (outcome, the usual pass, the probe's pass or None), as separate calls."""
    usual = _pass(backend, problem)
    free = (divisors > 1.0) & (busy == 0)
    allowed = problem[4]
    if not free.any():
        return L.EX_NO_UNTRIED, usual, None
    if allowed is not None and not free[np.array(allowed) != 0].any():
        return L.EX_NONE_AMONG_CANDIDATES, usual, None
    cls = int(problem[1][0, L.TASK_CLASS])
    corr = problem[2].copy()
    corr[cls] /= np.where(busy != 0, 1.0, divisors)
    chosen = int(_pass(backend, problem, corr=corr).out[0, L.OUT_ASSIGNED])
    if chosen < 0 or not free[chosen]:
        return L.EX_FRUITLESS, usual, None
    probe = _pass(backend, problem, only=chosen)
    hopeless = usual.out[0, L.OUT_ASSIGNED] >= 0 and int(usual.out[0, L.OUT_FLAGS]) & L.OF_LATE
    if probe.out[0, L.OUT_ASSIGNED] < 0 or (
        int(probe.out[0, L.OUT_FLAGS]) & L.OF_LATE and not hopeless
    ):
        return L.EX_DEFERRED, usual, probe
    return L.EX_PROBE, usual, probe


@pytest.mark.parametrize("backend", ["native", "python"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(explorations())
def test_one_call_decides_as_its_three_passes(
    backend: kernel.Backend, case: tuple[Problem, np.ndarray, np.ndarray]
) -> None:
    """Same outcome, the same usual and probe rows and reasons (bit for bit), and only the
    kept decision charged to the devices."""
    problem, divisors, busy = case
    want, usual, probe = three_passes(backend, problem, divisors, busy)
    ws = _workspace(problem)
    status, bad, outcome = kernel.bind(ws, backend).explore(divisors, busy, problem[4] is not None)
    assert (status, bad, outcome) == (L.ST_OK, -1, want)
    assert np.array_equal(ws.out[L.EX_ROW_USUAL], usual.out[0])
    assert np.array_equal(ws.reasons[0], usual.reasons[0])
    if probe is not None:
        assert np.array_equal(ws.out[L.EX_ROW_PROBE], probe.out[0])
        assert np.array_equal(ws.reasons[1], probe.reasons[0])
    kept = probe if outcome == L.EX_PROBE else usual
    assert kept is not None
    assert np.array_equal(ws.devices, kept.devices)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(explorations())
def test_kernel_and_twin_explore_alike(case: tuple[Problem, np.ndarray, np.ndarray]) -> None:
    """The C call and the twin: the same outcome, choices, reasons and charged devices."""
    problem, divisors, busy = case
    found = []
    for backend in ("native", "python"):
        ws = _workspace(problem)
        result = kernel.bind(ws, backend).explore(divisors, busy, problem[4] is not None)
        found.append((result, ws))
    (r_c, ws_c), (r_p, ws_p) = found
    assert r_c == r_p
    rows = [L.EX_ROW_USUAL] + ([L.EX_ROW_PROBE] if r_c[2] in (L.EX_PROBE, L.EX_DEFERRED) else [])
    np.testing.assert_allclose(ws_c.out[rows], ws_p.out[rows], rtol=1e-9, atol=1e-12)
    assert np.array_equal(ws_c.reasons[: len(rows)], ws_p.reasons[: len(rows)])
    np.testing.assert_allclose(ws_c.devices, ws_p.devices, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("backend", ["native", "python"])
def test_a_divisor_below_one_is_refused_and_changes_nothing(backend: kernel.Backend) -> None:
    devices = np.zeros((2, L.DEV_FIELDS))
    ws = Workspace(devices, np.ones((1, 2)), L.EX_ROWS, True)
    before = ws.devices.copy()
    status, bad, _ = kernel.bind(ws, backend).explore(
        np.array([1.0, 0.5]), np.zeros(2, np.uint8), False
    )
    assert (status, bad) == (L.ST_BAD_CORRECTION, 1)
    assert np.array_equal(ws.devices, before)


@st.composite
def stuck_factors(draw: st.DrawFn) -> Problem:
    """Draw a one-task problem whose correction rows may hold factors at either clamp."""
    devices, tasks, corr, weights, allowed = draw(problems(min_devices=1, tasks=(1, 1)))
    corr = corr.copy()
    for index in draw(st.lists(st.integers(0, corr.size - 1), max_size=3)):
        corr.flat[index] = draw(st.sampled_from([CORRECTION_MAX, CORRECTION_MIN, 49.97, 0.02002]))
    return devices, tasks[:1], corr, weights, allowed


@pytest.mark.parametrize("backend", ["native", "python"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stuck_factors())
def test_a_probe_call_decides_with_clamped_factors_at_one(
    backend: kernel.Backend, problem: Problem
) -> None:
    """``HM_MODE_PROBE`` (and its twin) = a plain pass over the correction row with its
    clamped factors (``learning.clamped``) set to 1, committed; "stuck" says whether any was."""
    cls = int(problem[1][0, L.TASK_CLASS])
    stuck = learning.clamped(problem[2][cls])
    corr = problem[2].copy()
    corr[cls][stuck] = 1.0
    want = _pass(backend, problem, corr=corr)
    ws = _workspace(problem)
    found = kernel.bind(ws, backend).probe(
        learning.CLAMPED_BELOW, learning.CLAMPED_ABOVE, problem[4] is not None
    )
    assert found == (L.ST_OK, -1, bool(stuck.any()))
    assert np.array_equal(ws.out[0], want.out[0])
    assert np.array_equal(ws.reasons[0], want.reasons[0])
    assert np.array_equal(ws.devices, want.devices)
    assert np.array_equal(ws.corrections, problem[2])  # the factors themselves untouched
