"""A placement decision: where a task goes, the estimate behind it, and why not elsewhere."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from edge_agent.placement import layout as L
from edge_agent.tasks.contract import TaskContract

_NOTHING_EXCLUDED: Mapping[int, str] = MappingProxyType({})
_TEMPLATES_KEPT = 4096  # summary templates per context (cleared when full)
# the output row's columns, read by every decision's properties (no module lookups per read)
_LATENCY = L.OUT_EST + L.EST_LATENCY_S
_SERVICE = L.OUT_EST + L.EST_SERVICE_S
_BASE = L.OUT_EST + L.EST_BASE_S
_ENERGY = L.OUT_EST + L.EST_ENERGY_J
_CARBON = L.OUT_EST + L.EST_CARBON_G
_SCORE = L.OUT_EST + L.EST_SCORE
_RUNNER_UP_SCORE = L.OUT_EST + L.EST_RUNNER_UP_SCORE
_ASSIGNED, _CHARGED, _RUNNER_UP = L.OUT_ASSIGNED, L.OUT_CHARGED, L.OUT_RUNNER_UP
_COMP, _COMP_END = L.OUT_COMP, L.OUT_COMP + L.N_OBJECTIVES
_COUNTS, _COUNTS_END = L.OUT_COUNTS, L.OUT_COUNTS + L.N_REASONS
_FLAGS, _LATE = L.OUT_FLAGS, L.OF_LATE
_new = object.__new__


def _chosen_source(sources: tuple[str, ...] | None, indices: tuple[int, ...]) -> str:
    """The estimate source of a placed decision's first device: its class's label for it,
    "roofline" when the class keeps none (``Decision.estimate_source``, ``summary``)."""
    return "roofline" if sources is None else sources[indices[0]]


@dataclass(frozen=True, slots=True)
class DecisionContext:
    """What every decision of one Placer shares: the fleet's device order and the policy."""

    device_order: tuple[str, ...]
    policy: str  # "name@version"
    backend: str
    #: a placed decision's summary with its three figures left as ``%`` fields, by what
    #: the rest of the text depends on (``Decision._template``): the same few, over and over
    templates: dict[tuple[Any, ...], str] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )


