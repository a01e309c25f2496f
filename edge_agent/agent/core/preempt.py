"""Preemption: take queued lower-priority work off a device so an urgent task makes its deadline.

Only work that has not started is taken (a running task is never stopped). Devices are
tried one at a time; on each, the lowest-priority jobs with the most slack go first, and no
more are taken than the urgent task needs. When even all of a device's lower-priority work
is not enough, that device's charges are restored exactly and the next device is tried.
The urgent task is placed by the policy's tier rule (``edge_agent.placement.tiers``), as
every task is: a class routed to tiers only preempts work on devices of those tiers.

Each try is a ``place_one`` call. A device is first tried with all its candidates released
(one call: a task hopeless there costs no more), then the fewest that are enough is found by
bisection (taking more only ever shortens the device's queue), so a device costs at most
``2 + log2(MAX_VICTIMS)`` calls, not ``MAX_VICTIMS``. A scheduling pass shares one ``Budget``
of tries among all its urgent tasks: a batch of late tasks (hostile, or only unlucky) buys
a bounded few milliseconds of kernel calls, and the tasks past the budget stay late.
"""

from __future__ import annotations

from collections.abc import Iterable

from edge_agent.agent.core.executor import Job
from edge_agent.placement import Decision, Placer, TaskContract, tiers
from edge_agent.placement import layout as L

#: Rejections an urgent task may preempt for (its deadline or latency bound, not e.g. memory).
URGENT = frozenset(L.REASON_NAMES[r] for r in (L.R_LATENCY, L.R_DEADLINE))
#: Most queued jobs one urgent task may displace.
MAX_VICTIMS = 256
#: Most placement tries (``place_one`` calls) preemption may make in one scheduling pass,
#: all its urgent tasks together (~0.1 ms each: a pass spends at most ~50 ms on it).
TRIES_PER_PASS = 512


class Budget:
    """The placement tries preemption may still make in one scheduling pass."""

    def __init__(self, tries: int | None = None) -> None:
        self.tries = TRIES_PER_PASS if tries is None else tries  # None: read when made
        self.left = self.tries
        self.skipped = 0  # urgent tasks not tried: the budget was spent

    def take(self) -> None:
        """Count one try."""
        self.left -= 1


def wants_preemption(decision: Decision) -> bool:
    """Whether the task misses its deadline (placed late, or refused on timing) for queued work."""
    return decision.late or (not decision.placed and not URGENT.isdisjoint(decision.rejections()))


class Queued:
    """A pass's preemption candidates: the queued placed jobs by device, slack first (built
    once a pass, not once an urgent task), each with what releasing it gives back."""

    def __init__(self, jobs: Iterable[Job]) -> None:
        self.by_device: dict[str, list[_Held]] = {}
        self.taken: set[str] = set()  # victims of this pass's earlier urgent tasks
        for job in jobs:
            d = job.decision
            if not job.cancelled and d.placed:
                charges = tuple(zip(d.device_ids, d.charges, strict=True))
                held = _Held(job, job.priority, charges, d.task.memory_needed())
                self.by_device.setdefault(d.device_ids[0], []).append(held)
        for held_list in self.by_device.values():
            held_list.sort(key=lambda h: _slack_first(h.job))

    def below(self, device_id: str, priority: int) -> list[_Held]:
        """Up to ``MAX_VICTIMS`` of a device's jobs of lower priority than ``priority``."""
        held_list = self.by_device[device_id]
        out: list[_Held] = []
        gone = False
        for held in held_list:  # lowest priority first: those below ``priority`` lead
            if held.priority >= priority or len(out) == MAX_VICTIMS:
                break
            if held.job.cancelled or held.job.task_id in self.taken:
                gone = True
            else:
                out.append(held)
        if gone:  # drop them for the pass's next urgent tasks
            keep = [h for h in held_list if not h.job.cancelled and h.job.task_id not in self.taken]
            held_list[:] = keep
        return out


class _Held:
    """A queued job with its priority, the queue seconds it holds on each device and the
    memory it holds on each."""

    __slots__ = ("charges", "job", "memory", "priority")

    def __init__(
        self, job: Job, priority: int, charges: tuple[tuple[str, float], ...], memory: float
    ) -> None:
        self.job, self.priority, self.charges, self.memory = job, priority, charges, memory


