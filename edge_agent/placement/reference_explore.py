"""Pure-Python twin of the kernel's ``HM_MODE_EXPLORE``: one exploration decision, one call.

The usual pass, then (when an untried device is among the candidates) the optimistic pass,
then (when it chose an untried device) that device's honest pass; exactly one of the usual
decision and the probe is charged. Every pass sees the state from before the call, so
nothing is copied or undone. See ``native/hetmesh_kernel.h`` for the contract.
"""

from __future__ import annotations

import math
from collections.abc import MutableSequence, Sequence

from edge_agent.placement import layout as L
from edge_agent.placement.reference import PassOptions, charge, device_scratch, place_task
from edge_agent.placement.reference_checks import MAX_DOUBLE, Bounds, check_inputs


def explore(
    devices: MutableSequence[float],
    n_dev: int,
    task: Sequence[float],
    weights: Sequence[float],
    corrections: Sequence[float],
    n_classes: int,
    divisors: Sequence[float],
    busy: Sequence[int] | None,
    allowed: Sequence[int] | None,
    keep_reasons: bool,
    bounds: Bounds = None,
) -> tuple[int, int, int, list[list[float] | None], list[list[int] | None]]:
    """Return (status, bad row, outcome ``EX_*``, out rows ``EX_ROWS``, reasons rows 0-1).

    A row is None when its pass did not run. Charges ``devices`` with the committed
    choice (nothing when the status is not OK). ``bounds``: ``hm_call.bound_rows``.
    """
    out: list[list[float] | None] = [None] * L.EX_ROWS
    reasons: list[list[int] | None] = [None, None]
    for d in range(n_dev):
        if not (math.isfinite(divisors[d]) and 1.0 <= divisors[d] <= MAX_DOUBLE):
            return L.ST_BAD_CORRECTION, d, L.EX_NO_UNTRIED, out, reasons
    status, bad = check_inputs(
        devices, n_dev, task, 1, weights, corrections, n_classes, [0.0] * L.OUT_FIELDS, bounds
    )
    if status != L.ST_OK:
        return status, bad, L.EX_NO_UNTRIED, out, reasons
    scratch = device_scratch(devices, n_dev)

    def run(row: int, opt: PassOptions, reasons_row: int | None) -> list[float]:
        """One pass into out row ``row`` (and reasons row ``reasons_row``), uncharged."""
        kept = [0] * n_dev if reasons_row is not None and keep_reasons else None
        if reasons_row is not None:
            reasons[reasons_row] = kept
        done = place_task(
            devices, n_dev, task, 0, weights, corrections, scratch, kept, allowed, opt, bounds
        )
        out[row] = done
        return done

    usual = run(L.EX_ROW_USUAL, PassOptions(commit=False), 0)
    free = [d for d in range(n_dev) if divisors[d] > 1.0 and not (busy is not None and busy[d])]
    if not free or (allowed is not None and not any(allowed[d] for d in free)):
        charge(devices, task, usual)
        outcome = L.EX_NONE_AMONG_CANDIDATES if free else L.EX_NO_UNTRIED
        return L.ST_OK, -1, outcome, out, reasons
    optimistic = run(L.EX_ROW_OPTIMISTIC, PassOptions(divisors, busy, commit=False), None)
    chosen = int(optimistic[L.OUT_ASSIGNED])
    if chosen < 0 or chosen not in free:
        charge(devices, task, usual)
        return L.ST_OK, -1, L.EX_FRUITLESS, out, reasons
    probe = run(L.EX_ROW_PROBE, PassOptions(only=chosen, commit=False), 1)
    hopeless = usual[L.OUT_ASSIGNED] >= 0 and int(usual[L.OUT_FLAGS]) & L.OF_LATE
    if probe[L.OUT_ASSIGNED] < 0 or (int(probe[L.OUT_FLAGS]) & L.OF_LATE and not hopeless):
        charge(devices, task, usual)
        return L.ST_OK, -1, L.EX_DEFERRED, out, reasons
    charge(devices, task, probe)
    return L.ST_OK, -1, L.EX_PROBE, out, reasons
