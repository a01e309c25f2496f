"""The one module that touches cffi: binds workspace buffers and calls the C kernel."""

from __future__ import annotations

from typing import Any

from edge_agent.placement import layout as L
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
    """A kernel call with its pointers bound once to one workspace's buffers."""

    def __init__(self, ws: Workspace) -> None:
        if not AVAILABLE:
            raise RuntimeError("the compiled placement kernel is not installed")
        self.ws = ws
        self._keep = (ws.devices, ws.tasks, ws.weights, ws.corrections, ws.scratch)
        self._dev = _ptr("double *", ws.devices)
        self._tasks = _ptr("double *", ws.tasks)
        self._weights = _ptr("double *", ws.weights)
        self._corr = _ptr("double *", ws.corrections)
        self._scr = _ptr("double *", ws.scratch)
        self._asg = _ptr("int32_t *", ws.assigned)
        self._ru = _ptr("int32_t *", ws.runner_up)
        self._est = _ptr("double *", ws.estimates)
        self._comp = _ptr("double *", ws.components)
        self._cnt = _ptr("int32_t *", ws.reject_counts)
        self._reasons = _ptr("uint8_t *", ws.reasons)
        self._bad = ffi.new("int32_t *")

    def __call__(self, n_task: int) -> tuple[int, int]:
        """Place tasks ``0..n_task-1`` of the workspace; return (status, bad index)."""
        ws = self.ws
        status = lib.hm_place_batch(
            self._dev, ws.n_dev, self._tasks, n_task, self._weights, self._corr,
            ws.n_classes, self._scr, self._asg, self._ru, self._est, self._comp,
            self._cnt, self._reasons if ws.keep_reasons else ffi.NULL, self._bad,
        )
        return int(status), int(self._bad[0])

