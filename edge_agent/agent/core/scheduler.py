"""The scheduling loop: waiting tasks in priority / tenant fair share / deadline order, batched.

Each pass takes up to ``batch_size`` waiting tasks (``fairshare.FairQueue``), places them with
one kernel call, persists the decisions (the tasks become ``placed``) and hands them to the
executor. A task that would miss its deadline or latency bound only because of queued
lower-priority work preempts that work (``preempt``), which goes back to waiting. A task no
device can take only because the devices are busy is parked until some work finishes; one
no device could ever take fails with the decision's reasons.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from edge_agent.agent.core.executor import Job
from edge_agent.agent.core.fairshare import FairQueue
from edge_agent.agent.core.preempt import Budget, Queued, preempt_for, wants_preemption
from edge_agent.agent.core.store import Store
from edge_agent.agent.core.waiting import Waiting
from edge_agent.agent.web.metrics import AgentMetrics
from edge_agent.errors import KernelError
from edge_agent.placement import Decision, Placer, TaskContract, tiers
from edge_agent.placement import layout as L
from edge_agent.placement.pools import Pools, Verdict, admit_placed

if TYPE_CHECKING:
    from edge_agent.agent.core.roles import Dispatcher, Offload

_log = logging.getLogger(__name__)
_ADMITTED = Verdict(True)  # the verdict of every task when no tenant has a pool

#: Rejections that go away once running work finishes.
TRANSIENT = frozenset(
    L.REASON_NAMES[r] for r in (L.R_OFFLINE, L.R_MEMORY, L.R_LATENCY, L.R_DEADLINE)
)


@functools.lru_cache(maxsize=1024)
def _json_list(items: tuple[str, ...]) -> str:
    """Return a tuple of strings as a JSON list (devices, tiers: a few values, over and over)."""
    return json.dumps(list(items))


@functools.lru_cache(maxsize=1024)
def _json_components(values: tuple[float, ...]) -> str:
    """Return a decision's score terms as a JSON object (a task kind's repeat from task to task)."""
    return json.dumps(dict(zip(L.OBJECTIVE_NAMES, values, strict=True)))


#: The rejections column by (kernel's counts per reason, devices left out by tier rules):
#: a few combinations, over and over (bounded: cleared when full).
_REJECTIONS: dict[tuple[tuple[float, ...], int], str] = {}
_REJECTIONS_LIMIT = 1024
#: The device order column by the fleet's order tuple (``id`` of the tuple kept alongside it:
#: one per placer, the same object for every decision; bounded as ``_REJECTIONS``).
_ORDERS: dict[int, tuple[tuple[str, ...], str]] = {}


def _json_rejections(d: Decision) -> str:
    """Return ``json.dumps(d.rejections())``, composed once per combination of counts."""
    key = (d.counts_key, len(d.excluded))
    text = _REJECTIONS.get(key)
    if text is None:
        if len(_REJECTIONS) >= _REJECTIONS_LIMIT:
            _REJECTIONS.clear()
        text = _REJECTIONS[key] = json.dumps(d.rejections())
    return text


def _json_order(order: tuple[str, ...]) -> str:
    """Return a fleet's device order as a JSON list, composed once per order tuple (no hash
    of its ids per decision: a fleet may have hundreds)."""
    found = _ORDERS.get(id(order))
    if found is None or found[0] is not order:
        if len(_ORDERS) >= _REJECTIONS_LIMIT:
            _ORDERS.clear()
        found = _ORDERS[id(order)] = (order, json.dumps(list(order)))
    return found[1]


def decision_row(d: Decision) -> dict[str, Any]:
    """Return a decision as a ``decisions`` table row; a column it leaves out is NULL.

    Built from the decision's fields directly (not ``to_dict``, which would compose the
    summary a second time): this runs once per placed task, on the intake's hot path. The
    columns that are NULL for most decisions (no runner-up, no reason codes, no tier rule,
    and ``why_not``, never written since schema v6) are left out rather than bound as None,
    which ``sqlite3`` adapts at ~0.3-0.7 µs each (docs/performance.md, "Intake path, session
    13"). Read it with ``get`` for those columns.
    """
    devices = d.device_ids
    runner_up = d.runner_up
    latency_s, service_s, energy_j, carbon_g, score, runner_up_score = d.estimates
    reasons, excluded, spilled, tier = d.reasons, d.excluded, d.spilled_from, d.tier
    row: dict[str, Any] = {
        "placed": 1 if devices else 0,
        "devices": _json_list(devices),
        "latency_s": latency_s,
        "service_s": service_s,
        "energy_j": energy_j,
        "carbon_g": carbon_g,  # energy x the site's intensity when placed
        "score": score,
        "components": _json_components(d.components),
        "rejections": _json_rejections(d),
        # why not each other device: the kernel's reason codes are kept and the text is
        # composed when asked (store_batch.why_not_of), not for every task placed
        "device_order": _json_order(d.device_order),
        "policy": d.policy,
        "backend": d.backend,
        "summary": d.summary(),
        "spilled_from": _json_list(spilled),  # a tuple (tiers.py), () when not spilled
    }
    if devices:
        row["device"] = devices[0]
    if runner_up:
        row["runner_up"], row["runner_up_score"] = runner_up, runner_up_score
    if reasons is not None:
        row["reasons"] = reasons.hex()
    if excluded:
        row["excluded"] = json.dumps(dict(excluded))
    if tier is not None:  # None: no tier rule applied
        row["tier"] = tier
    return row


class Scheduler:
    """Owns the waiting tasks; its ``run`` loop places them and dispatches the jobs."""

    def __init__(
        self,
        placer: Placer,
        store: Store,
        metrics: AgentMetrics,
        jobs: Dispatcher,
        batch_size: int,
        pools: Pools | None = None,
        offload: Offload | None = None,
    ) -> None:
        """``jobs``: where placed jobs go; ``pools``: the tenants' resource pools (None:
        none); ``offload``: the mesh, offered each task before it runs here (None: no mesh)."""
        self.placer, self.store, self.metrics = placer, store, metrics
        self.jobs, self._batch = jobs, batch_size
        self._waiting: dict[str, Waiting] = {}
        self.queue = FairQueue(self._waiting.__contains__, self._shares())
        self._parked: list[Waiting] = []
        self._wake = asyncio.Event()
        self.placing: set[str] = set()  # popped, decision not yet persisted
        self._persisted: set[str] = set()  # the batch being placed: decisions stored
        self.offload = offload
        self.pools = Pools({}, 0) if pools is None else pools

    def _shares(self) -> dict[str, float]:
        shares = self.placer.policy.rules.get("tenant_shares") or {}
        return {str(k): float(v) for k, v in shares.items()}

    def policy_changed(self) -> None:
        """Take the tenant shares from the placer's (new) policy."""
        self.queue.set_shares(self._shares())

    def depth(self) -> int:
        """Return the number of tasks waiting for placement."""
        return len(self._waiting)

    def waiting(self) -> list[Waiting]:
        """Return the tasks waiting for placement (a copy, in no particular order)."""
        return list(self._waiting.values())

    def add(self, task: Waiting) -> None:
        """Make ``task`` wait for placement."""
        self.add_many([task])

    def add_many(self, tasks: Sequence[Waiting]) -> None:
        """Make ``tasks`` wait for placement (a batch: one queue update, one wake-up)."""
        waiting = self._waiting
        for task in tasks:
            waiting[task.task_id] = task
        self.queue.push_many(
            [(t.task_id, t.contract.tenant, t.contract.priority, t.deadline_at) for t in tasks]
        )
        self._wake.set()

    def remove(self, task_id: str) -> bool:
        """Stop waiting for ``task_id`` (cancelled); False if it was not waiting."""
        task = self._waiting.pop(task_id, None)
        self.pools.release(task_id)
        if task is not None and task in self._parked:
            self._parked.remove(task)
        return task is not None

    def requeue(self, job: Job) -> None:
        """Make a withdrawn, released job (stored back as queued) wait to be placed again."""
        self.metrics.move("placed", "queued")
        self.pools.release(job.task_id)
        job.waiting.state = "queued"  # its row is queued again (it may have waited interrupted)
        self.add(job.waiting)

    def poke(self) -> None:
        """Retry parked tasks: some work finished and freed a device.

        With none parked there is nothing to retry (a task added wakes the scheduler
        itself): no idle pass after every finish.
        """
        if not self._parked:
            return
        parked, self._parked = self._parked, []
        for task in parked:
            if task.task_id in self._waiting:
                self.add(task)
        self._wake.set()

    async def run(self) -> None:
        """Place waiting tasks forever (until cancelled).

        The decisions' write is retried until it lands (a full disk only delays it); if
        placing fails otherwise, the batch waits again and the error ends this run (its
        supervisor restarts it after a back-off): no accepted task is dropped.
        """
        self._wake.set()  # a restart: place what still waits
        while True:
            await self._wake.wait()
            self._wake.clear()
            while batch := self._next_batch():
                self._persisted = set()
                try:
                    await self._place(batch)
                except Exception:
                    for task in batch:  # those whose decision is stored went on: not again
                        if task.task_id in self._waiting and task.task_id not in self._persisted:
                            self.add(task)
                    raise

    def _next_batch(self) -> list[Waiting]:
        """Take up to ``batch_size`` waiting tasks in fair order."""
        batch: list[Waiting] = []
        taken: set[str] = set()
        parked = self._parked
        while len(batch) < self._batch and (ids := self.queue.pop_many(self._batch - len(batch))):
            for task_id in ids:
                task = self._waiting.get(task_id)
                if task is not None and task_id not in taken and (not parked or task not in parked):
                    batch.append(task)
                    taken.add(task_id)
        return batch

    async def _place(self, batch: list[Waiting]) -> None:
        now = time.time()
        contracts = [t.contract_at(now) for t in batch]
        start = time.perf_counter()
        try:
            decisions = tiers.place(
                self.placer, [t.placeable(c) for t, c in zip(batch, contracts, strict=True)]
            )
        except KernelError as err:  # one bad row: place one by one to find it
            await self._isolate(batch, err)
            return
        self.metrics.kernel_seconds.observe(time.perf_counter() - start)
        victims = self._preempt(batch, contracts, decisions)
        entries: list[tuple[str, dict[str, Any], bool]] = []
        keep: set[Waiting] = set()  # parked or handed on: not dispatched here
        refused: list[Waiting] = []  # more than their whole pool asks for: they fail
        offload, pooled, placing = self.offload, bool(self.pools.specs), self.placing
        for i, (task, decision) in enumerate(zip(batch, decisions, strict=True)):
            if not decision.placed and self._transient(decision) and self.jobs.busy():
                self._parked.append(task)  # retried when work finishes
                keep.add(task)
                continue
            # the mesh runs it (here or on a peer) from now
            if offload is not None and offload.take(task, decision):
                keep.add(task)
                self._waiting.pop(task.task_id, None)
                if decision.placed:
                    self.placer.release(decision)
                continue
            if pooled:  # without pools every task is admitted as decided
                verdict, decision = self._admit(task, decision, victims)
                decisions[i] = decision
                if not verdict.admit:  # its pool is full: waits until pooled work finishes
                    keep.add(task)
                    (refused if verdict.never else self._parked).append(task)
                    continue
            task_id = task.task_id
            entries.append((task_id, decision_row(decision), self._emulated(task, decision)))
            placing.add(task_id)
        try:
            await self.store.placed(entries, [job.task_id for job in victims])
        except Exception:
            for task_id, _, _ in entries:
                self.placing.discard(task_id)
                self.pools.release(task_id)
            for task, decision in zip(batch, decisions, strict=True):
                if decision.placed and task not in keep:  # offloaded ones are released
                    self.placer.release(decision)
            raise
        self._persisted.update([task_id for task_id, _, _ in entries])
        done = time.time()
        counts: Counter[tuple[str, bool, str]] = Counter()  # (policy, placed, state before)
        observe, dispatch = self.metrics.placement_seconds.observe, self.jobs.dispatch
        waiting = self._waiting
        for task, decision in zip(batch, decisions, strict=True):
            if keep and task in keep:
                continue
            task_id = task.task_id
            placing.discard(task_id)
            placed = decision.placed
            if waiting.pop(task_id, None) is None:  # cancelled while placing
                if placed:
                    self.placer.release(decision)
                continue
            counts[decision.policy, placed, task.state] += 1
            if not placed:
                continue
            observe(max(done - task.submitted_at, 0.0))
            dispatch(Job(task, decision))
        for (policy, placed, before), n in counts.items():  # one update per kind, not per task
            self.metrics.decided(policy, placed, n)
            self.metrics.move(before, "placed" if placed else "failed", n)
        for job in victims:  # back to waiting, to be placed again
            self.requeue(job)
        for task in refused:  # more than its whole pool: it can never be admitted
            await self.store.fail(task.task_id, f"refused: {self.pools.reason(task.task_id)}")
            self.pools.forget(task.task_id)
            if self._waiting.pop(task.task_id, None) is not None:
                self.metrics.move(task.state, "failed")
        if keep:
            _log.debug("%s tasks parked until running work finishes", len(keep))

    def _admit(
        self, task: Waiting, decision: Decision, victims: list[Job]
    ) -> tuple[Verdict, Decision]:
        """Pass a placed task through its tenant's pool (pools.py); yielded work joins victims."""
        if not self.pools.specs:
            return _ADMITTED, decision
        for job in victims:  # preempted: gives its pool back now, not when requeued
            self.pools.release(job.task_id)
        queued = {job.task_id: job for job in self.jobs.queued()}
        verdict, decision = admit_placed(
            self.pools, self.placer, task.task_id, decision, queued.__contains__
        )
        for task_id in verdict.yield_ids:  # borrowed work that has not started gives way
            job = queued[task_id]
            self.jobs.withdraw(job)
            self.placer.release(job.decision)
            victims.append(job)
        return verdict, decision

    def _preempt(
        self, batch: list[Waiting], contracts: list[TaskContract], decisions: list[Decision]
    ) -> list[Job]:
        """Place urgent unplaced tasks by taking lower-priority queued jobs off their devices.

        The pass's tasks share one ``Budget`` of placement tries (in the batch's fair-queue
        order: higher priority first); those past it stay late, counted as skipped."""
        victims: list[Job] = []
        budget = Budget()
        queued: Queued | None = None
        for i, decision in enumerate(decisions):
            if not wants_preemption(decision):
                continue
            if decision.placed:  # late: try to meet the deadline by preempting first
                self.placer.release(decision)
            if queued is None:  # once a pass, and only when some task is late
                queued = Queued(self.jobs.queued())
            found = preempt_for(self.placer, contracts[i], queued, budget)
            if found is None:
                if decision.placed:  # nothing to preempt: late, on the earliest finish
                    decisions[i] = tiers.place_one(self.placer, contracts[i])
                continue
            decisions[i], displaced = found
            for job in displaced:
                self.jobs.withdraw(job)
            victims += displaced
            self.metrics.preemptions.inc(len(displaced))
            _log.info(
                "task %s (priority %s) preempted %s queued lower-priority tasks",
                batch[i].task_id,
                contracts[i].priority,
                len(displaced),
            )
        if budget.skipped:
            self.metrics.preemptions_skipped.inc(budget.skipped)
            _log.warning(
                "%s urgent tasks not tried for preemption: this pass's %s tries were spent",
                budget.skipped,
                budget.tries,
            )
        return victims

    async def _isolate(self, batch: list[Waiting], err: KernelError) -> None:
        """Fail the task the kernel refused; place the others again."""
        if len(batch) > 1:
            for task in batch:
                await self._place([task])
            return
        task = batch[0]
        _log.warning("task %s refused by the kernel: %s", task.task_id, err)
        await self.store.fail(task.task_id, f"refused by the placement kernel: {err}")
        if self._waiting.pop(task.task_id, None) is not None:
            self.metrics.move(task.state, "failed")

    @staticmethod
    def _transient(decision: Decision) -> bool:
        """Whether some device refused only for a reason that goes away as work finishes."""
        return not TRANSIENT.isdisjoint(decision.rejections())

    def _emulated(self, task: Waiting, decision: Decision) -> bool:
        """Whether the task's run will be emulated (an emulated device, or nothing to run)."""
        if not decision.placed or task.command is not None:
            return False
        index = decision.device_indices[0]
        return bool(self.placer.devices[index].emulated or decision.task.model is None)
