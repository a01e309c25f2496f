"""Preallocated arrays for one fleet: device rows, corrections, and per-batch outputs."""

from __future__ import annotations

from array import array

import numpy as np
import numpy.typing as npt

from edge_agent.placement import layout as L

F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]

#: candidate sets whose device flags a workspace keeps (rows 1.. of ``Workspace.sets``)
SETS_KEPT = 256


class Workspace:
    """The kernel's buffers, sized for ``n_dev`` devices and up to ``capacity`` tasks."""

    def __init__(self, devices: F64, corrections: F64, capacity: int, keep_reasons: bool) -> None:
        n_dev = devices.shape[0]
        if devices.shape != (n_dev, L.DEV_FIELDS) or corrections.shape[1:] != (n_dev,):
            raise ValueError("device rows or correction matrix have the wrong shape")
        self.n_dev = n_dev
        self.capacity = capacity
        self.keep_reasons = keep_reasons
        self.devices = np.ascontiguousarray(devices, dtype=np.float64)
        self.corrections = np.ascontiguousarray(corrections, dtype=np.float64)
        self.weights: F64 = np.zeros(L.N_WEIGHTS, dtype=np.float64)  # objectives, queue guard
        self.tasks: F64 = np.zeros((capacity, L.TASK_FIELDS), dtype=np.float64)
        self.scratch: F64 = np.zeros((max(n_dev, 1), L.SCR_FIELDS), dtype=np.float64)
        # the output rows live in a flat array.array (the numpy view is the kernel's): a
        # decision copies its row as an array slice, one allocation and one memcpy
        self.out_flat = array("d", bytes(8 * capacity * L.OUT_FIELDS))
        self.out: F64 = np.frombuffer(self.out_flat, dtype=np.float64).reshape(
            capacity, L.OUT_FIELDS
        )
        self.reasons: U8 = np.zeros((capacity if keep_reasons else 1, max(n_dev, 1)), np.uint8)
        # candidate masks, one row of device flags each: row 0 is ``allowed`` (a restricted
        # call's, filled per call), rows 1..SETS_KEPT are kept sets' (``hm_place_one``'s set)
        self.sets: U8 = np.zeros((1 + SETS_KEPT, max(n_dev, 1)), np.uint8)
        self.allowed: U8 = self.sets[0]
        self.allowed[:] = 1
        self.task0, self.reasons0 = self.tasks[0], self.reasons[0]

    @property
    def n_classes(self) -> int:
        """Return the number of task classes (rows of the correction matrix)."""
        return int(self.corrections.shape[0])
