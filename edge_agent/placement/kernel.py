"""Chooses the placement backend: the compiled C kernel, or its pure-Python twin.

Set ``HETMESH_PURE_PYTHON=1`` to force the twin (read once, through ``default_backend``).
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import numpy as np

from edge_agent.errors import KernelError
from edge_agent.placement import _native, reference, reference_explore, reference_one
from edge_agent.placement import layout as L
from edge_agent.placement.workspace import Workspace

Backend = Literal["native", "python"]
_FLOAT_MAX = sys.float_info.max
Rows = np.ndarray | None  # bind_book's divisor rows and busy flags (None: not bound)


class KernelCall(Protocol):
    """A kernel bound to one workspace."""

    def __call__(self, n_task: int) -> tuple[int, int]: ...

    def restricted(self, n_task: int) -> tuple[int, int]: ...

    # ``place_one``'s call: task row 0 alone, over every device or the ``allowed`` ones;
    # returns the status only (``bad_index`` reads the offending row when it is not OK)
    def task0(self) -> int: ...

    def task0_restricted(self) -> int: ...

    def bad_index(self, restricted: bool) -> int: ...

    # ``place_one``'s ordinary call: task row 0 among the flags in ``ws.sets[set]`` (-1:
    # every device), with the exploration book's ticks (``reference_one``); returns a
    # status, or ``layout.ONE_EXPLORE``/``ONE_PROBE`` when that pass is due instead.
    # ``task``: a task row's float64 bytes, copied into row 0 first (where it stays)
    def one(self, set: int, task: bytes) -> int: ...

    # ``one`` as (a function, its first argument): ``f(arg, set, task)`` is ``one(set, task)``
    # with no bound method or partial in between (place_one's hot path calls it so)
    @property
    def one_entry(self) -> tuple[Callable[[object, int, bytes], int], object]: ...

    def bind_book(self, book: np.ndarray, congested: float, rows: Rows, busy: Rows) -> None: ...

    # every bound call's pessimistic bounds (``hm_call.bound_rows``): a row per book class
    # (float64, >= 1), or None; the congestion charge counts a service at its bound
    def bind_bounds(self, rows: Rows) -> None: ...

    def explore(
        self, divisors: np.ndarray, busy: np.ndarray, restricted: bool
    ) -> tuple[int, int, int]: ...

    def probe(self, lo: float, hi: float, restricted: bool) -> tuple[int, int, bool]: ...

    def devices_changed(self) -> None: ...

    # ``hm_set_live``: ``values[k * n_dev + d]`` into live column ``cols[k]`` of every device
    # ``d``, all checked first (-1: written; else the first bad value's position, nothing
    # written; -2: a column that is not live). Not a number: TypeError, nothing written
    def set_live(self, cols: Sequence[int], n_cols: int, values: Sequence[float]) -> int: ...


def native_available() -> bool:
    """Return True when the compiled kernel is importable."""
    return bool(_native.AVAILABLE)


def default_backend(environ: dict[str, str] | None = None) -> Backend:
    """Return "python" when forced by HETMESH_PURE_PYTHON or the extension is missing."""
    env = os.environ if environ is None else environ
    if env.get("HETMESH_PURE_PYTHON", "").strip().lower() in {"1", "true", "yes"}:
        return "python"
    return "native" if native_available() else "python"


class PythonCall:
    """A kernel call that runs the pure-Python twin over a workspace's buffers."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self._bad = -1  # the last call's bad index
        self._book: np.ndarray = np.zeros(L.BK_GLOBALS, np.int64)
        self._congested = 0.0
        self._divisor_rows: np.ndarray | None = None
        self._busy: np.ndarray | None = None
        self._bounds: np.ndarray | None = None

    def bind_book(self, book: np.ndarray, congested: float, rows: Rows, busy: Rows) -> None:
        """Bind ``one``'s exploration book (int64, ``layout.BK_*``) and, when given, each
        class's divisor row and the busy flags (``one`` then explores itself)."""
        self._book = book
        self._congested = congested
        self._divisor_rows = rows
        self._busy = busy

    def bind_bounds(self, rows: Rows) -> None:
        """Bind the pessimistic bound rows every call charges by (None: none)."""
        self._bounds = rows

    def _bound_rows(self) -> list[list[float]] | None:
        return None if self._bounds is None else self._bounds.tolist()

    def one(self, set: int, task: bytes) -> int:
        """``hm_place_one``: ``task`` into row 0, the book's ticks, then task row 0 among
        ``ws.sets[set]``."""
        ws = self.ws
        if not -1 <= set < ws.sets.shape[0]:
            self._bad = -1
            return L.ST_BAD_SHAPE
        ws.tasks[0] = np.frombuffer(task, np.float64, L.TASK_FIELDS)
        book = self._book
        n_book = (len(book) - L.BK_GLOBALS) // L.BK_CLASS_FIELDS
        row = reference_one.class_row(float(ws.tasks[0, L.TASK_CLASS]), n_book)
        due = reference_one.tick(book, row)
        if due == L.ONE_EXPLORE and self._divisor_rows is not None:
            cls = (row - L.BK_GLOBALS) // L.BK_CLASS_FIELDS
            busy = None if self._busy is None else self._busy.tolist()
            allowed = None if set < 0 else ws.sets[set].tolist()
            status, _, outcome = self._explore(self._divisor_rows[cls].tolist(), busy, allowed)
            if status != L.ST_OK:
                return status
            usual = ws.out[L.EX_ROW_USUAL].tolist()
            reference_one.record(book, row, usual, self._congested)  # pressed, as step 3
            return L.ONE_EXPLORED + outcome
        if due:
            return due
        status = self._place(1, None if set < 0 else ws.sets[set].tolist())[0]
        if status == L.ST_OK:
            reference_one.record(book, row, ws.out[0].tolist(), self._congested)
        return status

    @property
    def one_entry(self) -> tuple[Callable[[object, int, bytes], int], object]:
        """``one`` as (the function, this call): ``f(arg, set, task)``."""
        return PythonCall.one, self  # type: ignore[return-value]

    def devices_changed(self) -> None:
        """Nothing to do: the twin validates every row on every call."""

    def set_live(self, cols: Sequence[int], n_cols: int, values: Sequence[float]) -> int:
        """``hm_set_live``: write live columns of every device, each value checked first."""
        ws = self.ws
        n = int(ws.n_dev)
        packed = array("d", values)  # a value that is not a number raises, as cffi does
        if n_cols < 0 or len(cols) < n_cols or len(packed) < n_cols * n:
            return -2
        for k, col in enumerate(cols[:n_cols]):
            top = L.LIVE_TOP.get(col)
            if top is None:
                return -2
            health = col == L.DEV_HEALTH
            for d, value in enumerate(packed[k * n : (k + 1) * n]):
                if not 0.0 <= value <= min(top, _FLOAT_MAX) or (
                    health and value not in (0.0, 1.0, 2.0)
                ):
                    return k * n + d
        for k, col in enumerate(cols[:n_cols]):
            ws.devices[:, col] = packed[k * n : (k + 1) * n]
        return -1

    def __call__(self, n_task: int) -> tuple[int, int]:
        """Place tasks ``0..n_task-1`` of the workspace; return (status, bad index)."""
        return self._place(n_task, None)

    def restricted(self, n_task: int) -> tuple[int, int]:
        """Place like ``__call__`` on the devices flagged in ``ws.allowed`` only."""
        return self._place(n_task, self.ws.allowed.tolist())

    def task0(self) -> int:
        """Place task row 0 over every device; return the status (``bad_index``: the row)."""
        return self._place(1, None)[0]

    def task0_restricted(self) -> int:
        """Place task row 0 on the devices flagged in ``ws.allowed``; return the status."""
        return self._place(1, self.ws.allowed.tolist())[0]

    def bad_index(self, restricted: bool) -> int:
        """Return the offending row of the last call that failed (-1: none)."""
        return self._bad

    def explore(
        self, divisors: np.ndarray, busy: np.ndarray, restricted: bool
    ) -> tuple[int, int, int]:
        """Decide task 0 as the kernel's ``MODE_EXPLORE``; return (status, bad, outcome)."""
        allowed = self.ws.allowed.tolist() if restricted else None
        return self._explore(divisors.tolist(), busy.tolist(), allowed)

    def _explore(
        self, divisors: list[float], busy: list[int] | None, allowed: list[int] | None
    ) -> tuple[int, int, int]:
        ws = self.ws
        devices = ws.devices.ravel().tolist()
        status, bad, outcome, out, reasons = reference_explore.explore(
            devices,
            ws.n_dev,
            ws.tasks[0].tolist(),
            ws.weights.tolist(),
            ws.corrections.ravel().tolist(),
            ws.n_classes,
            divisors,
            busy,
            allowed,
            ws.keep_reasons,
            self._bound_rows(),
        )
        self._bad = bad
        if status == L.ST_OK:
            ws.devices[:] = np.asarray(devices).reshape(ws.devices.shape)
            for row, done in enumerate(out):
                if done is not None:
                    ws.out[row] = done
            for row, kept in enumerate(reasons):
                if kept is not None and ws.n_dev:
                    ws.reasons[row] = kept
        return status, bad, outcome

    def probe(self, lo: float, hi: float, restricted: bool) -> tuple[int, int, bool]:
        """Decide task 0 as the kernel's ``MODE_PROBE``; return (status, bad index, stuck)."""
        ws = self.ws
        cls = ws.tasks[0, L.TASK_CLASS]
        stuck = False
        if ws.n_dev and cls == int(cls) and 0 <= cls < ws.n_classes:
            stuck = any(f >= hi or f <= lo for f in ws.corrections[int(cls)].tolist())
        opt = reference.PassOptions(reset=(lo, hi)) if stuck else reference.PLAIN
        status, bad = self._place(1, ws.allowed.tolist() if restricted else None, opt)
        return status, bad, stuck

    def _place(
        self, n_task: int, allowed: list[int] | None, opt: reference.PassOptions = reference.PLAIN
    ) -> tuple[int, int]:
        ws = self.ws
        devices = ws.devices.ravel().tolist()
        out = [0.0] * (n_task * L.OUT_FIELDS)
        reasons = [0] * (n_task * ws.n_dev) if ws.keep_reasons else None
        status, bad = reference.place_batch(
            devices,
            ws.n_dev,
            ws.tasks[:n_task].ravel().tolist(),
            n_task,
            ws.weights.tolist(),
            ws.corrections.ravel().tolist(),
            ws.n_classes,
            out,
            reasons,
            allowed,
            opt,
            self._bound_rows(),
        )
        if status == L.ST_OK and n_task:
            ws.devices[:] = np.asarray(devices).reshape(ws.devices.shape)
            ws.out[:n_task] = np.asarray(out).reshape(n_task, L.OUT_FIELDS)
            if reasons is not None and ws.n_dev:
                ws.reasons[:n_task] = np.asarray(reasons).reshape(n_task, ws.n_dev)
        self._bad = bad
        return status, bad


def bind(ws: Workspace, backend: Backend) -> KernelCall:
    """Return a call of ``backend`` bound to ``ws``'s buffers."""
    if backend == "native":
        return _native.NativeCall(ws)
    return PythonCall(ws)


def check(status: int, bad: int) -> None:
    """Raise KernelError for a non-OK status, naming the offending row."""
    if status != L.ST_OK:
        where = f" (row {bad})" if bad >= 0 else ""
        raise KernelError(status, L.STATUS_NAMES.get(status, "unknown status") + where)
