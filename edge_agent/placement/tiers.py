"""Hot / warm / cold tiers: route task classes to device tiers in order, spilling over.

Every device carries a tier label (profiles: ``tier``; by default from its kind, see
``edge_agent.resources.profile_schema.default_tier``). The policy rule ``tiers``::

    {"classes": {"detect": ["hot", "warm"], "batch": ["cold", "warm"]},
     "max_queue_s": {"hot": 0.05}}

places a task of a listed class only on devices of its tiers, trying them in order. A tier
is *full* for a task when none of its devices can take it now (each is rejected: busy past
the task's latency bound or deadline, short of memory, offline, or unable to run it) or
when the best of them would make it wait (queue, reconfiguration, link) longer than the
tier's ``max_queue_s``. The task then spills to the next tier; when every tier is full
only by ``max_queue_s``, it goes to the first tier that could take it. A decision records
its tier and the tiers it spilled from. Classes not listed are placed on any device.

Devices outside the tier are left out of the call (``place_one(..., candidates=...)``:
their health is untouched), and the decision names them as outside its tiers.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from edge_agent.placement.batch import urgency
from edge_agent.placement.codec import PreparedTask
from edge_agent.placement.decision import Decision
from edge_agent.placement.placer import Placer
from edge_agent.placement.policy import Policy
from edge_agent.resources.vocab import Tier
from edge_agent.tasks.contract import TaskContract

TIER_NAMES: tuple[str, ...] = tuple(t.name.lower() for t in Tier)


@dataclass(frozen=True)
class TierRules:
    """Ordered tier preference per task class, and each tier's queue limit (seconds)."""

    classes: Mapping[str, tuple[str, ...]]
    max_queue_s: Mapping[str, float]

    def __bool__(self) -> bool:
        return bool(self.classes)


def parse_tiers(value: object, where: str = "tiers") -> TierRules:
    """Return the rules of a ``tiers`` policy value; ValueError naming the field."""
    if not isinstance(value, Mapping):
        raise ValueError(f'{where}: expected {{"classes": {{task class: [tier, ...]}}}}')
    unknown = sorted(map(str, set(value) - {"classes", "max_queue_s"}))
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: classes, max_queue_s"
        )
    classes = value.get("classes", {})
    if not isinstance(classes, Mapping):
        raise ValueError(f"{where}.classes: expected {{task class: [tier, ...]}}")
    routes: dict[str, tuple[str, ...]] = {}
    for cls, tiers in classes.items():
        at = f"{where}.classes.{cls}"
        if not isinstance(tiers, list) or not tiers:
            raise ValueError(f"{at}: expected a non-empty list of tiers ({', '.join(TIER_NAMES)})")
        for tier in tiers:
            if tier not in TIER_NAMES:
                known = ", ".join(TIER_NAMES)
                raise ValueError(f"{at}: unknown tier {tier!r}; expected one of: {known}")
        if len(set(tiers)) != len(tiers):
            raise ValueError(f"{at}: a tier is listed twice in {tiers!r}")
        routes[str(cls)] = tuple(tiers)
    limits = value.get("max_queue_s", {})
    if not isinstance(limits, Mapping):
        raise ValueError(f"{where}.max_queue_s: expected {{tier: seconds}}")
    queue: dict[str, float] = {}
    for tier, seconds in limits.items():
        if tier not in TIER_NAMES:
            known = ", ".join(TIER_NAMES)
            raise ValueError(
                f"{where}.max_queue_s: unknown tier {tier!r}; expected one of: {known}"
            )
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not (math.isfinite(seconds) and seconds >= 0)
        ):
            raise ValueError(f"{where}.max_queue_s.{tier}: expected seconds >= 0, got {seconds!r}")
        queue[tier] = float(seconds)
    return TierRules(routes, queue)


