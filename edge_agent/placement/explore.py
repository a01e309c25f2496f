"""Bounded optimism for (task class, device) pairs that were never measured.

A class's estimate on a device starts from the roofline (datasheet peak x efficiency) or a
profile's published figure (``priors``). The roofline can be far off for a model: a CPU
whose vector units suit a small detector can run it 15x faster than its roofline says, and
a device that is never chosen is never measured, so learning never sees it. Exploration
tries such pairs now and then, bounded:

- a pair is *untried* until a measurement of it (``feedback``), an imported factor, or one
  exploration probe of it; a pair whose prior is a published figure at the task's
  precision is trusted and never explored;
- at most one decision in ``EXPLORE_EVERY`` of a class with untried pairs is decided
  twice: as usual, and with each untried pair's estimate divided by its optimism (``WITHIN``
  by source: the roofline ``ROOFLINE_WITHIN``, the roofline times the device's factor on
  other models ``POOLED_WITHIN``, a published figure at another precision
  ``OTHER_PRECISION_WITHIN``, the class's factor measured on an identical device
  ``TWIN_WITHIN``). When the optimistic pass picks an untried device, the task
  goes there (``Decision.probe``): it is the best untried feasible device whose estimate is
  within that factor of the usual choice, under the same policy and constraints.
  Otherwise the usual decision stands and nothing is probed, and that class's interval
  doubles (up to ``EXPLORE_MAX_EVERY``): pairs that stay out of reach (infeasible, or
  far slower than the choice) cost ever fewer extra kernel calls;
- a probe never spends a deadline: the task carries it only when the probed device's
  honest estimate (the prior, not the optimistic one) still meets the task's deadline, or
  when the task has none, or when no device can meet it anyway (a hopeless task: its
  deadline is lost wherever it goes). A due probe that the task cannot carry is
  *deferred*, not abandoned: the class is due again after its interval, which does not
  grow (a fleet whose work all has tight deadlines still explores once a hopeless or a
  slack task comes: under overload, hopeless tasks are what finds the missing capacity);
- a device runs one probe at a time, whatever its class: while one is in flight (or a
  usual decision's first task on an untried pair of it) the device is not optimistic for
  any class (a class whose every untried device is being
  probed defers, without back-off), so a device far slower than its roofline costs one
  slow probe, not one per class, and the next class starts from what it measured
  (``pooling``);
- so each untried pair is probed at most once, at most one decision in ``EXPLORE_EVERY``
  per class is a probe (one in ``HOPELESS_EVERY`` while its tasks are hopeless, and then
  the probe costs no deadline), and a probe's service is at most the optimism factor times the
  usual choice's estimate when the prior was right. ``ExplorationStats`` counts probes and
  their measured cost (probe's measured service - the usual choice's estimate).
- while a class's last decision was *pressed* — hopeless, or congested (its estimated
  finish over ``CONGESTED`` times its service: it waits mostly in a queue) — its probe is
  due every ``HOPELESS_EVERY`` decisions (at most) instead: the fleet is short of
  capacity, which is when an untried pair may supply it, and a probe costs little next
  to the wait (a hopeless task carries one at no deadline's cost);
- ``enabled`` (``Placer(explore=False)``) turns it off: every decision is the usual one.

The same factor bounds an unmeasured estimate the other way: a roofline may as well be
``ROOFLINE_WITHIN`` times optimistic. ``bound_rows`` keeps, per class and device, that
pessimistic bound over the estimate (the source's optimism factor; 1 once the pair is
measured or given a factor, not merely probed: a probe in flight is not a measurement),
and the kernel's congestion charge counts a busy device's service at it
(``hm_call.bound_rows``): while the fleet is congested, a device whose estimate nobody has
measured takes a second task only when it is worth that risk. Idle devices pay no charge,
bound or not; on a fleet where nothing is measured yet every busy device pays its bound, so
the first tasks spread over idle devices and more pairs are measured sooner. See
docs/simulator.md ("The congestion charge at an unmeasured pair's
pessimistic bound") for what it was measured to do.

Deterministic: counters, no random draws, so the same inputs give the same decisions on
both kernel backends (it runs above the kernel).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from edge_agent.placement import layout as L
from edge_agent.placement.learning import PROBE_EVERY
from edge_agent.placement.reference_one import pressed

EXPLORE_EVERY = 16  # at most one decision in this many, per class, is an exploration probe
HOPELESS_EVERY = 4  # the interval while a class's last decision was pressed, at most
CONGESTED = 4.0  # pressed: estimated finish > this many times the service (queue-bound)
EXPLORE_MAX_EVERY = 1024  # the interval after fruitless optimistic passes, at most
ROOFLINE_WITHIN = 8.0  # a roofline estimate may be this many times too pessimistic
OTHER_PRECISION_WITHIN = 2.0  # a published figure at another precision: trusted more
#: the roofline times the device's factor learned on other models (``pooling``): one model's
#: time predicted from another's on the same device is off by a spread of about 0.7 in log
#: (GOPs scaling, leave-one-out over the profiles' published pairs): this covers ~2 of it
POOLED_WITHIN = 4.0
POOLED = "roofline x factor learned on other models"
#: the roofline times the geometric mean of published / roofline over the other models the
#: device's profile publishes (``pooling``): the same spread as ``POOLED``
CALIBRATED = "roofline calibrated on"
#: the same class's factor measured on an identical device (``pooling``: the same profile's
#: same unit), times the two devices' drifts' ratio where both are known: the network's error
#: on that hardware is the twin's, so what is left is this instance's own difference (its
#: clocks, thermals: the fleets' hidden slowdowns are 1.5-2x) and the twin's few samples
TWIN = "measured on an identical device"
TWIN_WITHIN = 1.5
_ROOFLINE = "roofline"
_ASSIGNED = L.OUT_ASSIGNED
_CLASSES_FIRST = 8  # classes the first book has rows for (it doubles as they come)
_FIELDS = L.BK_CLASS_FIELDS
_PRESSED = L.BK_GLOBALS + L.BK_PRESSED  # class 0's cells in the book; class c: + c * _FIELDS
_EVERY = L.BK_GLOBALS + L.BK_EVERY
_OTHER_PRECISION = "published, other precision"


def optimism(source: str) -> float:
    """Return the factor an untried pair's estimate is divided by when explored (1: never)."""
    if source == _ROOFLINE:
        return ROOFLINE_WITHIN
    if source == POOLED or source.startswith(CALIBRATED):
        return POOLED_WITHIN
    if source.startswith(_OTHER_PRECISION):
        return OTHER_PRECISION_WITHIN
    if source == TWIN:
        return TWIN_WITHIN
    return 1.0  # a published figure at the task's precision, or learned


