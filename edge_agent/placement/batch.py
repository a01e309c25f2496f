"""A Placer's batch placement: priority order, hopeless tasks last (the ``BatchPlacing`` mixin)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

import numpy as np
import numpy.typing as npt

from edge_agent.placement import layout as L
from edge_agent.placement.codec import PreparedTask, prepare
from edge_agent.placement.decision import Decision, DecisionContext, decided
from edge_agent.placement.running import RunningWork
from edge_agent.placement.workspace import Workspace
from edge_agent.tasks.contract import TaskContract


class BatchPlacing:
    """``Placer.place``: a batch in one kernel call, with hopeless tasks decided last."""

    _ws: Workspace
    _started: dict[Decision, tuple[float, list[float]]]
    _running: RunningWork
    _ctx: DecisionContext
    _sources: list[tuple[str, ...] | None]
    _overrun: Callable[[Decision, float], None]  # DevicePooling's

    def _class_of(self, prepared: PreparedTask) -> int:
        raise NotImplementedError  # Placer's

    def _rebuild(self, *, corrections: np.ndarray | None = None, capacity: int = 0) -> None:
        raise NotImplementedError  # Placer's

    def _decide(self, n_task: int, candidates: Collection[str] | None) -> None:
        raise NotImplementedError  # Placer's

    def place(
        self,
        tasks: Sequence[TaskContract | PreparedTask],
        *,
        candidates: Collection[str] | None = None,
    ) -> list[Decision]:
        """Place a batch in priority order (higher first, then earlier deadline).

        Returns decisions aligned with ``tasks``. One batch never overbooks a device.
        ``candidates`` restricts every task of the batch as in ``place_one``. A hopeless
        task (no device meets its deadline even before the batch's other tasks) does not
        block feasible ones: it is decided after them (see ``_hopeless_last``).
        """
        if self._started:
            self._running.credit(self._ws.devices, self._overrun)
        prepared = prepare_all(tasks)
        # per distinct prepared task, not per task: a batch is mostly a few kinds, repeated
        kinds: dict[int, tuple[tuple[int, float], int]] = {}
        for p in prepared:
            if id(p) not in kinds:
                kinds[id(p)] = (urgency(p.contract), self._class_of(p))
        if len(kinds) == 1:  # one kind (coalesced copies): the order is the batch's own
            order = list(range(len(prepared)))
            classes = [next(iter(kinds.values()))[1]] * len(prepared)
        else:
            order = sorted(range(len(prepared)), key=lambda i: kinds[id(prepared[i])][0])
            classes = [kinds[id(p)][1] for p in prepared]
        if len(prepared) > self._ws.capacity:
            self._rebuild(capacity=len(prepared))
        ws = self._ws  # a new class may have grown the workspace
        before = ws.devices.copy()
        self._decide_batch(order, prepared, classes, candidates)
        rows = ws.out[: len(order)].tolist()
        # from the rows as lists: a few numpy calls cost more than this for the small
        # batches of coalesced single submissions, and as little for a batch of 1,000
        flags, late_bit = L.OUT_FLAGS, L.OF_LATE
        late = [slot for slot, row in enumerate(rows) if int(row[flags]) & late_bit]
        if late:
            order = self._hopeless_last(order, late, before, prepared, classes, candidates)
            rows = ws.out[: len(order)].tolist()
        out: list[Decision] = [None] * len(order)  # type: ignore[list-item]  # all set below
        ctx, sources, width = self._ctx, self._sources, ws.reasons.shape[1]
        # every task's reason codes in one copy, then a slice each
        reasons = ws.reasons[: len(order)].tobytes() if ws.keep_reasons else None
        for slot, i in enumerate(order):
            cls = classes[i]
            kept = None if reasons is None else reasons[slot * width : (slot + 1) * width]
            out[i] = decided(prepared[i].contract, rows[slot], ctx, kept, cls, sources[cls])
        return out

    def _decide_batch(
        self,
        order: Sequence[int],
        prepared: Sequence[PreparedTask],
        classes: Sequence[int],
        candidates: Collection[str] | None,
    ) -> None:
        ws = self._ws
        if order:
            rows = [prepared[i].row for i in order]
            distinct = {id(row): row for row in rows}
            if len(distinct) * 4 <= len(rows):  # mostly copies: convert each row once
                at = {key: k for k, key in enumerate(distinct)}
                ws.tasks[: len(order)] = np.array(list(distinct.values()))[
                    [at[id(row)] for row in rows]
                ]
            else:
                ws.tasks[: len(order)] = rows
            ws.tasks[: len(order), L.TASK_CLASS] = [classes[i] for i in order]
        self._decide(len(order), candidates)

    def _hopeless_last(
        self,
        order: list[int],
        late: list[int],
        before: npt.NDArray[np.float64],
        prepared: Sequence[PreparedTask],
        classes: Sequence[int],
        candidates: Collection[str] | None,
    ) -> list[int]:
        """Decide the batch again with its hopeless tasks last; return the new order.

        ``late``: the slots (positions in ``order``) the first call placed late. A task late
        in the batch is hopeless when it is late alone on the fleet as it was
        before the batch (one kernel call each); the others were late only behind it.
        """
        ws = self._ws
        hopeless = set()
        for slot in late:
            ws.devices[:] = before
            self._decide_batch([order[slot]], prepared, classes, candidates)
            if int(ws.out[0, L.OUT_FLAGS]) & L.OF_LATE:
                hopeless.add(order[slot])
        ws.devices[:] = before
        order = [i for i in order if i not in hopeless] + [i for i in order if i in hopeless]
        self._decide_batch(order, prepared, classes, candidates)
        return order


def prepare_all(tasks: Sequence[TaskContract | PreparedTask]) -> list[PreparedTask]:
    """Return each task prepared, encoding a contract object that repeats in ``tasks`` once.

    A fleet submits the same few task kinds over and over and the intake hands out one
    ``TaskContract`` per kind (``Intake.task``'s cache), so a batch of 1,000 is mostly one
    object: contracts are frozen, so the same object always encodes to the same row.
    """
    done: dict[int, PreparedTask] = {}
    out: list[PreparedTask] = []
    for t in tasks:
        if isinstance(t, PreparedTask):
            out.append(t)
            continue
        found = done.get(id(t))
        if found is None:
            found = done[id(t)] = prepare(t)
        out.append(found)
    return out


def urgency(contract: TaskContract) -> tuple[int, float]:
    """Return a batch's sort key: higher priority first, then the earlier deadline."""
    deadline = contract.requirements.deadline_s
    return (-contract.priority, deadline if deadline > 0 else math.inf)
