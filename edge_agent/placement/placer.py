"""The placement engine: a fleet of devices, a policy, learned corrections, one kernel call."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edge_agent.errors import InvalidInput
from edge_agent.placement import kernel
from edge_agent.placement import layout as L
from edge_agent.placement.codec import PreparedTask, device_row, prepare
from edge_agent.placement.decision import Decision, DecisionContext
from edge_agent.placement.policy import Policy
from edge_agent.placement.workspace import Workspace
from edge_agent.resources.device import Device
from edge_agent.resources.vocab import Health
from edge_agent.tasks.contract import TaskContract

CORRECTION_MIN = 0.02
CORRECTION_MAX = 50.0


class Placer:
    """Places tasks on a fleet under a policy and learns from measured outcomes.

    The native kernel skips re-validating device rows between calls unless told they
    changed: ``update_live`` tells it; ``release``, ``feedback`` and ``advance`` only move
    queue, free memory and active power within valid bounds, which needs no new check.

    Committed work is charged to each chosen device's queue and free memory until
    ``feedback`` (or ``release``) reports the task finished.
    """

    def __init__(
        self,
        devices: Sequence[Device],
        policy: Policy | None = None,
        *,
        backend: kernel.Backend | None = None,
        keep_reasons: bool = True,
        learning_rate: float = 0.3,
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
        self._token = object()  # identifies rows prepared by this Placer
        rows = np.array([device_row(d) for d in devices], dtype=np.float64)
        self._ws = Workspace(
            rows.reshape(len(ids), L.DEV_FIELDS), np.ones((4, len(ids))), 64, keep_reasons
        )
        self._call = kernel.bind(self._ws, self.backend)
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
        self._ws.weights[:] = policy.weight_vector()

    def prepare(self, contract: TaskContract) -> PreparedTask:
        """Encode a contract once, bound to this Placer, so later placements skip the parsing."""
        plain = prepare(contract)
        row = np.array(plain.row, dtype=np.float64)
        cls = self.class_index(contract.task_class)
        row[L.TASK_CLASS] = cls
        return PreparedTask(contract, plain.row, (self._token, row, cls))

    def class_index(self, task_class: str) -> int:
        """Return the correction row for ``task_class``, adding one when new."""
        idx = self._classes.get(task_class)
        if idx is None:
            idx = len(self._classes)
            self._classes[task_class] = idx
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
        self._call = kernel.bind(ws, self.backend)

    # --- placing ---------------------------------------------------------------------
    def place_one(self, task: TaskContract | PreparedTask) -> Decision:
        """Place one task now and commit it to its device(s)."""
        prepared = task if isinstance(task, PreparedTask) else prepare(task)
        bound = prepared.bound
        if bound is not None and bound[0] is self._token:  # class index already in the row
            ws = self._ws
            ws.task0[:] = bound[1]
            cls = bound[2]
        else:
            cls = self.class_index(prepared.contract.task_class)  # may grow the workspace
            ws = self._ws
            ws.tasks[0] = prepared.row
            ws.tasks[0, L.TASK_CLASS] = cls
        status, bad = self._call(1)
        if status:
            kernel.check(status, bad)
        reasons = ws.reasons0.tobytes() if ws.keep_reasons else None
        row = memoryview(ws.out0.tobytes()).cast("d")  # a copy: the slot is reused
        return Decision(prepared.contract, row, self._ctx, reasons, cls)

    def place(self, tasks: Sequence[TaskContract | PreparedTask]) -> list[Decision]:
        """Place a batch in priority order (higher first, then earlier deadline).

        Returns decisions aligned with ``tasks``. One batch never overbooks a device.
        """
        prepared = [t if isinstance(t, PreparedTask) else prepare(t) for t in tasks]
        order = sorted(range(len(prepared)), key=lambda i: _urgency(prepared[i].contract))
        if len(prepared) > self._ws.capacity:
            self._rebuild(capacity=len(prepared))
        ws = self._ws
        classes = [self.class_index(p.contract.task_class) for p in prepared]
        ws = self._ws  # class_index may have grown the workspace
        if order:
            ws.tasks[: len(order)] = [prepared[i].row for i in order]
            ws.tasks[: len(order), L.TASK_CLASS] = [classes[i] for i in order]
        kernel.check(*self._call(len(order)))
        rows = ws.out[: len(order)].tolist()
        out: list[Decision | None] = [None] * len(order)
        keep = ws.keep_reasons
        for slot, i in enumerate(order):
            reasons = ws.reasons[slot].tobytes() if keep else None
            out[i] = Decision(prepared[i].contract, rows[slot], self._ctx, reasons, classes[i])
        return [d for d in out if d is not None]

    # --- feedback --------------------------------------------------------------------
    def feedback(
        self, decision: Decision, *, latency_s: float, energy_j: float | None = None
    ) -> None:
        """Record a finished task's measured service time (and energy); release its devices.

        The (task class, device) correction factor moves toward measured / estimated, so
        a device slower than its datasheet stops being chosen.
        """
        if not decision.placed:
            raise InvalidInput("feedback: the decision placed nothing")
        if not (math.isfinite(latency_s) and latency_s > 0):
            raise InvalidInput("feedback: latency_s must be a finite number > 0")
        if energy_j is not None and not (math.isfinite(energy_j) and energy_j >= 0):
            raise InvalidInput("feedback: energy_j must be a finite number >= 0")
        ws = self._ws
        ratio = latency_s / max(decision.service_s, 1e-12)
        for d in decision.device_indices:
            row = ws.corrections[decision.task_class_index]
            row[d] = min(CORRECTION_MAX, max(CORRECTION_MIN, row[d] * ratio**self._lr))
            if energy_j is not None:
                power = energy_j / len(decision.device_indices) / latency_s
                dev = ws.devices[d]
                dev[L.DEV_MAX_W] += self._lr * (power - dev[L.DEV_MAX_W])
        self.release(decision)

    def release(self, decision: Decision) -> None:
        """Return a decision's charged queue time and memory to its devices."""
        mem = decision.task.memory_needed()
        for d, charge in zip(decision.device_indices, decision.charges, strict=True):
            dev = self._ws.devices[d]
            dev[L.DEV_QUEUE_S] = max(0.0, dev[L.DEV_QUEUE_S] - charge)
            dev[L.DEV_MEM_FREE] = min(dev[L.DEV_MEM_TOTAL], dev[L.DEV_MEM_FREE] + mem)

    def export_corrections(self) -> dict[str, dict[str, float]]:
        """Return the learned factors as {task class: {device id: factor}} (JSON-ready)."""
        ws = self._ws
        return {
            cls: dict(zip(self.device_ids, ws.corrections[idx].tolist(), strict=True))
            for cls, idx in self._classes.items()
        }

    def import_corrections(self, table: dict[str, dict[str, float]]) -> int:
        """Adopt learned factors (e.g. saved, or from a peer); return how many were set.

        Devices this fleet does not have are skipped; factors are clamped to the learning
        range. A non-finite or non-positive factor raises and changes nothing.
        """
        updates: list[tuple[str, int, float]] = []
        for cls, row in table.items():
            if not isinstance(cls, str) or not isinstance(row, dict):
                raise InvalidInput("import_corrections: expected {task class: {device: factor}}")
            for device_id, factor in row.items():
                if isinstance(factor, bool) or not isinstance(factor, (int, float)):
                    raise InvalidInput(f"import_corrections: {cls}/{device_id}: not a number")
                if not (math.isfinite(factor) and factor > 0):
                    raise InvalidInput(f"import_corrections: {cls}/{device_id}: must be > 0")
                if device_id in self._index:
                    clamped = min(CORRECTION_MAX, max(CORRECTION_MIN, float(factor)))
                    updates.append((cls, self._index[device_id], clamped))
        for cls, d, factor in updates:
            idx = self.class_index(cls)
            self._ws.corrections[idx, d] = factor
        return len(updates)

    def preview(self, task: TaskContract | PreparedTask) -> Decision:
        """Return what ``place_one`` would decide now, committing nothing."""
        saved = self._ws.devices.copy()
        try:
            return self.place_one(task)
        finally:
            self._ws.devices[:] = saved

    def feasibility(self, task: TaskContract | PreparedTask) -> dict[str, str]:
        """Return, for every device, "ok" or the hard constraint that rejects ``task``."""
        decision = self.preview(task)
        if decision.reasons is None:
            raise InvalidInput("feasibility needs a Placer built with keep_reasons=True")
        return {
            device_id: L.REASON_NAMES[code]
            for device_id, code in zip(self.device_ids, decision.reasons, strict=True)
        }

    def correction(self, task_class: str, device_id: str) -> float:
        """Return the learned factor (measured / roofline) for a class on a device."""
        idx = self._classes.get(task_class)
        return 1.0 if idx is None else float(self._ws.corrections[idx, self._device(device_id)])

    # --- live state ------------------------------------------------------------------
    def _device(self, device_id: str) -> int:
        try:
            return self._index[device_id]
        except KeyError:
            raise InvalidInput(f"unknown device {device_id!r}") from None

    def update_live(
        self,
        device_id: str,
        *,
        utilization: float | None = None,
        predicted_utilization: float | None = None,
        queued_s: float | None = None,
        memory_free_bytes: float | None = None,
        health: Health | None = None,
        link_latency_s: float | None = None,
        link_bw_gbs: float | None = None,
        carbon_g_per_kwh: float | None = None,
        loaded_config: int | None = None,
        slots: int | None = None,
        loaded_configs: Sequence[int] | None = None,
    ) -> None:
        """Overwrite a device's live state; a bad value raises and changes nothing.

        ``link_latency_s`` / ``link_bw_gbs`` re-home a device relative to the origin of
        the next placements (0 latency = local), e.g. when one Placer serves many boxes;
        ``carbon_g_per_kwh`` follows the site's grid intensity; ``loaded_config`` records an
        FPGA configuration loaded outside this Placer's own commits (slot 0);
        ``slots`` sets an FPGA's partial-reconfiguration slots (1..4; each holds a
        configuration and 1/slots of the fabric) and ``loaded_configs`` what each holds.
        """
        dev_index = self._device(device_id)
        if slots is not None and (
            isinstance(slots, bool) or slots not in range(1, L.MAX_SLOTS + 1)
        ):
            raise InvalidInput(f"update_live: slots must be an integer 1..{L.MAX_SLOTS}")
        if loaded_configs is not None:
            n = slots or max(1, int(self._ws.devices[dev_index, L.DEV_SLOTS]))
            if len(loaded_configs) > n or not all(
                isinstance(c, int) and 0 <= c <= 2**31 - 1 for c in loaded_configs
            ):
                raise InvalidInput(
                    f"update_live: loaded_configs must be at most {n} configuration ids >= 0"
                )
        dev = self._ws.devices[self._device(device_id)]
        updates = (
            (L.DEV_UTIL, utilization, 1.0),
            (L.DEV_PRED_UTIL, predicted_utilization, 1.0),
            (L.DEV_QUEUE_S, queued_s, math.inf),
            (L.DEV_MEM_FREE, memory_free_bytes, math.inf),
            (L.DEV_HEALTH, None if health is None else float(health), 2.0),
            (L.DEV_LINK_S, link_latency_s, math.inf),
            (L.DEV_LINK_BW, link_bw_gbs, math.inf),
            (L.DEV_CARBON, carbon_g_per_kwh, math.inf),
            (L.DEV_CONFIG, None if loaded_config is None else float(loaded_config), 2**31 - 1),
        )
        for col, value, top in updates:
            bad_health = col == L.DEV_HEALTH and value not in (None, 0.0, 1.0, 2.0)
            if bad_health or (
                value is not None and not (math.isfinite(value) and 0 <= value <= top)
            ):
                name = L.LIVE_NAMES[col]
                raise InvalidInput(f"update_live: {name} must be a finite number in [0, {top}]")
        for col, value, _ in updates:
            if value is not None:
                dev[col] = value
        if slots is not None:
            dev[L.DEV_SLOTS] = float(slots)
            dev[L.DEV_SLOT_NEXT] = 0.0
        if loaded_configs is not None:
            for k, col in enumerate(L.SLOT_COLS):
                dev[col] = float(loaded_configs[k]) if k < len(loaded_configs) else 0.0
        self._call.devices_changed()

    def advance(self, seconds: float) -> None:
        """Drain every device's queue by ``seconds`` (finite, >= 0) of elapsed time.

        For callers that model time without releasing tasks (a simulator clock). Do not mix
        it with ``feedback``/``release`` for the same work: both would drain one charge.
        """
        if not (math.isfinite(seconds) and seconds >= 0):
            raise InvalidInput("advance: seconds must be a finite number >= 0")
        q = self._ws.devices[:, L.DEV_QUEUE_S]
        np.maximum(q - seconds, 0.0, out=q)

    def live(self, device_id: str) -> dict[str, float]:
        """Return a device's live columns as the kernel sees them."""
        dev = self._ws.devices[self._device(device_id)]
        return {
            "utilization": float(dev[L.DEV_UTIL]),
            "predicted_utilization": float(dev[L.DEV_PRED_UTIL]),
            "queued_s": float(dev[L.DEV_QUEUE_S]),
            "memory_free_bytes": float(dev[L.DEV_MEM_FREE]),
            "health": float(dev[L.DEV_HEALTH]),
            "loaded_config": float(dev[L.DEV_CONFIG]),
            "slots": max(1.0, float(dev[L.DEV_SLOTS])),
            "active_power_w": float(dev[L.DEV_MAX_W]),
        }


def _urgency(contract: TaskContract) -> tuple[int, float]:
    deadline = contract.requirements.deadline_s
    return (-contract.priority, deadline if deadline > 0 else math.inf)
