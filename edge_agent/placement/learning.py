"""Learned (task class, device) corrections: a stable estimator and bounded exploration.

The kernel's estimate is the uncorrected model (roofline, or a published figure through
the class's prior) times a correction. Each completion measures the ratio
measured / uncorrected estimate (``Decision.base_s``: the estimate with correction 1,
recorded at decision time), and the correction moves toward that ratio in log space:

    log c <- log c + rate * (log(measured / base) - log c)

Every completion pulls toward the same target, however many tasks of the class were in
flight with an older factor, so k concurrent completions cannot apply one step k times.
The rate is max(learning rate, 1 / samples so far): the first measurement replaces the
prior, the first few are averaged, then the average moves (an EWMA).

A correction at a clamp (or stuck far above the others) keeps its device from being
chosen, so it could never be measured again. ``PROBE_EVERY``: one placement in that many,
for a class whose row has a factor at a clamp, is placed with those factors reset to 1
(the uncorrected model: optimism under uncertainty); when the policy then picks such a
device, its measurement replaces the factor (a probe's feedback moves it all the way to
the measured ratio). Exploration is bounded by that rate.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

CORRECTION_MIN = 0.02
CORRECTION_MAX = 50.0
PROBE_EVERY = 64  # at most one placement in this many is an exploration probe
_AT_CLAMP = 1.001  # within this factor of a bound counts as at it
CLAMPED_ABOVE = CORRECTION_MAX / _AT_CLAMP  # a factor >= this sits at the upper clamp
CLAMPED_BELOW = CORRECTION_MIN * _AT_CLAMP  # a factor <= this sits at the lower clamp


def clamp(factor: float) -> float:
    """Return ``factor`` within the learning range (NaN: the lower bound)."""
    # min(CORRECTION_MAX, max(CORRECTION_MIN, factor)) without the two builtin calls
    low = factor if factor > CORRECTION_MIN else CORRECTION_MIN
    return low if low < CORRECTION_MAX else CORRECTION_MAX


def toward(current: float, target: float, rate: float) -> float:
    """Return ``current`` moved ``rate`` of the way to ``target`` in log space, clamped."""
    log_current = math.log(current)  # on every feedback: its log taken once
    return clamp(math.exp(log_current + rate * (math.log(target) - log_current)))


def clamped(row: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Return which factors of a correction row sit at (or within 0.1% of) a clamp."""
    return (row >= CLAMPED_ABOVE) | (row <= CLAMPED_BELOW)
