"""The one module that touches cffi: binds workspace buffers and calls the C kernel."""

from __future__ import annotations

from functools import partial
from typing import Any

from edge_agent.placement import layout as L
from edge_agent.placement.workspace import Workspace

try:
    from edge_agent.placement._kernel import ffi, lib  # compiled by pip install

    AVAILABLE = lib.hm_abi_version() == 8
except ImportError:  # pragma: no cover - exercised when the extension is missing
    ffi = lib = None
    AVAILABLE = False


def _ptr(ctype: str, array: Any) -> Any:
    return ffi.cast(ctype, ffi.from_buffer(array))


def _bind(ws: Workspace, restricted: bool) -> Any:
    c = ffi.new("hm_call *")
    c.devices = _ptr("double *", ws.devices)
    c.n_dev = ws.n_dev
    c.tasks = _ptr("double *", ws.tasks)
    c.weights = _ptr("double *", ws.weights)
    c.corrections = _ptr("double *", ws.corrections)
    c.n_classes = ws.n_classes
    c.scratch = _ptr("double *", ws.scratch)
    c.out = _ptr("double *", ws.out)
    c.reasons = _ptr("uint8_t *", ws.reasons) if ws.keep_reasons else ffi.NULL
    c.allowed = _ptr("uint8_t *", ws.allowed) if restricted else ffi.NULL
    c.sets = _ptr("uint8_t *", ws.sets)
    c.n_sets = ws.sets.shape[0]
    return c


class NativeCall:
    """A kernel call with its pointers bound once, in ``hm_call`` structs, to a workspace.

    Two structs share the buffers: one over every device, one restricted to the devices
    flagged in ``ws.allowed`` (so that an unrestricted call pays nothing for the option).
    """

    def __init__(self, ws: Workspace) -> None:
        if not AVAILABLE:
            raise RuntimeError("the compiled placement kernel is not installed")
        self.ws = ws  # keeps the arrays the structs point into alive
        self._c = _bind(ws, False)
        self._r = _bind(ws, True)
        self._place = lib.hm_place_bound
        # place_one's calls, bound whole: one C call each, no Python frame in between
        self.task0 = partial(lib.hm_place_bound, self._c, 1)
        self.task0_restricted = partial(lib.hm_place_bound, self._r, 1)
        # place_one's ordinary call (``one(set, task)``: a task row's bytes, which cffi hands
        # to C without a copy), once a book is bound (``bind_book``)
        self.one = partial(lib.hm_place_one, self._c)
        self.one_entry = (lib.hm_place_one, self._c)  # the same, without the partial
        # update_live_many's whole-fleet write: set_live(cols, n_cols, values) -> -1 when
        # written, else the first bad value's position (cffi converts the lists; a value that
        # is not a number raises TypeError, an integer past the largest float OverflowError)
        self.set_live = partial(lib.hm_set_live, self._c)
        self._book: Any = None
        self._bounds: Any = None  # the bound rows both structs point into (kept alive)
        self._busy: Any = None  # the busy flags bound in both structs (kept alive there)
        self._rows: dict[int, tuple[Any, Any]] = {}  # id -> (divisor row, its pointer)

    def devices_changed(self) -> None:
        """Make the next call validate the device rows and recompute their constants."""
        self._c.devices_checked = 0
        self._r.devices_checked = 0

    def bind_book(self, book: Any, congested: float, rows: Any, busy: Any) -> None:
        """Bind ``one``'s exploration book (int64, ``layout.BK_*``; kept alive here) and,
        when given, each class's divisor row (float64, a row per book class) and the busy
        flags: ``one`` then runs a due exploration decision itself (``ONE_EXPLORED``)."""
        self._book = (book, rows)
        self._c.book = ffi.from_buffer("int64_t[]", book)
        self._c.book_classes = (len(book) - L.BK_GLOBALS) // L.BK_CLASS_FIELDS
        self._c.congested = congested
        self._c.divisor_rows = ffi.NULL if rows is None else ffi.from_buffer("double[]", rows)
        if busy is not None and self._busy is not busy:
            self._busy = busy
            self._c.busy = self._r.busy = ffi.from_buffer("uint8_t[]", busy)

    def bind_bounds(self, rows: Any) -> None:
        """Bind the pessimistic bound rows (float64, a row per book class; kept alive here)
        in both structs, or unbind them (None): every call charges by them."""
        self._bounds = rows
        ptr = ffi.NULL if rows is None else ffi.from_buffer("double[]", rows)
        self._c.bound_rows = self._r.bound_rows = ptr
        self._c.bound_classes = self._r.bound_classes = 0 if rows is None else len(rows)

    def __call__(self, n_task: int) -> tuple[int, int]:
        """Place tasks ``0..n_task-1`` of the workspace; return (status, bad index)."""
        status = self._place(self._c, n_task)
        return status, self._c.bad_index

    def restricted(self, n_task: int) -> tuple[int, int]:
        """Place like ``__call__`` on the devices flagged in ``ws.allowed`` only."""
        status = self._place(self._r, n_task)
        return status, self._r.bad_index

    def bad_index(self, restricted: bool) -> int:
        """Return the offending row of the last failed call (``task0`` or restricted)."""
        return int((self._r if restricted else self._c).bad_index)

    def explore(self, divisors: Any, busy: Any, restricted: bool) -> tuple[int, int, int]:
        """Decide task 0 in ``HM_MODE_EXPLORE``; return (status, bad index, outcome).

        ``divisors`` (float64) and ``busy`` (uint8): one per device, C-contiguous. The
        same C entry as a plain call, so that this rare call runs a warm path.
        """
        c = self._r if restricted else self._c
        if self._busy is not busy:  # the Explorer's flags: one array for its lifetime
            self._busy = busy
            self._c.busy = self._r.busy = ffi.from_buffer("uint8_t[]", busy)
        kept = self._rows.get(id(divisors))
        if kept is None or kept[0] is not divisors:  # a class's row, kept
            if len(self._rows) >= 256:
                self._rows.clear()
            kept = self._rows[id(divisors)] = (divisors, ffi.from_buffer("double[]", divisors))
        c.divisors = kept[1]
        c.mode = L.MODE_EXPLORE
        status = self._place(c, 1)
        c.mode = L.MODE_PLACE
        return status, c.bad_index, c.outcome

    def probe(self, lo: float, hi: float, restricted: bool) -> tuple[int, int, bool]:
        """Decide task 0 in ``HM_MODE_PROBE``; return (status, bad index, stuck)."""
        c = self._r if restricted else self._c
        c.clamp_lo = lo
        c.clamp_hi = hi
        c.mode = L.MODE_PROBE
        status = self._place(c, 1)
        c.mode = L.MODE_PLACE
        return status, c.bad_index, bool(c.outcome)
