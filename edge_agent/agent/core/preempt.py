"""Preemption: take queued lower-priority work off a device so an urgent task makes its deadline.

Only work that has not started is taken (a running task is never stopped). Devices are
tried one at a time; on each, the lowest-priority jobs with the most slack go first, and no
more are taken than the urgent task needs. When even all of a device's lower-priority work
is not enough, that device's charges are restored exactly and the next device is tried.
The urgent task is placed by the policy's tier rule (``edge_agent.placement.tiers``), as
every task is: a class routed to tiers only preempts work on devices of those tiers.
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


def wants_preemption(decision: Decision) -> bool:
    """Whether the task misses its deadline (placed late, or refused on timing) for queued work."""
    return decision.late or (not decision.placed and not URGENT.isdisjoint(decision.rejections()))


def preempt_for(
    placer: Placer, contract: TaskContract, queued: Iterable[Job]
) -> tuple[Decision, list[Job]] | None:
    """Place ``contract`` by releasing lower-priority queued jobs; return (decision, victims).

    Returns None (and leaves every device as it was) when no set of victims is enough.
    The victims' charges are released in the placer; the caller withdraws and requeues them.
    """
    rules = tiers.rules_of(placer.policy)
    wanted = rules.classes.get(contract.task_class)
    tier_of = {d.id: d.tier.name.lower() for d in placer.devices}
    by_device: dict[str, list[Job]] = {}
    for job in queued:
        if job.priority < contract.priority and not job.cancelled and job.decision.placed:
            device_id = job.decision.device_ids[0]
            if wanted is None or tier_of.get(device_id) in wanted:  # room it may use
                by_device.setdefault(device_id, []).append(job)
    for jobs in by_device.values():
        jobs.sort(key=_slack_first)
        snapshot = _snapshot(placer)
        released: list[Job] = []
        for job in jobs[:MAX_VICTIMS]:
            placer.release(job.decision)
            released.append(job)
            decision = tiers.place_one(placer, contract, rules)
            if decision.placed and not decision.late:
                return decision, released
            if decision.placed:
                placer.release(decision)
        _restore(placer, snapshot)
    return None


def _slack_first(job: Job) -> tuple[int, float, int]:
    """Lowest priority first, then the latest deadline (none is latest), then the newest."""
    return (job.priority, -job.deadline_at, -job.seq)  # no deadline: -inf, the most slack


def _snapshot(placer: Placer) -> dict[str, tuple[float, float]]:
    return {
        d: (live["queued_s"], live["memory_free_bytes"])
        for d in placer.device_ids
        for live in (placer.live(d),)
    }


def _restore(placer: Placer, snapshot: dict[str, tuple[float, float]]) -> None:
    for device_id, (queued_s, memory) in snapshot.items():
        placer.update_live(device_id, queued_s=queued_s, memory_free_bytes=memory)
