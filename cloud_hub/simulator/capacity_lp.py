"""A fleet's capacity for a task mix: the largest arrival rate a perfect router sustains.

Capacity here is the optimum of a small linear programme: send ``x[m][d]`` tasks/s of
model ``m`` to device ``d``; every model gets its share ``w[m]`` of the total rate ``lam``
(``sum_d x[m][d] >= lam * w[m]``); no device is busy more than all the time
(``sum_m x[m][d] * s[m][d] <= 1``, ``s`` = mean true service seconds, ``inf`` where ``d``
cannot run ``m``). Maximise ``lam``. Above it no placement keeps the queues bounded, so
"80% load" means 80% of what a clairvoyant router could at best sustain.

Solved with a dense simplex (Bland's rule, so degenerate pivots cannot cycle): the
problems here have tens of variables, and the project does not depend on scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

_EPS = 1e-12


def _simplex_max(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Return max c.x subject to a.x <= b, x >= 0, for b >= 0 (the origin is feasible)."""
    m, n = a.shape
    tab = np.zeros((m + 1, n + m + 1))
    tab[:m, :n] = a
    tab[:m, n : n + m] = np.eye(m)
    tab[:m, -1] = b
    tab[m, :n] = -c
    basis = list(range(n, n + m))
    for _ in range(50 * (n + m)):
        entering = next((j for j in range(n + m) if tab[m, j] < -_EPS), None)
        if entering is None:
            return float(tab[m, -1])
        col = tab[:m, entering]
        rows = [i for i in range(m) if col[i] > _EPS]
        if not rows:
            return math.inf  # unbounded
        best = min(tab[i, -1] / col[i] for i in rows)
        leave = min((i for i in rows if tab[i, -1] / col[i] <= best + _EPS), key=lambda i: basis[i])
        tab[leave] /= tab[leave, entering]
        for i in range(m + 1):
            if i != leave and tab[i, entering] != 0.0:
                tab[i] -= tab[i, entering] * tab[leave]
        basis[leave] = entering
    raise RuntimeError("simplex did not converge")  # pragma: no cover - Bland's rule ends


def mix_capacity(service_s: Sequence[Sequence[float]], weights: Sequence[float]) -> float:
    """Return the largest total tasks/s a fleet sustains for a mix (see the module doc).

    ``service_s[m][d]`` is the mean true service time of model ``m`` on device ``d``
    (``inf`` or ``nan`` = cannot run); ``weights[m]`` the model's share of arrivals
    (normalised here). 0 when some model with a share can run nowhere.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 1 or len(w) != len(service_s) or not (w >= 0).all() or w.sum() <= 0:
        raise ValueError("weights: one share >= 0 per model, not all 0")
    w = w / w.sum()
    pairs = [
        (m, d, float(s))
        for m, row in enumerate(service_s)
        for d, s in enumerate(row)
        if math.isfinite(s) and s > 0
    ]
    runnable = {m for m, _, _ in pairs}
    if any(w[m] > 0 and m not in runnable for m in range(len(w))):
        return 0.0
    n_dev = max((d for _, d, _ in pairs), default=-1) + 1
    n_var = len(pairs) + 1  # x per runnable pair, then lam
    a = np.zeros((len(w) + n_dev, n_var))
    for k, (m, d, s) in enumerate(pairs):
        a[m, k] = -1.0  # lam * w[m] - sum_d x[m][d] <= 0
        a[len(w) + d, k] = s  # sum_m x[m][d] * s[m][d] <= 1
    a[: len(w), -1] = w
    b = np.concatenate([np.zeros(len(w)), np.ones(n_dev)])
    c = np.zeros(n_var)
    c[-1] = 1.0
    return _simplex_max(c, a, b)
