"""The kernel's per-call checks of correction, bound and divisor rows (session 10: a screen
by each value's high 32 bits, then an exact pass) refuse exactly what the twin refuses, at
the same entry, on values at and around every edge of the ranges."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_agent.placement import layout as L
from edge_agent.placement import native_available
from edge_agent.placement.kernel import bind
from tests.test_kernel_layout import N_CLASSES, workspace

_EDGES = [
    0.0,
    -0.0,
    5e-324,  # the least positive double (high word 0)
    2.2250738585072014e-308,  # the least normal
    1e-300,
    0.5,
    0.9999999999999999,  # just below 1 (high word 0x3FEFFFFF)
    1.0,
    1.0000000000000002,  # just above 1, in 1.0's high word
    3.0,
    sys.float_info.max,
    math.inf,
    -math.inf,
    math.nan,
    -1.0,
    -5e-324,
]
_VALUES = st.sampled_from(_EDGES) | st.floats()
_ROW = st.lists(_VALUES, min_size=3, max_size=3)

pytestmark = pytest.mark.skipif(not native_available(), reason="compiled kernel not built")


@settings(max_examples=300, deadline=None)
@given(_ROW, _ROW, st.booleans())
def test_a_correction_or_bound_row_is_refused_as_the_twin_refuses_it(
    correction: list[float], bound: list[float], bounded: bool
) -> None:
    results = {}
    for backend in ("native", "python"):
        ws = workspace()
        ws.corrections[1] = correction  # task 1's class
        call = bind(ws, backend)  # type: ignore[arg-type]
        rows = np.ones((N_CLASSES, 3))
        rows[1] = bound
        call.bind_bounds(rows if bounded else None)
        results[backend] = call(2)
    assert results["native"] == results["python"]
    valid = all(c > 0.0 and c <= sys.float_info.max for c in correction)
    if valid and bounded:
        valid = all(1.0 <= b <= sys.float_info.max for b in bound)
    assert (results["native"][0] == L.ST_OK) == valid


@settings(max_examples=200, deadline=None)
@given(_ROW)
def test_a_divisor_row_is_refused_as_the_twin_refuses_it(divisors: list[float]) -> None:
    results = {}
    for backend in ("native", "python"):
        ws = workspace()
        call = bind(ws, backend)  # type: ignore[arg-type]
        got = call.explore(np.array(divisors), np.zeros(3, np.uint8), False)
        results[backend] = got[:2]
    assert results["native"] == results["python"]
    valid = all(1.0 <= d <= sys.float_info.max for d in divisors)
    assert (results["native"] == (L.ST_OK, -1)) == valid
