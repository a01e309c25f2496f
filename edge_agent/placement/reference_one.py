"""Pure-Python twin of the kernel's ``hm_place_one`` bookkeeping: the exploration book.

``place_one``'s ordinary call counts the decision, ticks its class's exploration interval
and the clamped-factor probe's, and (when neither is due) decides and records whether the
class is *pressed* (late or congested; ``explore``). The book is one int64 array: the
``BK_*`` globals, then ``BK_CLASS_FIELDS`` per class. See ``native/hetmesh_kernel.h``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from edge_agent.placement import layout as L

Book = npt.NDArray[np.int64]


def class_row(cls: float, book_classes: int) -> int:
    """Return the book offset of class ``cls``'s row, or -1 when it is not a class of the book."""
    if math.isfinite(cls) and cls == int(cls) and 0 <= cls < book_classes:
        return L.BK_GLOBALS + int(cls) * L.BK_CLASS_FIELDS
    return -1


def tick(book: Book, row: int) -> int:
    """Count a decision (steps 1-2); return ``ONE_EXPLORE``/``ONE_PROBE`` when due, else 0."""
    if book[L.BK_COUNTING]:
        book[L.BK_DECISIONS] += 1
        if row >= 0 and book[L.BK_EXPLORING] and book[row + L.BK_UNTRIED]:
            ticks = book[row + L.BK_TICK] + 1
            every = book[row + L.BK_EVERY]
            if book[row + L.BK_PRESSED] and every > book[L.BK_HOPELESS_EVERY]:
                every = book[L.BK_HOPELESS_EVERY]
            if ticks >= every:
                book[row + L.BK_TICK] = 0
                return L.ONE_EXPLORE
            book[row + L.BK_TICK] = ticks
    book[L.BK_PROBE_TICK] += 1
    if book[L.BK_PROBE_TICK] >= book[L.BK_PROBE_EVERY]:
        book[L.BK_PROBE_TICK] = 0
        return L.ONE_PROBE
    return 0


def pressed(out: Sequence[float], congested: float) -> bool:
    """Return whether a decided output row is late or congested (step 3)."""
    latency = out[L.OUT_EST + L.EST_LATENCY_S]
    return out[L.OUT_FLAGS] != 0.0 or latency > congested * out[L.OUT_EST + L.EST_SERVICE_S]


def record(book: Book, row: int, out: Sequence[float], congested: float) -> None:
    """Set the class's pressed flag from its decided output row (while counting)."""
    if row >= 0 and book[L.BK_COUNTING]:
        book[row + L.BK_PRESSED] = int(pressed(out, congested))
