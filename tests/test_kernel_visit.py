"""A restricted call visits only its candidates (``list_flagged`` in the native kernel):
any nonzero flag is a candidate, on either side of eight-flag words, and a fleet past the
listed size (``HM_VISIT_MAX``) still decides as the twin does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_agent.placement import kernel
from edge_agent.placement import layout as L
from edge_agent.placement.workspace import Workspace
from tests.test_kernel_property import problems

pytestmark = pytest.mark.skipif(
    not kernel.native_available(), reason="compiled kernel not installed"
)

VISIT_MAX = 1024  # native/hetmesh_place.c: a restricted call lists up to this many devices


def _restricted(backend: kernel.Backend, problem: tuple, flags: list[int]) -> Workspace:
    devices, tasks, corr, weights, _ = problem
    ws = Workspace(devices.copy(), corr.copy(), max(len(tasks), 1), keep_reasons=True)
    ws.weights[:] = weights
    ws.tasks[: len(tasks)] = tasks
    ws.allowed[: len(flags)] = flags
    assert kernel.bind(ws, backend).restricted(len(tasks)) == (L.ST_OK, -1)
    return ws


EXACT = [L.OUT_ASSIGNED + j for j in range(L.MAX_GANG)] + [L.OUT_RUNNER_UP]
EXACT += [L.OUT_COUNTS + r for r in range(L.N_REASONS)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(min_devices=1, tasks=(1, 4)), data=st.data())
def test_any_nonzero_flag_is_a_candidate(problem: tuple, data: st.DataObject) -> None:
    """Flags of any nonzero byte value decide exactly as 0/1 flags, and as the twin."""
    n_dev, n = len(problem[0]), len(problem[1])
    values = st.sampled_from([0, 0, 1, 2, 128, 255])
    flags = data.draw(st.lists(values, min_size=n_dev, max_size=n_dev))
    ones = [int(f != 0) for f in flags]
    native, plain = _restricted("native", problem, flags), _restricted("native", problem, ones)
    twin = _restricted("python", problem, ones)
    assert native.out[:n].tolist() == plain.out[:n].tolist()
    assert native.devices.tolist() == plain.devices.tolist()
    assert native.reasons[:n].tolist() == plain.reasons[:n].tolist() == twin.reasons[:n].tolist()
    assert np.array_equal(native.out[:n, EXACT], twin.out[:n, EXACT])
    assert native.out[:n, L.OUT_COUNTS + L.R_EXCLUDED].tolist() == [ones.count(0)] * n


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    problem=problems(min_devices=1, tasks=(2, 2)), n_dev=st.sampled_from([VISIT_MAX, VISIT_MAX + 9])
)
def test_a_fleet_past_the_listed_size_decides_as_the_twin(problem: tuple, n_dev: int) -> None:
    """Past ``HM_VISIT_MAX`` devices each excluded device is visited and marked instead."""
    rng = np.random.default_rng(n_dev)
    devices = np.repeat(problem[0][:1], n_dev, axis=0)
    devices[:, L.DEV_QUEUE_S] = rng.uniform(0.0, 0.05, n_dev)
    corr = np.ones((len(problem[2]), n_dev))
    flags = (rng.uniform(size=n_dev) < 0.25).astype(int).tolist()
    big = (devices, problem[1], corr, problem[3], None)
    native, twin = _restricted("native", big, flags), _restricted("python", big, flags)
    assert np.array_equal(native.out[:2, EXACT], twin.out[:2, EXACT])
    assert native.reasons[:2].tolist() == twin.reasons[:2].tolist()
    assert native.out[:2, L.OUT_COUNTS + L.R_EXCLUDED].tolist() == [flags.count(0)] * 2
