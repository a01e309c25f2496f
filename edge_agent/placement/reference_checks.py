"""Input checks of the pure-Python kernel twin, mirroring hetmesh_kernel.c's validation."""

from __future__ import annotations

import math
from collections.abc import Sequence

from edge_agent.placement import layout as L

MAX_DOUBLE = 1.7976931348623157e308


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
