"""A Placer's live device state: overwrite it, drain it, read it (the ``LiveState`` mixin).

Queued seconds are read and written as of now: the stored column holds running work as of
the last placement (``running``: each placement credits the elapsed run time first), so
``live`` reads it through ``RunningWork.queued_now`` (the same accounting, nothing written)
and a write of ``queued_s`` credits the running work first, so the value written is taken as
of now (``update_live(d, queued_s=live(d)["queued_s"])`` changes nothing). The placement
path itself is unchanged.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from edge_agent.errors import InvalidInput
from edge_agent.placement import layout as L
from edge_agent.placement.decision import Decision
from edge_agent.placement.kernel import KernelCall
from edge_agent.placement.running import RunningWork
from edge_agent.placement.workspace import Workspace
from edge_agent.resources.vocab import Health

#: The columns ``update_live_many`` sets: keyword -> (device column, largest valid value).
BATCH_COLUMNS: dict[str, tuple[int, float]] = {
    L.LIVE_NAMES[col]: (col, top) for col, top in L.LIVE_TOP.items()
}
_FLOAT_MAX = sys.float_info.max
_PLAIN = (float, int, bool)  # numbers _listed_ok compares itself


def _listed_ok(given: object, n: int, bound: float, integral: bool) -> bool:
    """Return True when ``given`` is a list or tuple of ``n`` plain numbers (float, int or
    bool), each in [0, ``bound``] (a whole number when ``integral``); False when it is not,
    or not all are (numpy decides).

    The values numpy's check accepts, for a fraction of its cost on a fleet's few dozen
    (ufuncs over a small array cost about five times this loop): a subset of the devices'
    lists, which the kernel's whole-fleet write does not take. nan and inf fail the range as
    they do there; anything else (a numpy array inside the list, whose comparison is an
    array) goes to numpy, which refuses what it cannot write.
    """
    if type(given) not in (list, tuple) or len(given) != n:  # type: ignore[arg-type]
        return False
    for value in given:  # type: ignore[attr-defined]
        if type(value) not in _PLAIN or not 0.0 <= value <= bound:
            return False
        if integral and value != math.floor(value):
            return False
    return True


class LiveState:
    """The live-state methods of ``Placer``, over its workspace's device rows."""

    _ws: Workspace
    _call: KernelCall
    _index: dict[str, int]
    _running: RunningWork
    _started: dict[Decision, tuple[float, list[float]]]
    device_ids: tuple[str, ...]
    _live_rows: tuple[Sequence[str], npt.NDArray[np.intp]] | None = None

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
        if queued_s is not None and self._started:  # the value written is as of now
            self._running.credit(self._ws.devices)
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

    def update_live_many(
        self, device_ids: Sequence[str] | None = None, **columns: ArrayLike
    ) -> None:
        """Overwrite live columns of many devices in one vectorised write.

        ``device_ids``: the devices, in the order of the values (None: every device, in
        ``device_ids`` order). Each keyword of ``BATCH_COLUMNS`` (``queued_s=[...]``,
        ``health=[...]``, ...) takes one value per device, or one value for all. The
        same bounds as ``update_live``; any bad value raises and changes nothing. For one
        device, or FPGA slots and configurations, use ``update_live``.

        Every device's lists or tuples, the common case (a simulator's agent before each
        decision), go to the kernel's ``set_live`` in one call: checked and written there;
        anything else (arrays, one value for all, a subset of devices, a bad value) goes
        through numpy, which words the error.
        """
        as_of_now = bool(self._started) and "queued_s" in columns  # credited once checked
        if (device_ids is None or device_ids is self.device_ids) and not as_of_now:
            n = len(self.device_ids)
            cols: list[int] = []
            values: list[float] = []
            for name, given in columns.items():
                found = BATCH_COLUMNS.get(name)
                if found is None or type(given) not in (list, tuple) or len(given) != n:  # type: ignore[comparison-overlap, arg-type]
                    break
                cols.append(found[0])
                values += given  # type: ignore[arg-type]
            else:
                try:
                    written = self._call.set_live(cols, len(cols), values) == -1
                except (TypeError, OverflowError):  # not a number, or past the largest float
                    written = False
                if written:
                    self._changed(cols)
                    return
        self._update_checked(device_ids, columns)

    def _update_checked(
        self, device_ids: Sequence[str] | None, columns: dict[str, ArrayLike]
    ) -> None:
        """``update_live_many`` checked by numpy (or a plain list by ``_listed_ok``)."""
        rows = self._live_index(device_ids)
        n = len(self.device_ids) if device_ids is None else len(device_ids)
        checked: list[tuple[int, ArrayLike]] = []
        for name, given in columns.items():
            if name not in BATCH_COLUMNS:
                known = ", ".join(BATCH_COLUMNS)
                raise InvalidInput(f"update_live_many: unknown column {name!r} (one of {known})")
            col, top = BATCH_COLUMNS[name]
            bound = top if top < math.inf else _FLOAT_MAX  # nan and inf fail both tests
            if _listed_ok(given, n, bound, col == L.DEV_HEALTH):  # a plain list, all valid
                checked.append((col, given))
                continue
            try:
                values = np.asarray(given, dtype=np.float64)
            except (TypeError, ValueError):
                raise InvalidInput(f"update_live_many: {name} must be numbers") from None
            except OverflowError:  # an integer past the largest float (was uncaught)
                raise InvalidInput(
                    f"update_live_many: {name} must be finite numbers in [0, {top}]"
                ) from None
            if values.ndim > 1 or (values.ndim == 1 and len(values) != n):
                raise InvalidInput(f"update_live_many: {name} needs one value or {n} values")
            ok = bool(((values >= 0.0) & (values <= bound)).all())
            if ok and col == L.DEV_HEALTH:  # a Health value: 0, 1 or 2
                ok = bool((values == np.floor(values)).all())
            if not ok:
                raise InvalidInput(f"update_live_many: {name} must be finite numbers in [0, {top}]")
            checked.append((col, values))
        devices = self._ws.devices
        if self._started and "queued_s" in columns:  # the values written are as of now
            self._running.credit(devices)
        for col, column in checked:
            devices[rows, col] = column
        self._changed(col for col, _ in checked)

    def _changed(self, cols: Iterable[int]) -> None:
        """Columns were written, checked with the kernel's bounds: its rows stay valid, and
        only a column its kept per-device constants are computed from needs them redone."""
        if not L.CONSTANTS_FROM.isdisjoint(cols):
            self._call.devices_changed()

    def _live_index(self, device_ids: Sequence[str] | None) -> slice | npt.NDArray[np.intp]:
        """Return the device rows of ``device_ids`` (the last list's rows are kept)."""
        if device_ids is None or device_ids is self.device_ids:
            return slice(None)
        kept = self._live_rows
        if kept is not None and kept[0] is device_ids and isinstance(device_ids, tuple):
            return kept[1]
        rows = np.array([self._device(d) for d in device_ids], dtype=np.intp)
        if len(set(rows.tolist())) != len(rows):
            raise InvalidInput("update_live_many: a device is listed twice")
        self._live_rows = (device_ids, rows)
        return rows

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
        """Return a device's live columns as the kernel sees them, its queued seconds as of
        now (running work credited to the clock's present, as the next placement will)."""
        row = self._device(device_id)
        return _live_doc(self._ws.devices[row], float(self._queued_now()[row]))

    def lives(self) -> dict[str, dict[str, float]]:
        """Return ``live`` of every device, in order, for one pass over the running work
        (a status page or a summary of all devices: ``live`` per device would pass over it
        once a device)."""
        devices, queued = self._ws.devices, self._queued_now()
        return {d: _live_doc(devices[i], float(queued[i])) for i, d in enumerate(self.device_ids)}

    def _queued_now(self) -> npt.NDArray[np.float64]:
        """Every device's queued seconds as of now (the stored column when nothing runs)."""
        if self._started:
            return self._running.queued_now(self._ws.devices)
        return self._ws.devices[:, L.DEV_QUEUE_S]


def _live_doc(dev: npt.NDArray[np.float64], queued_s: float) -> dict[str, float]:
    """A device row's live columns, its queued seconds as given (``LiveState.live``)."""
    return {
        "utilization": float(dev[L.DEV_UTIL]),
        "predicted_utilization": float(dev[L.DEV_PRED_UTIL]),
        "queued_s": queued_s,
        "memory_free_bytes": float(dev[L.DEV_MEM_FREE]),
        "health": float(dev[L.DEV_HEALTH]),
        "loaded_config": float(dev[L.DEV_CONFIG]),
        "slots": max(1.0, float(dev[L.DEV_SLOTS])),
        "active_power_w": float(dev[L.DEV_MAX_W]),
    }