@dataclass
class ExplorationStats:
    """What exploration did: decisions seen, probes made, and the probes' measured cost."""

    decisions: int = 0
    optimistic_passes: int = 0  # extra kernel calls (one per due decision)
    probes: int = 0
    deferred: int = 0  # due probes the task could not carry (its deadline), tried later
    hopeless_probes: int = 0  # probes carried by a task no device could finish in time
    measured: int = 0  # probes whose service was measured (feedback)
    extra_service_s: float = 0.0  # sum of (measured - usual choice's estimate); < 0: a win

    def as_dict(self) -> dict[str, float]:
        """Return the counters, with probes per 1,000 decisions (JSON-ready)."""
        per_k = 1000.0 * self.probes / self.decisions if self.decisions else 0.0
        return {
            "decisions": self.decisions,
            "optimistic_passes": self.optimistic_passes,
            "probes": self.probes,
            "deferred": self.deferred,
            "hopeless_probes": self.hopeless_probes,
            "probes_per_1000": round(per_k, 3),
            "probe_extra_service_s": self.extra_service_s,
            "probe_mean_extra_service_s": (
                self.extra_service_s / self.measured if self.measured else 0.0
            ),
        }


class Explorer:
    """Per class: which pairs are untried (their optimism) and when the next probe is due."""

    def __init__(self, n_devices: int, *, enabled: bool = True) -> None:
        self._n = n_devices
        self._optimism: list[npt.NDArray[np.float64] | None] = []
        #: per class, each device's divisor as Python floats (``_optimism``'s twin, read on
        #: every usual decision; None once every pair is tried)
        self.untried: list[list[float] | None] = []
        self._left: list[int] = []  # per class: its untried pairs (divisor > 1)
        self._classes = 0
        #: the kernel's book (``hm_place_one``, twin ``reference_one``): decisions counted,
        #: the clamped-factor probe's tick, and per class its tick, interval, pressed flag
        #: and whether it has untried pairs (``layout.BK_*``); replaced when classes outgrow it
        self.book: npt.NDArray[np.int64] = np.zeros(
            L.BK_GLOBALS + _CLASSES_FIRST * L.BK_CLASS_FIELDS, np.int64
        )
        self.book[L.BK_PROBE_EVERY] = PROBE_EVERY
        self.book[L.BK_HOPELESS_EVERY] = HOPELESS_EVERY
        self._rows = self.book[L.BK_GLOBALS :].reshape(-1, L.BK_CLASS_FIELDS)
        self._cells = self.book.data  # the book as Python ints (cheaper than numpy's items)
        #: per book class, each device's divisor (``_optimism``'s rows are views of it), so
        #: the kernel's one call runs a due exploration decision itself
        self.divisor_rows: npt.NDArray[np.float64] = np.ones((len(self._rows), n_devices))
        #: per book class, each device's pessimistic bound over its estimate (module doc):
        #: its optimism until measured (or given a factor), then 1; the kernel's bound rows
        self.bound_rows: npt.NDArray[np.float64] = np.ones((len(self._rows), n_devices))
        self._usual: dict[object, float] = {}  # probe decision -> usual choice's estimate
        self._probing: dict[object, int] = {}  # measuring decision in flight -> its device
        self._holds = [0] * n_devices  # per device: measuring decisions in flight on it
        #: per device, 1 while a measuring decision is in flight on it (not optimistic then)
        self.busy = np.zeros(n_devices, np.uint8)
        self._busy_cells = self.busy.data  # the flags as Python ints (cheaper than numpy's items)
        self._stats = ExplorationStats()
        self.enabled = enabled  # False: never probe (decisions are still counted)
        self.paused = False  # set while the Placer previews: nothing is counted or probed

    @property
    def enabled(self) -> bool:
        """False: never explore (``Placer(explore=False)``); decisions are still counted."""
        return bool(self._cells[L.BK_EXPLORING])

    @enabled.setter
    def enabled(self, on: bool) -> None:
        self._cells[L.BK_EXPLORING] = bool(on)

    @property
    def paused(self) -> bool:
        """True while the Placer previews: nothing is counted, probed or pressed."""
        return not self._cells[L.BK_COUNTING]

    @paused.setter
    def paused(self, on: bool) -> None:
        self._cells[L.BK_COUNTING] = not on

    @property
    def stats(self) -> ExplorationStats:
        """Return the counters (decisions as the book counted them)."""
        self._stats.decisions = self._cells[L.BK_DECISIONS]
        return self._stats

    @property
    def pressed(self) -> list[bool]:
        """Per class: the last decision was hopeless (no device met its deadline) or
        congested (see CONGESTED); set by each decision (a copy)."""
        return [bool(v) for v in self._rows[: self._classes, L.BK_PRESSED]]

    def set_pressed(self, cls: int, pressed: bool) -> None:
        """Record whether ``cls``'s last decision was pressed (an exploration decision's)."""
        self._cells[_PRESSED + cls * _FIELDS] = pressed

    @property
    def _every(self) -> npt.NDArray[np.int64]:
        """Per class: decisions between optimistic passes (a view of the book)."""
        return self._rows[: self._classes, L.BK_EVERY]

    def add_class(self) -> None:
        """Register a new class: every pair starts untried with a roofline estimate."""
        cls = self._classes
        if cls == len(self._rows):  # a larger book (the Placer binds the new one)
            book = np.zeros(L.BK_GLOBALS + 2 * cls * L.BK_CLASS_FIELDS, np.int64)
            book[: len(self.book)] = self.book
            self.book = book
            self._rows = book[L.BK_GLOBALS :].reshape(-1, L.BK_CLASS_FIELDS)
            self._cells = book.data
            rows = np.ones((len(self._rows), self._n))
            rows[:cls] = self.divisor_rows
            self.divisor_rows = rows
            bounds = np.ones((len(self._rows), self._n))
            bounds[:cls] = self.bound_rows
            self.bound_rows = bounds
            self._optimism = [None if r is None else rows[c] for c, r in enumerate(self._optimism)]
        self._rows[cls, L.BK_EVERY] = EXPLORE_EVERY
        self._rows[cls, L.BK_UNTRIED] = 1
        self._classes += 1
        self.divisor_rows[cls] = ROOFLINE_WITHIN
        self.bound_rows[cls] = ROOFLINE_WITHIN
        self._optimism.append(self.divisor_rows[cls])
        self.untried.append([ROOFLINE_WITHIN] * self._n)
        self._left.append(self._n)

    def set_sources(self, cls: int, sources: tuple[str, ...]) -> None:
        """Set a class's estimate sources (after priors); tried pairs stay tried, and
        measured pairs measured."""
        factors = [optimism(s) for s in sources]
        np.minimum(self.bound_rows[cls], factors, out=self.bound_rows[cls])
        row = self._optimism[cls]
        if row is None:
            return
        np.minimum(row, factors, out=row)
        self.untried[cls] = row.tolist()
        self._left[cls] = int((row > 1.0).sum())
        self._settle(cls)

    def optimistic_pass(self) -> None:
        """Count an exploration decision the kernel said was due (``ONE_EXPLORE``)."""
        self._stats.optimistic_passes += 1

    def divisors(self, cls: int) -> npt.NDArray[np.float64]:
        """Return each device's divisor for ``cls`` (1: tried or trusted), not a copy.

        A device flagged in ``busy`` is not optimistic either, whatever its divisor: it runs
        one probe at a time, whatever its class, and the next class waits for that
        measurement (``pooling`` may then start it from it). Call when due.
        """
        row = self._optimism[cls]
        assert row is not None  # the book said so (its class has untried pairs)
        return row

    def optimism_row(self, cls: int) -> npt.NDArray[np.float64]:
        """Return ``divisors`` with the busy devices' at 1 (a copy: what a pass divides by)."""
        row = self.divisors(cls).copy()
        row[self.busy != 0] = 1.0
        return row

    def probed(
        self, cls: int, device: int, key: object, usual_service_s: float, *, hopeless: bool
    ) -> None:
        """Record a probe of (cls, device); the usual choice's service estimate is its cost base.

        ``hopeless``: no device could meet the carrying task's deadline.
        """
        self._stats.probes += 1
        self._stats.hopeless_probes += hopeless
        self._usual[key] = usual_service_s
        self.hold(key, device)
        self._explored(cls, device)  # not measured yet: its bound stays

    def decided(self, cls: int, key: object, row: Sequence[float]) -> None:
        """A usual decision ``key`` of ``cls`` with output ``row`` (layout.OUT_*).

        Sets ``pressed``: late (``OF_LATE``) or congested (see ``CONGESTED``). When it
        placed the task on an untried pair, that first task measures the device, as a
        probe does (one at a time, see ``optimism_row``).
        """
        self._cells[_PRESSED + cls * _FIELDS] = pressed(row, CONGESTED)
        untried = self.untried[cls]
        if untried is not None:
            device = int(row[_ASSIGNED])
            if device >= 0 and untried[device] > 1.0:
                self.hold(key, device)

    def hold(self, key: object, device: int) -> None:
        """Mark ``device`` busy while decision ``key`` measures it."""
        self._unhold(key)
        self._probing[key] = device
        self._holds[device] += 1
        self._busy_cells[device] = 1

    def _unhold(self, key: object) -> None:
        device = self._probing.pop(key, None)
        if device is not None:
            self._holds[device] -= 1
            if not self._holds[device]:
                self._busy_cells[device] = 0

    def deferred(self) -> None:
        """A due probe the task could not carry (its deadline): due again later, no back-off."""
        self._stats.deferred += 1

    def fruitless(self, cls: int) -> None:
        """An optimistic pass picked no untried device: wait twice as long next time."""
        at = _EVERY + cls * _FIELDS
        self._cells[at] = min(2 * self._cells[at], EXPLORE_MAX_EVERY)

    def tried(self, cls: int, device: int) -> None:
        """Mark a pair measured (or imported): not explored again, its bound 1."""
        self.bound_rows[cls, device] = 1.0
        self._explored(cls, device)

    def _explored(self, cls: int, device: int) -> None:
        """Mark a pair tried (measured, imported or probed): it is not explored again."""
        row = self._optimism[cls]
        if row is not None and row[device] != 1.0:
            row[device] = 1.0
            untried = self.untried[cls]
            if untried is not None:
                untried[device] = 1.0
            self._left[cls] -= 1
            self._settle(cls)

    def finished(self, key: object, measured_s: float | None) -> None:
        """A decision finished: add a probe's measured cost (None: released unmeasured)."""
        if self._probing:  # a dict: tested without a call
            self._unhold(key)
        usual = self._usual.pop(key, None)
        if usual is not None and measured_s is not None and np.isfinite(usual):
            self._stats.measured += 1
            self._stats.extra_service_s += measured_s - usual

    def _settle(self, cls: int) -> None:
        """Forget a class's row once every pair is tried (counted, so no pass over the row)."""
        if not self._left[cls]:
            self._optimism[cls] = None
            self.untried[cls] = None
            self._cells[L.BK_GLOBALS + cls * _FIELDS + L.BK_UNTRIED] = 0
