"""The placement engine: a fleet of devices, a policy, learned corrections, one kernel call."""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Collection, Sequence

import numpy as np

from edge_agent.errors import InvalidInput
from edge_agent.placement import kernel, learning
from edge_agent.placement import layout as L
from edge_agent.placement.batch import BatchPlacing
from edge_agent.placement.codec import PreparedTask, device_row, prepare
from edge_agent.placement.corrections import CorrectionTable
from edge_agent.placement.deadline_placing import DeadlinePlacing
from edge_agent.placement.decision import Decision, DecisionContext, decided
from edge_agent.placement.edf import WaitingWork
from edge_agent.placement.exploration_passes import ExplorationPasses
from edge_agent.placement.explore import CONGESTED, Explorer
from edge_agent.placement.first_flights import FirstFlights
from edge_agent.placement.learning import CORRECTION_MAX, CORRECTION_MIN
from edge_agent.placement.live import LiveState
from edge_agent.placement.outcomes import OutcomeRecording
from edge_agent.placement.policy import Policy
from edge_agent.placement.pooling import DevicePooling
from edge_agent.placement.priors import ROOFLINE, priors
from edge_agent.placement.running import RunningWork
from edge_agent.placement.workspace import SETS_KEPT, Workspace
from edge_agent.resources.device import Device
from edge_agent.tasks.contract import TaskContract

__all__ = ["CORRECTION_MAX", "CORRECTION_MIN", "Placer"]

_OUT = L.OUT_FIELDS  # an output row's length in ``Workspace.out_flat``
_MASKS_KEPT = SETS_KEPT  # immutable candidate sets whose device flags are kept
# the kernel's one-call returns besides a status
_EXPLORE_DUE, _PROBE_DUE, _EXPLORED = L.ONE_EXPLORE, L.ONE_PROBE, L.ONE_EXPLORED
_ASSIGNED, _COUNTING = L.OUT_ASSIGNED, L.BK_COUNTING