def preempt_for(
    placer: Placer,
    contract: TaskContract,
    queued: Iterable[Job] | Queued,
    budget: Budget | None = None,
) -> tuple[Decision, list[Job]] | None:
    """Place ``contract`` by releasing lower-priority queued jobs; return (decision, victims).

    Returns None (and leaves every device as it was) when no set of victims is enough, or
    when ``budget`` (the pass's; None: a fresh one for this task alone) is spent.
    The victims' charges are released in the placer; the caller withdraws and requeues them.
    """
    budget = Budget() if budget is None else budget
    if budget.left <= 0:
        budget.skipped += 1
        return None
    queued = queued if isinstance(queued, Queued) else Queued(queued)
    rules = tiers.rules_of(placer.policy)
    wanted = rules.classes.get(contract.task_class)
    tier_of = {d.id: d.tier.name.lower() for d in placer.devices}
    for device_id in queued.by_device:
        if wanted is not None and tier_of.get(device_id) not in wanted:  # room it may not use
            continue
        held = queued.below(device_id, contract.priority)
        if not held:
            continue
        if budget.left <= 0:
            break
        found = _fewest(placer, contract, rules, held, budget)
        if found is not None:
            queued.taken.update(job.task_id for job in found[1])
            return found
    return None


def _fewest(
    placer: Placer,
    contract: TaskContract,
    rules: tiers.TierRules,
    held: list[_Held],
    budget: Budget,
) -> tuple[Decision, list[Job]] | None:
    """Place ``contract`` on time by releasing the fewest of ``held`` (a prefix); or None,
    every device as it was. The first try releases them all; then bisection, one try a step,
    while the budget lasts (when it runs out, the smallest prefix found so far is taken).

    A try sets the devices' queues as ``Placer.release`` would leave them (its clamps add up:
    one sum, not one call a job); only the victims finally taken are released in the placer.
    """
    snapshot = _snapshot(placer)
    total = {d.id: float(d.capability.memory_bytes) for d in placer.devices}

    def attempt(k: int) -> Decision | None:  # held[:k] released and the task placed on time
        freed: dict[str, list[float]] = {}
        for h in held[:k]:
            for device_id, charge in h.charges:
                f = freed.setdefault(device_id, [0.0, 0.0])
                f[0] += charge
                f[1] += h.memory
        _restore(placer, snapshot)
        for device_id, (queue_s, memory) in freed.items():
            was_queued, was_free = snapshot[device_id]
            placer.update_live(
                device_id,
                queued_s=max(0.0, was_queued - queue_s),
                memory_free_bytes=min(total[device_id], was_free + memory),
            )
        budget.take()
        decision = tiers.place_one(placer, contract, rules)
        if decision.placed and not decision.late:
            return decision
        if decision.placed:
            placer.release(decision)
        return None

    current = attempt(len(held))  # the placer holds held[:fits] released and this decision
    if current is None:  # even all of them are not enough here
        _restore(placer, snapshot)
        return None
    fits, short = len(held), 0  # held[:fits] released is enough, held[:short] is not
    while fits - short > 1 and budget.left > 1:  # one try kept back to place on ``fits``
        if current is not None:
            placer.release(current)
        mid = (fits + short) // 2
        current = attempt(mid)
        if current is not None:
            fits = mid
        else:
            short = mid
    if current is None:  # the last try fell short: place again with held[:fits] released
        current = attempt(fits)
        if current is None:  # not as an earlier try found (should not happen): give up here
            _restore(placer, snapshot)
            return None
    victims = [h.job for h in held[:fits]]
    now = _snapshot(placer)
    for job in victims:  # the placer's own release (its bookkeeping); the queues stay as tried
        placer.release(job.decision)
    _restore(placer, now)
    return current, victims


def _slack_first(job: Job) -> tuple[int, float, int]:
    """Lowest priority first, then the latest deadline (none is latest), then the newest."""
    return (job.priority, -job.deadline_at, -job.seq)  # no deadline: -inf, the most slack


def _snapshot(placer: Placer) -> dict[str, tuple[float, float]]:
    return {d: (live["queued_s"], live["memory_free_bytes"]) for d, live in placer.lives().items()}


def _restore(placer: Placer, snapshot: dict[str, tuple[float, float]]) -> None:
    for device_id, (queued_s, memory) in snapshot.items():
        placer.update_live(device_id, queued_s=queued_s, memory_free_bytes=memory)
