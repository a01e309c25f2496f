"""The one module that touches cffi: binds workspace buffers and calls the C kernel."""

from __future__ import annotations

from typing import Any

from edge_agent.placement.workspace import Workspace

try:
    from edge_agent.placement._kernel import ffi, lib  # compiled by pip install

    AVAILABLE = lib.hm_abi_version() == 1
except ImportError:  # pragma: no cover - exercised when the extension is missing
    ffi = lib = None
    AVAILABLE = False


def _ptr(ctype: str, array: Any) -> Any:
    return ffi.cast(ctype, ffi.from_buffer(array))


class NativeCall:
    """A kernel call with its pointers bound once, in an ``hm_call`` struct, to a workspace."""

    def __init__(self, ws: Workspace) -> None:
        if not AVAILABLE:
            raise RuntimeError("the compiled placement kernel is not installed")
        self.ws = ws  # keeps the arrays the struct points into alive
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
        self._c = c
        self._place = lib.hm_place_bound

    def devices_changed(self) -> None:
        """Make the next call validate the device rows and recompute their constants."""
        self._c.devices_checked = 0

    def __call__(self, n_task: int) -> tuple[int, int]:
        """Place tasks ``0..n_task-1`` of the workspace; return (status, bad index)."""
        status = self._place(self._c, n_task)
        return status, self._c.bad_index