class Decision:
    """The kernel's verdict for one task, with everything needed to explain it.

    A read-only view over the kernel's output row (layout.OUT_*), copied when decided:
    building it costs one list, so that placing stays fast; fields are computed on access.
    """

    # what every decision sets is a slot; what few set (a probe, a tier's routing) is a
    # class default that the instance's ``__dict__`` (made on the first such write)
    # overrides, so that building a usual decision stores eight fields (``decided``)
    __slots__ = (
        "__dict__",
        "_ctx",
        "_ids",
        "_indices",
        "_row",
        "reasons",
        "sources",
        "task",
        "task_class_index",
    )
    probe: bool = False  # an exploration probe: clamped factors reset, or an untried pair
    tier: str | None = None  # the tier placed in, when tier rules routed the task
    spilled_from: tuple[str, ...] = ()  # preferred tiers that were full
    excluded: Mapping[int, str] = _NOTHING_EXCLUDED  # device index -> why left out

    def __init__(
        self,
        task: TaskContract,
        row: Sequence[float],
        ctx: DecisionContext,
        reasons: bytes | None = None,
        task_class_index: int = 0,
        sources: tuple[str, ...] | None = None,
        *,
        probe: bool = False,
    ) -> None:
        self.task = task
        self.sources = sources  # each device's estimate source when decided (None: roofline)
        self._row = row
        self._ctx = ctx
        self._indices: tuple[int, ...] | None = None  # computed on first access (row is fixed)
        self._ids: tuple[str, ...] | None = None
        self.reasons = reasons  # reason code per device in device_order, if kept
        self.task_class_index = task_class_index
        if probe:
            self.probe = True

    @property
    def placed(self) -> bool:
        """Return True when the task got all the devices it asked for."""
        return self._row[_ASSIGNED] >= 0

    @property
    def device_indices(self) -> tuple[int, ...]:
        """Return the chosen devices' positions in ``device_order`` (computed once)."""
        found = self._indices
        if found is None:
            row = self._row
            first = row[_ASSIGNED]
            if first < 0:
                found = ()
            elif row[_ASSIGNED + 1] < 0:  # one device (every task but a gang's): no loop
                found = (int(first),)
            else:
                assigned = row[_ASSIGNED : _ASSIGNED + L.MAX_GANG]
                found = tuple([int(d) for d in assigned if d >= 0])
            self._indices = found
        return found

    @property
    def device_ids(self) -> tuple[str, ...]:
        """Return the chosen devices' ids (empty when not placed; computed once)."""
        found = self._ids
        if found is None:
            order = self._ctx.device_order
            found = self._ids = tuple(order[d] for d in self.device_indices)
        return found

    @property
    def charges(self) -> tuple[float, ...]:
        """Return the queue seconds charged to each chosen device."""
        n = len(self.device_indices)
        if n == 1:
            return (self._row[_CHARGED],)
        return tuple(self._row[_CHARGED : _CHARGED + n])

    @property
    def latency_s(self) -> float:
        """Return the estimated completion latency: max(queue, link) + reconfig + service."""
        return self._row[_LATENCY]

    @property
    def service_s(self) -> float:
        """Return the estimated time on the device (the longest, for a gang)."""
        return self._row[_SERVICE]

    @property
    def base_s(self) -> float:
        """Return the service estimate without the learned correction (what learning divides)."""
        return self._row[_BASE]

    @property
    def late(self) -> bool:
        """Return True when no device could meet the deadline: placed on the earliest finish."""
        return bool(int(self._row[_FLAGS]) & _LATE)

    @property
    def estimate_source(self) -> str | None:
        """Return where the chosen device's estimate came from (None when not placed).

        "roofline" (datasheet model), "published ... (status)" (the profile's per-model
        figure, see ``priors``), or "learned from measurements (prior: ...)".
        """
        if not self.placed:
            return None
        return _chosen_source(self.sources, self.device_indices)

    @property
    def energy_j(self) -> float:
        """Return the estimated energy over all chosen devices."""
        return self._row[_ENERGY]

    @property
    def carbon_g(self) -> float:
        """Return the estimated grams of CO2 (energy times site intensity)."""
        return self._row[_CARBON]

    @property
    def score(self) -> float:
        """Return the weighted relative regret of the choice, 0 = best on every objective."""
        return self._row[_SCORE]

    @property
    def runner_up(self) -> str | None:
        """Return the best device not chosen, if any."""
        ru = int(self._row[_RUNNER_UP])
        return self._ctx.device_order[ru] if ru >= 0 else None

    @property
    def runner_up_score(self) -> float:
        """Return the runner-up's score (0 when there is none)."""
        return self._row[_RUNNER_UP_SCORE]

    @property
    def components(self) -> tuple[float, ...]:
        """Return the weighted score terms, in OBJECTIVE_NAMES order."""
        return tuple(self._row[_COMP:_COMP_END])

    @property
    def reject_counts(self) -> tuple[int, ...]:
        """Return how many devices each reason code rejected."""
        return tuple(map(int, self._row[_COUNTS:_COUNTS_END]))

    @property
    def counts_key(self) -> tuple[float, ...]:
        """Return the per-reason counts as the kernel wrote them: equal exactly when
        ``reject_counts`` are equal, and cheaper (a cache key, not counts to read)."""
        return tuple(self._row[_COUNTS:_COUNTS_END])

    @property
    def estimates(self) -> tuple[float, float, float, float, float, float]:
        """Return (latency_s, service_s, energy_j, carbon_g, score, runner_up_score) at once."""
        row = self._row
        return (
            row[_LATENCY],
            row[_SERVICE],
            row[_ENERGY],
            row[_CARBON],
            row[_SCORE],
            row[_RUNNER_UP_SCORE],
        )

    @property
    def policy(self) -> str:
        """Return the policy decided under, as "name@version"."""
        return self._ctx.policy

    @property
    def backend(self) -> str:
        """Return the kernel that decided: "native" or "python"."""
        return self._ctx.backend

    @property
    def device_order(self) -> tuple[str, ...]:
        """Return the fleet's device ids when decided (the index space of the reasons)."""
        return self._ctx.device_order

    def __repr__(self) -> str:
        return f"<Decision {self.task.task_class} -> {self.summary()}>"

    @property
    def device_id(self) -> str | None:
        """Return the (first) chosen device, or None when the task could not be placed."""
        return self.device_ids[0] if self.device_ids else None

    @property
    def spilled(self) -> bool:
        """Return True when the task went to a tier after its preferred one(s) were full."""
        return bool(self.spilled_from)

    def rejections(self) -> dict[str, int]:
        """Return how many devices each hard constraint rejected."""
        counts = list(self.reject_counts)
        counts[L.R_EXCLUDED] -= len(self.excluded)  # left out of the call, named below
        found = {
            L.REASON_NAMES[code]: count
            for code, count in enumerate(counts)
            if count and code != L.R_OK
        }
        return found | ({"outside its tiers": len(self.excluded)} if self.excluded else {})

    def why_not(self, device_id: str) -> str:
        """Return why ``device_id`` was not chosen (its failed constraint, or its score)."""
        return why_not_text(
            device_id,
            self.device_ids,
            self.device_order,
            self.reasons,
            self.excluded,
            (self.runner_up, self.runner_up_score, self.score),
        )

    def summary(self) -> str:
        """Return a one-line human explanation ("why here").

        A placed, on-time decision's text is one of a few templates (by device, estimate
        source, runner-up, largest term and tier: ``DecisionContext.templates``) with its
        estimate, energy and score written in: a batch's thousand summaries compose a few."""
        row = self._row
        if row[_ASSIGNED] < 0:
            why = ", ".join(f"{n} {r}" for r, n in self.rejections().items()) or "no devices"
            return f"not placed: no feasible device ({why})"
        if int(row[_FLAGS]) & _LATE:
            runner_up = self.runner_up
            extra = f"; runner-up {runner_up}" if runner_up else ""
            return (
                f"{', '.join(self.device_ids)}: deadline cannot be met "
                f"({self.task.requirements.deadline_s * 1e3:.3f} ms): placed on the earliest "
                f"finish, est {self.latency_s * 1e3:.3f} ms ({self.estimate_source}){extra}"
            )
        comps = row[_COMP:_COMP_END]
        if not isinstance(comps, list):  # a memoryview (an exploration pass's row)
            comps = list(comps)
        main = comps.index(max(comps))  # the first largest term, as max(range, key) gives
        indices = self.device_indices  # placed: ``estimate_source`` without its check again
        source = _chosen_source(self.sources, indices)
        key = (indices, source, row[_RUNNER_UP], main, self.tier, self.spilled_from)
        templates = self._ctx.templates
        template = templates.get(key)
        if template is None:
            if len(templates) >= _TEMPLATES_KEPT:
                templates.clear()
            template = templates[key] = self._template(main)
        return template % (row[_LATENCY] * 1e3, row[_ENERGY] * 1e3, row[_SCORE])

    def _template(self, main: int) -> str:
        """Return this (placed, on-time) decision's summary with its estimate, energy and
        score left as ``%.3f`` fields (``summary`` keeps one per key)."""
        runner_up = self.runner_up
        extra = f"; runner-up {runner_up}" if runner_up else ""
        if self.tier is not None:
            spill = f", spilled from {'/'.join(self.spilled_from)}" if self.spilled_from else ""
            extra += f"; tier {self.tier}{spill}"
        head = f"{', '.join(self.device_ids)}: est ".replace("%", "%%")
        source = f" ms ({self.estimate_source}), ".replace("%", "%%")
        tail = f" (largest term {L.OBJECTIVE_NAMES[main]}){extra}".replace("%", "%%")
        return f"{head}%.3f{source}%.3f mJ, score %.3f{tail}"

    def to_dict(self) -> dict[str, Any]:
        """Return the decision as a JSON-ready document."""
        return {
            "placed": self.placed,
            "devices": list(self.device_ids),
            "estimate": {
                "latency_s": self.latency_s,
                "service_s": self.service_s,
                "energy_j": self.energy_j,
                "carbon_g": self.carbon_g,
            },
            "score": self.score,
            "runner_up": self.runner_up,
            "runner_up_score": self.runner_up_score if self.runner_up else None,
            "components": dict(zip(L.OBJECTIVE_NAMES, self.components, strict=True)),
            "rejections": self.rejections(),
            "policy": self.policy,
            "backend": self.backend,
            "task_class": self.task.task_class,
            "tier": self.tier,
            "spilled": self.spilled,
            "deadline_cannot_be_met": self.late,
            "estimate_source": self.estimate_source,
            "probe": self.probe,
            "summary": self.summary(),
        }


