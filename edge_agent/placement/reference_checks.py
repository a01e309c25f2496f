"""Input checks of the pure-Python kernel twin, mirroring hetmesh_input_checks.c."""

from __future__ import annotations

import math
from collections.abc import Sequence

from edge_agent.placement import layout as L

MAX_DOUBLE = 1.7976931348623157e308
#: the pessimistic bounds of a bound call (``hm_call.bound_rows``): a row per class, a factor
#: per device; None: every factor 1
Bounds = Sequence[Sequence[float]] | None


def bad_rows(
    devices: Sequence[float], n_dev: int, tasks: Sequence[float], n_task: int, n_classes: int
) -> tuple[int, int]:
    """Return (status, bad row) for the first invalid device or task row, or (OK, -1)."""
    for d in range(n_dev):
        row = devices[d * L.DEV_FIELDS : (d + 1) * L.DEV_FIELDS]
        if not _device_ok(row):
            return L.ST_BAD_DEVICE, d
    for t in range(n_task):
        row = tasks[t * L.TASK_FIELDS : (t + 1) * L.TASK_FIELDS]
        if not _task_ok(row, n_classes):
            return L.ST_BAD_TASK, t
    return L.ST_OK, -1


def _is_small_int(x: float, lo: float, hi: float) -> bool:
    return lo <= x <= hi and x == math.floor(x)


MASK_MAX = 2147483647.0


def _device_ok(r: Sequence[float]) -> bool:
    """Mirror of the kernel's device checks; kind and masks are read truncated by int()."""
    if not all(math.isfinite(x) and x >= 0.0 for x in r):
        return False
    return (
        r[L.DEV_KIND] <= 31.0
        and r[L.DEV_PREC_MASK] <= MASK_MAX
        and r[L.DEV_OPS_MASK] <= MASK_MAX
        and r[L.DEV_FORMAT_MASK] <= MASK_MAX
        and 0.0 < r[L.DEV_EFFICIENCY] <= 1.0
        and r[L.DEV_UTIL] <= 1.0
        and r[L.DEV_PRED_UTIL] <= 1.0
        and r[L.DEV_HEALTH] in (0.0, 1.0, 2.0)
        and _is_small_int(r[L.DEV_SLOTS], 0, L.MAX_SLOTS)
        and _is_small_int(r[L.DEV_SLOT_NEXT], 0, L.MAX_SLOTS - 1)
    )


def _task_ok(r: Sequence[float], n_classes: int) -> bool:
    if not all(math.isfinite(x) and x >= 0.0 for x in r):
        return False
    return (
        _is_small_int(r[L.TASK_FORMAT], 0, MASK_MAX)
        and _is_small_int(r[L.TASK_PREC_MASK], 0, (1 << L.PREC_BITS) - 1)
        and _is_small_int(r[L.TASK_FLAGS], 0, L.TF_DROP_IF_LATE)
        and _is_small_int(r[L.TASK_KINDS_MASK], 0, 2147483647)
        and _is_small_int(r[L.TASK_PREC], 0, L.PREC_BITS - 1)
        and _is_small_int(r[L.TASK_OPS_MASK], 0, 2147483647)
        and _is_small_int(r[L.TASK_COUNT], 1, L.MAX_GANG)
        and _is_small_int(r[L.TASK_CLASS], 0, n_classes - 1)
        and _is_small_int(r[L.TASK_CONFIG], 0, 2147483647)
    )


def check_inputs(
    devices: Sequence[float],
    n_dev: int,
    tasks: Sequence[float],
    n_task: int,
    weights: Sequence[float],
    corrections: Sequence[float],
    n_classes: int,
    out: Sequence[float],
    bounds: Bounds = None,
) -> tuple[int, int]:
    """Return (status, bad row) of ``place_batch``'s input checks (ST_OK, -1 when valid).

    ``bounds``: the pessimistic bound rows (``hm_call.bound_rows``), checked like the
    correction rows the batch uses (finite, >= 1), or None.
    """
    if (
        n_dev < 0
        or n_task < 0
        or n_classes < 1
        or len(devices) < n_dev * L.DEV_FIELDS
        or len(tasks) < n_task * L.TASK_FIELDS
        or len(corrections) < n_classes * n_dev
        or len(out) < n_task * L.OUT_FIELDS
    ):
        return L.ST_BAD_SHAPE, -1
    if len(weights) < L.N_WEIGHTS or not all(
        math.isfinite(w) and w >= 0.0 for w in weights[: L.N_OBJECTIVES]
    ):
        return L.ST_BAD_POLICY, -1
    wsum = 0.0
    for w in weights[: L.N_OBJECTIVES]:
        wsum += w
    guard = weights[L.W_QUEUE_GUARD]
    if wsum <= 0.0 or not (guard == 0.0 or 1.0 <= guard <= MAX_DOUBLE):
        return L.ST_BAD_POLICY, -1
    if not 0.0 <= weights[L.W_CONGESTION] <= MAX_DOUBLE:
        return L.ST_BAD_POLICY, -1
    status, bad = bad_rows(devices, n_dev, tasks, n_task, n_classes)
    if status != L.ST_OK:
        return status, bad
    checked: set[int] = set()
    for t in range(n_task):  # only the correction rows the batch uses
        cls = int(tasks[t * L.TASK_FIELDS + L.TASK_CLASS])
        if cls in checked:
            continue
        checked.add(cls)
        for d in range(n_dev):
            c = corrections[cls * n_dev + d]
            if not (math.isfinite(c) and c > 0.0):
                return L.ST_BAD_CORRECTION, cls * n_dev + d
        if bounds is not None and cls < len(bounds):
            for d, b in enumerate(bounds[cls]):
                if not (math.isfinite(b) and b >= 1.0):
                    return L.ST_BAD_CORRECTION, cls * n_dev + d
    return L.ST_OK, -1