def rules_of(policy: Policy) -> TierRules:
    """Return the tier rules of a (validated) policy; empty when it has none."""
    return parse_tiers(policy.rules.get("tiers") or {}, "policy.rules.tiers")


def place(placer: Placer, tasks: Sequence[TaskContract | PreparedTask]) -> list[Decision]:
    """Place a batch like ``Placer.place``, routing the classes the tier rules name.

    Without rules for any task of the batch this is one kernel call; otherwise the tasks
    are placed one by one in the same order (higher priority, then earlier deadline).
    """
    rules = rules_of(placer.policy)
    if not rules.classes:  # no tier rules: no task's class to look at
        return placer.place(tasks)
    contracts = [t.contract if isinstance(t, PreparedTask) else t for t in tasks]
    if not any(c.task_class in rules.classes for c in contracts):
        return placer.place(tasks)
    order = sorted(range(len(tasks)), key=lambda i: urgency(contracts[i]))
    out: dict[int, Decision] = {}
    for i in order:
        out[i] = place_one(placer, tasks[i], rules)
    return [out[i] for i in range(len(tasks))]


def place_one(
    placer: Placer, task: TaskContract | PreparedTask, rules: TierRules | None = None
) -> Decision:
    """Place one task on the first of its class's tiers that is not full (see the module)."""
    rules = rules_of(placer.policy) if rules is None else rules
    contract = task.contract if isinstance(task, PreparedTask) else task
    wanted = rules.classes.get(contract.task_class)
    if wanted is None:
        return placer.place_one(task)
    tiers = [d.tier.name.lower() for d in placer.devices]
    full: list[str] = []
    queued: list[str] = []  # tiers that could take it, over their queue limit
    for tier in wanted:
        members = [i for i, t in enumerate(tiers) if t == tier]
        decision = place_within(placer, task, members)
        if not decision.placed:
            full.append(tier)
            continue
        limit = rules.max_queue_s.get(tier, math.inf)
        if decision.latency_s - decision.service_s <= limit:
            return _labelled(decision, tiers, wanted, tier, full, {tier})
        placer.release(decision)
        queued.append(tier)
        full.append(tier)
    if queued:  # every tier is over its queue limit: the first that can take it
        decision = place_within(placer, task, [i for i, t in enumerate(tiers) if t == queued[0]])
        spilled = full[: full.index(queued[0])]
        return _labelled(decision, tiers, wanted, queued[0], spilled, {queued[0]})
    union = [i for i, t in enumerate(tiers) if t in wanted]  # reasons from every allowed device
    decision = place_within(placer, task, union)
    first = tiers[decision.device_indices[0]] if decision.placed else None  # a gang across tiers
    return _labelled(decision, tiers, wanted, first, full if first else (), wanted)


def place_within(
    placer: Placer, task: TaskContract | PreparedTask, allowed: Collection[int]
) -> Decision:
    """Place ``task`` on the devices at ``allowed`` indices only (the others left out)."""
    ids = placer.device_ids
    return placer.place_one(task, candidates=[ids[i] for i in allowed])


def _labelled(
    decision: Decision,
    tiers: Sequence[str],
    wanted: Sequence[str],
    tier: str | None,
    full: Sequence[str],
    called: Collection[str],
) -> Decision:
    """Record the tier, the full tiers passed over and the devices left out on ``decision``.

    ``called`` are the tiers whose devices the deciding kernel call saw.
    """
    decision.tier = tier
    decision.spilled_from = tuple(full)
    decision.excluded = {
        i: _why_out(t, wanted, full) for i, t in enumerate(tiers) if t not in called
    }
    return decision


def _why_out(tier: str, wanted: Sequence[str], full: Sequence[str]) -> str:
    if tier in full:
        return f"tier {tier} was full for it (no device could take it in time)"
    if tier in wanted:
        return f"tier {tier} not needed (an earlier tier had room)"
    return f"tier {tier} is not one of this class's tiers ({', '.join(wanted)})"