def decided(
    task: TaskContract,
    row: Sequence[float],
    ctx: DecisionContext,
    reasons: bytes | None,
    task_class_index: int,
    sources: tuple[str, ...] | None,
) -> Decision:
    """Return ``Decision(task, row, ctx, reasons, task_class_index, sources)``, built without
    the class call's ``__init__`` dispatch (``place_one``'s path: about 40 % cheaper)."""
    decision: Decision = _new(Decision)
    decision.task = task
    decision.sources = sources
    decision._row = row
    decision._ctx = ctx
    decision._indices = None
    decision._ids = None
    decision.reasons = reasons
    decision.task_class_index = task_class_index
    return decision


def why_not_text(
    device_id: str,
    chosen: Sequence[str],
    order: Sequence[str],
    reasons: bytes | None,
    excluded: Mapping[int, str],
    scores: tuple[str | None, float, float],
) -> str:
    """Return why ``device_id`` was not chosen, from a decision's compact output.

    ``scores`` is (runner-up, its score, the chosen device's score). ``Decision.why_not``
    answers through this, and so does a stored decision row (which keeps the reason codes
    and composes the text only when it is asked for).
    """
    if device_id in chosen:
        return f"{device_id} was chosen"
    if device_id not in order:
        return f"{device_id} is not a device of this fleet"
    if reasons is None:
        return "per-device reasons were not kept for this decision"
    index = order.index(device_id)
    if index in excluded:
        return f"{device_id} excluded: {excluded[index]}"
    code = reasons[index]
    if code != L.R_OK:
        return f"{device_id} rejected: {L.REASON_NAMES[code]}"
    runner_up, runner_up_score, score = scores
    first = chosen[0] if chosen else None
    if device_id == runner_up:
        return (
            f"{device_id} was feasible and the runner-up: score "
            f"{runner_up_score:.4g} vs {score:.4g} for {first}"
        )
    return f"{device_id} was feasible but scored worse than {first}"