class Placer(
    BatchPlacing,
    DeadlinePlacing,
    ExplorationPasses,
    OutcomeRecording,
    CorrectionTable,
    DevicePooling,
    LiveState,
):
    """Places tasks on a fleet under a policy and learns from measured outcomes.

    The native kernel skips re-validating device rows between calls unless told they
    changed: ``update_live`` tells it; ``release``, ``feedback`` and ``advance`` only move
    queue, free memory and active power within valid bounds, which needs no new check.

    Committed work is charged to each chosen device's queue and free memory until
    ``feedback`` (or ``release``) reports the task finished; after ``started`` its
    remaining work shrinks with ``clock`` (seconds; a simulator passes its own).

    Under a policy with a deadline objective (``Policy.orders_by_deadline``; override with
    ``deadline_order``) devices run their waiting work earliest-deadline-first (``edf``),
    and ``place_one`` counts ahead of a task with a deadline only the waiting work due
    earlier, or due later without the slack to let it pass (``edf.WaitingWork``; a batch
    ``place`` still counts every queue in full). The estimate is Python-side: the kernel
    (native and twin alike) sees the device queues with that work taken off.
    """

    def __init__(
        self,
        devices: Sequence[Device],
        policy: Policy | None = None,
        *,
        backend: kernel.Backend | None = None,
        keep_reasons: bool = True,
        learning_rate: float = 0.3,
        clock: Callable[[], float] = time.monotonic,
        explore: bool = True,
        deadline_order: bool | None = None,
    ) -> None:
        ids = [d.id for d in devices]
        if len(set(ids)) != len(ids):
            raise InvalidInput("device ids must be unique within a fleet")
        if not 0 < learning_rate <= 1:
            raise InvalidInput("learning_rate must be in (0, 1]")
        self.devices: tuple[Device, ...] = tuple(devices)
        self.device_ids: tuple[str, ...] = tuple(ids)
        self._index = {d: i for i, d in enumerate(ids)}
        self.backend: kernel.Backend = backend or kernel.default_backend()
        if self.backend == "native" and not kernel.native_available():
            raise InvalidInput("the native kernel is not installed; use backend='python'")
        self._lr = learning_rate
        self._classes: dict[str, int] = {"default": 0}  # append-only: indices never change
        # per class: each device's estimate source (None: all roofline), replaced on change
        self._sources: list[tuple[str, ...] | None] = [None]
        self._running = RunningWork(clock)
        self._started = self._running.entries  # the same dict: empty when nothing runs
        self._waiting = WaitingWork()  # placed, not started: their deadlines (EDF only)
        self._first = FirstFlights()  # unmeasured pairs with a task in flight (first_flights)
        self._deadline_order = deadline_order
        # untried pairs, tried now and then (bounded; ``explore=False``: never)
        self.exploration = Explorer(len(ids), enabled=explore)
        self.exploration.add_class()  # "default"
        self._samples: dict[tuple[int, int], int] = {}  # measurements per (class, device)
        self._imported: set[tuple[int, int]] = set()  # pairs given a factor (import_corrections)
        self._init_pooling()  # cold pairs start from their device's learned factor
        self._restricted_to: Collection[str] | None = None  # the candidates in ws.allowed
        #: kept candidate sets (tuples, frozensets): id -> (the set, its row of ``ws.sets``)
        self._slots: dict[int, tuple[Collection[str], int]] = {}
        self._token = object()  # identifies rows prepared by this Placer
        rows = np.array([device_row(d) for d in devices], dtype=np.float64)
        self._ws = Workspace(
            rows.reshape(len(ids), L.DEV_FIELDS), np.ones((4, len(ids))), 64, keep_reasons
        )
        self._bind()
        self.policy = policy or Policy.template("balanced")

    # --- configuration ---------------------------------------------------------------
    @property
    def policy(self) -> Policy:
        """Return the policy in force."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._policy = policy
        self._ctx = DecisionContext(
            self.device_ids, f"{policy.name}@{policy.version}", self.backend
        )
        self._ws.weights[: L.N_OBJECTIVES] = policy.weight_vector()
        self._ws.weights[L.W_QUEUE_GUARD] = policy.queue_guard()
        self._ws.weights[L.W_CONGESTION] = policy.congestion_charge()
        order = self._deadline_order
        self._edf = policy.orders_by_deadline if order is None else order

    def prepare(self, contract: TaskContract) -> PreparedTask:
        """Encode a contract once, bound to this Placer, so later placements skip the parsing."""
        plain = prepare(contract)
        row = array("d", plain.row)
        cls = self._class_of(plain)
        row[L.TASK_CLASS] = cls
        return PreparedTask(contract, plain.row, (self._token, row.tobytes(), cls))

    def _class_of(self, prepared: PreparedTask) -> int:
        """Return the task's class row; a new class named after a model starts from priors."""
        name = prepared.contract.task_class
        idx = self._classes.get(name)
        if idx is not None:
            return idx
        idx = self.class_index(name)
        found = priors(self.devices, self._ws.devices.tolist(), prepared.contract, prepared.row)
        if any(found):
            row = self._ws.corrections[idx]
            for d, prior in enumerate(found):
                if prior is not None:
                    row[d] = learning.clamp(prior[0])
            self._sources[idx] = tuple(p[1] if p else ROOFLINE for p in found)
            self.exploration.set_sources(idx, self._sources[idx] or ())
        if prepared.contract.model:
            self._pool_class(idx)
        return idx

    def class_index(self, task_class: str) -> int:
        """Return the correction row for ``task_class``, adding one when new."""
        idx = self._classes.get(task_class)
        if idx is None:
            idx = len(self._classes)
            self._classes[task_class] = idx
            self._sources.append(None)
            self.exploration.add_class()
            if self.exploration.book is not self._book:  # the book grew: bind the new one
                self._bind()
            if idx >= self._ws.n_classes:
                grown = np.ones((self._ws.n_classes * 2, len(self.device_ids)))
                grown[: self._ws.n_classes] = self._ws.corrections
                self._rebuild(corrections=grown)
        return idx

    def _rebuild(self, *, corrections: np.ndarray | None = None, capacity: int = 0) -> None:
        old = self._ws
        ws = Workspace(
            old.devices,
            old.corrections if corrections is None else corrections,
            max(capacity, old.capacity),
            old.keep_reasons,
        )
        ws.weights[:] = old.weights
        self._ws = ws
        self._bind()
        self._restricted_to = None
        self._slots.clear()  # the new workspace's set rows are empty

    def _bind(self) -> None:
        """Bind the kernel and the hot path's views to the workspace (again after a rebuild)."""
        ws = self._ws
        self._call = kernel.bind(ws, self.backend)
        self._book = self.exploration.book
        self._book_cells = self._book.data  # the book as Python ints (``Explorer.paused``)
        explorer = self.exploration
        self._call.bind_book(self._book, CONGESTED, explorer.divisor_rows, explorer.busy)
        self._call.bind_bounds(explorer.bound_rows)  # the charge's pessimistic bounds
        # place_one's ordinary call, one kernel call: ``self._one(self._one_arg, set, task)``
        self._one, self._one_arg = self._call.one_entry
        self._task0 = self._call.task0  # place_one's calls, bound once
        self._task0_restricted = self._call.task0_restricted
        self._task0_bytes = ws.task0.data.cast("B")  # a prepared row's bytes copy in cheaply
        # the candidate rows as one flat byte view: a kept row copies into row 0 cheaply
        self._sets_flat = ws.sets.data.cast("B")
        self._row_len = ws.sets.shape[1]
        self._out_flat = ws.out_flat  # task 0's output row: out_flat[:_OUT]
        # task 0's reason row as a memoryview: ``tobytes`` without numpy's method call
        self._reasons_row = ws.reasons0.data if ws.keep_reasons else None
        self._reasons_row1 = ws.reasons[1].data if ws.keep_reasons else None  # a probe's
        # the device rows and corrections as flat rows of Python floats, read and written
        # in place by the run path (started / feedback / release): no numpy scalar per cell
        # (cast from a 1-D view: a 2-D view with no rows cannot be cast; an empty fleet)
        self._device_cells = ws.devices.reshape(-1).data.cast("B").cast("d")
        self._correction_cells = ws.corrections.reshape(-1).data.cast("B").cast("d")

    # --- placing ---------------------------------------------------------------------
    def place_one(
        self, task: TaskContract | PreparedTask, *, candidates: Collection[str] | None = None
    ) -> Decision:
        """Place one task now and commit it to its device(s).

        ``candidates``: device ids this call may choose from (the others are rejected as
        "not among the call's candidates"); their health and live state are untouched.
        """
        if self._edf:
            return self._place_edf(task, candidates)
        if not isinstance(task, PreparedTask) or (bound := task.bound) is None:
            return self._place(task, candidates)
        if bound[0] is not self._token:  # prepared by another Placer
            return self._place(task, candidates)
        # the hot path (a task prepared by this Placer): one kernel call decides, or says an
        # exploration pass is due; it copies the task's row in itself (the bytes, no copy)
        if self._started:  # a dict: tested without a call
            self._running.credit(self._ws.devices, self._overrun)
        if candidates is None:
            slot = -1
        else:
            kept = self._slots.get(id(candidates))
            slot = kept[1] if kept is not None and kept[0] is candidates else self._slot(candidates)
        status = self._one(self._one_arg, slot, bound[1])
        cls = bound[2]
        if status:
            if status >= _EXPLORED:  # the kernel ran an exploration decision: its outcome
                return self._explored(task.contract, cls, status - _EXPLORED)
            return self._due(status, task.contract, cls, candidates)
        reasons = None if self._reasons_row is None else self._reasons_row.tobytes()
        row = self._out_flat[:_OUT]  # a copy: the slot is reused
        decision = decided(task.contract, row, self._ctx, reasons, cls, self._sources[cls])
        untried = self.exploration.untried[cls]
        if untried is not None:  # a first task on an untried pair measures it, as a probe
            device = int(row[_ASSIGNED])  # (not in a preview: ``Explorer.paused``)
            if device >= 0 and untried[device] > 1.0 and self._book_cells[_COUNTING]:
                self.exploration.hold(decision, device)
        return decision

    def _place(
        self,
        task: TaskContract | PreparedTask,
        candidates: Collection[str] | None,
        *,
        explore: bool = True,
    ) -> Decision:
        """Place one task with every queue counted as it stands (``place_one`` for a task this
        Placer did not prepare; ``_place_edf``'s call).

        ``explore=False``: a second look at the same task, neither probed nor counted.
        """
        if self._started:  # a dict: tested without a call
            self._running.credit(self._ws.devices, self._overrun)
        prepared = task if isinstance(task, PreparedTask) else prepare(task)
        bound = prepared.bound
        if bound is not None and bound[0] is self._token:  # class index already in the row
            row, cls = bound[1], bound[2]
        else:
            cls = self._class_of(prepared)  # may grow the workspace
            packed = array("d", prepared.row)
            packed[L.TASK_CLASS] = cls
            row = packed.tobytes()
        if not explore:
            self._task0_bytes[:] = row
            return self._look_again(prepared.contract, cls, candidates)
        slot = -1 if candidates is None else self._slot(candidates)
        status = self._one(self._one_arg, slot, row)
        if status:
            return self._due(status, prepared.contract, cls, candidates)
        return self._decided(prepared.contract, cls, False)

    def _due(
        self, status: int, contract: TaskContract, cls: int, candidates: Collection[str] | None
    ) -> Decision:
        """The kernel's one call decided nothing: an exploration pass or the probe of
        clamped factors is due (``layout.ONE_*``), or the status is an error."""
        if status >= _EXPLORED:  # the kernel ran the exploration decision: its outcome
            return self._explored(contract, cls, status - _EXPLORED)
        if status == _EXPLORE_DUE:
            return self._explore(contract, cls, candidates)
        if status != _PROBE_DUE:
            kernel.check(status, self._call.bad_index(False))
        status, bad, probed = self._probe(candidates)
        if status:
            kernel.check(status, bad)
        return self._decided(contract, cls, probed)

    def _look_again(
        self, contract: TaskContract, cls: int, candidates: Collection[str] | None
    ) -> Decision:
        """Decide task row 0 with nothing counted or ticked (a second look, ``_place``)."""
        if candidates is None:
            status = self._task0()
            if status:
                kernel.check(status, self._call.bad_index(False))
        else:
            self._restrict(candidates)
            status = self._task0_restricted()
            if status:
                kernel.check(status, self._call.bad_index(True))
        return self._decided(contract, cls, False)

    def _decided(self, contract: TaskContract, cls: int, probe: bool) -> Decision:
        """Return task row 0's decision (a probe's, or a usual one, which the Explorer sees)."""
        reasons = None if self._reasons_row is None else self._reasons_row.tobytes()
        row = self._out_flat[:_OUT]  # a copy: the slot is reused
        if probe:
            return Decision(contract, row, self._ctx, reasons, cls, self._sources[cls], probe=True)
        decision = Decision(contract, row, self._ctx, reasons, cls, self._sources[cls])
        if not self.exploration.paused:  # a preview leaves exploration as it was
            self.exploration.decided(cls, decision, row)
        return decision

    def _decide(self, n_task: int, candidates: Collection[str] | None) -> None:
        """Run the kernel on the first ``n_task`` task rows (their rows in ``ws.out``)."""
        if candidates is None:
            status, bad = self._call(n_task)
        else:
            self._restrict(candidates)
            status, bad = self._call.restricted(n_task)
        if status:
            kernel.check(status, bad)

    def _restrict(self, candidates: Collection[str]) -> None:
        """Flag ``candidates`` in the workspace's ``allowed`` row (InvalidInput if unknown)."""
        if candidates is self._restricted_to:  # the same set as the last call: in place
            return
        slot = self._slot(candidates)
        if slot:  # kept: its row copied into row 0
            n = self._row_len
            self._sets_flat[:n] = self._sets_flat[slot * n : (slot + 1) * n]
            self._restricted_to = candidates

    def _slot(self, candidates: Collection[str]) -> int:
        """Return the row of ``ws.sets`` flagging ``candidates`` (InvalidInput if unknown).

        A tuple or frozenset is immutable: its row is kept (up to ``_MASKS_KEPT`` of them)
        and found by the set's identity, so a caller reusing its candidate sets pays no
        mask at all; any other collection is flagged anew in row 0 (``allowed``).
        """
        kept = self._slots.get(id(candidates))
        if kept is not None and kept[0] is candidates:
            return kept[1]
        index = self._index
        try:
            found = [index[device_id] for device_id in candidates]
        except (KeyError, TypeError):
            bad = [c for c in candidates if not isinstance(c, str) or c not in index]
            raise InvalidInput(f"candidates: unknown device(s) {bad!r}") from None
        if not isinstance(candidates, (tuple, frozenset)):
            slot = 0
            self._restricted_to = None  # row 0 now holds a set not kept
        elif len(self._slots) < _MASKS_KEPT:
            slot = len(self._slots) + 1
        else:  # full: forget every kept set, start again
            self._slots.clear()
            slot = 1
        flags = self._ws.sets[slot]
        flags.fill(0)
        flags[found] = 1
        if slot:
            self._slots[id(candidates)] = (candidates, slot)
        return slot

    def preview(
        self, task: TaskContract | PreparedTask, *, candidates: Collection[str] | None = None
    ) -> Decision:
        """Return what ``place_one`` would decide now, committing nothing."""
        if self._started:  # run time credited now stays credited (not undone with the rest)
            self._running.credit(self._ws.devices, self._overrun)
        saved = self._ws.devices.copy()
        self.exploration.paused = True  # a preview neither probes nor counts
        try:
            return self.place_one(task, candidates=candidates)
        finally:
            self._ws.devices[:] = saved
            self.exploration.paused = False

    def feasibility(self, task: TaskContract | PreparedTask) -> dict[str, str]:
        """Return, for every device, "ok" or the hard constraint that rejects ``task``."""
        decision = self.preview(task)
        if decision.reasons is None:
            raise InvalidInput("feasibility needs a Placer built with keep_reasons=True")
        return {
            device_id: L.REASON_NAMES[code]
            for device_id, code in zip(self.device_ids, decision.reasons, strict=True)
        }
