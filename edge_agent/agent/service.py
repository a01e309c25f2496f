"""One running agent: store, fleet, placer, scheduler, executor and metrics, wired together.

``Agent.start`` is the one place the parts are wired: each is given what it calls, through
the small interfaces of roles.py, when it is built (the scheduler its ``Jobs`` dispatcher,
pools and the mesh's ``MeshHandoff``; the executor its ``Jobs`` hooks; the deferrer and the
hub link the mesh's hooks), never a private method and never an attribute set afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edge_agent import __version__
from edge_agent.agent.config import AgentConfig
from edge_agent.agent.core.deferral import Deferrer, deferred_submission
from edge_agent.agent.core.executor import Executor
from edge_agent.agent.core.fleet import Fleet, build_fleet
from edge_agent.agent.core.intake import Intake, NewTask
from edge_agent.agent.core.jobs import Jobs
from edge_agent.agent.core.lifecycle import sources_of
from edge_agent.agent.core.overrun import OverrunWatch
from edge_agent.agent.core.scheduler import Scheduler
from edge_agent.agent.core.store import Store
from edge_agent.agent.core.waiting import waiting_from_row
from edge_agent.agent.hub.devices import DeviceReporter
from edge_agent.agent.hub.link import HubLink
from edge_agent.agent.hub.model_pull import AgentLearning
from edge_agent.agent.sensing.carbon import CarbonFeed, CarbonSource
from edge_agent.agent.sensing.power import Meters
from edge_agent.agent.sensing.telemetry import Sampler
from edge_agent.agent.web.metrics import AgentMetrics
from edge_agent.errors import InvalidInput
from edge_agent.loops import LoopFactory, Supervisor
from edge_agent.placement import Placer, Policy, TaskContract
from edge_agent.placement.pools import Pools, PoolSpec, parse_pools

if TYPE_CHECKING:
    from edge_agent.agent.mesh.link import MeshLink

_log = logging.getLogger(__name__)

#: States a task may be cancelled from.
CANCELLABLE = sources_of("cancelled")


class Agent:
    """The daemon's state and background work; ``start`` then ``stop``, once each."""

    def __init__(self, config: AgentConfig, mesh: MeshLink | None = None) -> None:
        self.config = config
        self.store = Store(config.db_path, config.hub_outbox_limit)
        self.metrics = AgentMetrics()
        self.intake = Intake(
            [config.data_dir / "models", config.model_dir], config.command_allowlist
        )
        self.policy = self._with_shares(Policy.template(config.policy))
        self.started_at = time.monotonic()
        self.link: HubLink | None = None
        self.learning: AgentLearning | None = None  # load forecasts, model pulls, SuperNode
        self.loops = Supervisor()  # every background loop, restarted after an error
        self.jobs = Jobs(self)  # the dispatched jobs: the scheduler's and executor's hooks
        #: what makes the agent ``degraded``: each returns its problems (one line each); other
        #: concerns (the hub link's clock, ...) append theirs
        self.checks: list[Callable[[], list[str]]] = [
            self._storage_problems,
            self.loops.problems,
            self._link_problems,
        ]
        self.mesh = mesh  # the app's when [mesh] is on (agent/mesh/link.py)
        self.carbon = CarbonSource.from_config(config)  # None: the profiles' intensity
        self.fleet: Fleet
        self.placer: Placer
        self.scheduler: Scheduler
        self.executor: Executor
        self.meters: Meters
        self.sampler: Sampler
        self.overrun: OverrunWatch
        self.reporter: DeviceReporter
        self.deferrer: Deferrer

    async def start(self) -> None:
        """Open the store, find the devices, resume waiting work, start the loops."""
        await asyncio.to_thread(self.store.open)
        try:
            from_hub = None
            if self.config.hub_url:  # the last policy the hub handed out, kept across restarts
                from_hub = await self.store.last_policy("hub")
            if from_hub is not None:
                self.policy = self._with_shares(Policy.from_dict(from_hub))
            self.fleet = await asyncio.to_thread(build_fleet, self.config.profile)
            self.placer = Placer(self.fleet.devices, self.policy)
            self.meters = await asyncio.to_thread(Meters.discover, self.fleet.devices)
            self.executor = Executor(
                self.fleet, self.placer, self.jobs, self.config.emulation_jitter
            )
            self.scheduler = Scheduler(
                self.placer,
                self.store,
                self.metrics,
                self.jobs,
                self.config.batch_size,
                Pools.for_devices(self.pool_specs(), self.fleet.devices),
                None if self.mesh is None else self.mesh.offloader,
            )
            forward = None if self.mesh is None else self.mesh.moves.forward_deferred
            self.deferrer = Deferrer(
                self.placer, self.carbon, self.release_deferred, forward=forward
            )
            if self.carbon is not None:
                CarbonFeed(self.carbon, self.placer, self.config.carbon_update_s).update()
            if from_hub is None:
                await self.store.accept_policy(self.policy.to_dict())
            recovered = await self.store.recover()
            await self.deferrer.load(self.store)
            self.metrics.load_counts(await self.store.counts())
        except BaseException:
            await asyncio.to_thread(self.store.close)
            raise
        ex = self.executor
        self.metrics.watch(
            self.scheduler.depth,
            ex.backlog,
            self.fleet.devices,
            ex.busy_s.__getitem__,
            lambda d: ex.current[d] is not None,
            lambda: time.monotonic() - self.started_at,
        )
        self.metrics.watch_pools(lambda: self.scheduler.pools.snapshot())
        for row in recovered:
            try:
                self.scheduler.add(waiting_from_row(row))
            except InvalidInput as err:  # a damaged row must not keep the agent from starting
                self.store.bad_rows += 1
                _log.error("task %s cannot be resumed, its row is damaged: %s", row["id"], err)
        if recovered:
            _log.info("resuming %s waiting tasks", len(recovered))
        ex.start(self.loops.spawn)
        if self.mesh is not None:
            self.mesh.attach(self)  # offers the scheduler its peers; started once listening
        self._spawn(self.scheduler.run, "agent-scheduler")
        self._spawn(self.deferrer.run, "agent-deferrer")
        if self.carbon is not None:
            feed = CarbonFeed(self.carbon, self.placer, self.config.carbon_update_s)
            self._spawn(feed.run, "agent-carbon")
        self.overrun = OverrunWatch(ex, self.placer, self.jobs.queued, self.jobs.requeue)
        self._spawn(self.overrun.run, "agent-overrun-watch")
        self.sampler = Sampler(
            self.fleet,
            self.placer,
            self.store,
            self.meters,
            ex.busy_s.__getitem__,
            self.config.telemetry_interval_s,
        )
        if self.config.telemetry_interval_s > 0:
            self._spawn(self.sampler.run, "agent-telemetry")
        if self.config.hub_url:
            self.reporter = DeviceReporter(self.fleet, self.placer, ex.busy_s.__getitem__)
            labels = {"mode": self.fleet.mode, **self.config.hub_labels}
            # the hub's re-evaluation moves work through the mesh
            moves = None if self.mesh is None else self.mesh.execute_moves
            self.link = HubLink(
                self.config, self.store.outbox, self.hub_report, self.apply_policy, labels, moves
            )
            await self.link.start()
            self.metrics.watch_hub(self.link.status)
            self._spawn(self.link.run, "agent-hub-link")
        devices = [d.id for d in self.fleet.devices]
        forecast = self.config.telemetry_interval_s > 0
        self.learning = AgentLearning(
            self.config.data_dir,
            self.config.db_path,
            devices,
            self.placer,
            self.link,
            forecast,
            personalise=self.config.predictor_personalise,
        )
        await self.learning.start(self._spawn)

    def _spawn(self, factory: LoopFactory, name: str) -> None:
        self.loops.spawn(name, factory)

    async def stop(self) -> None:
        """Stop placing, let running tasks finish (up to the grace time), close the store."""
        if self.mesh is not None:
            await self.mesh.stop()
        await self.loops.stop()
        if self.learning is not None:
            await self.learning.stop()  # SIGTERM the SuperNode
        await self.executor.stop(self.config.shutdown_grace_s)
        await self.store.runs.drain(self.config.shutdown_grace_s)  # recorded before the close
        if self.link is not None:
            await self.link.close()
        await asyncio.to_thread(self.store.close)

    # --- requests -------------------------------------------------------------------
    async def submit(self, tasks: list[NewTask]) -> list[tuple[dict[str, Any], bool]]:
        """Persist ``tasks`` (committed on return) and queue (or, deferrable, hold) the new ones."""
        tasks = [deferred_submission(self.deferrer, t) if t.deferrable else t for t in tasks]
        stored = await self.store.submit(tasks)
        queued = []
        for task, (row, created) in zip(tasks, stored, strict=True):
            if task.deferral is not None:
                self.deferrer.stored(row, created, task.deferral)
                if created:
                    self.metrics.move(None, "deferred")
                continue
            if created:
                queued.append(waiting_from_row(row, task.contract, task.prepared))
        if queued:  # one queue update, wake-up and gauge update for the group
            self.scheduler.add_many(queued)
            self.metrics.move(None, "queued", len(queued))
        return stored

    async def cancel(self, task_id: str) -> tuple[dict[str, Any], str] | None:
        """Cancel a task that has not started; return (row, state before) or None if unknown."""
        # A dispatched job is held back (cancelled in memory) while the store decides: the
        # executor records starts without waiting for their commit, so it must not start a
        # job whose cancel may commit first. A job already in its slot has started, whatever
        # the store reads yet.
        job = self.jobs.get(task_id)
        running = job is not None and self.executor.is_running(job)
        held = job if job is not None and not running and not job.cancelled else None
        states = tuple(s for s in CANCELLABLE if s != "placed") if running else CANCELLABLE
        if held is not None:
            held.cancelled = True
        try:
            found = await self.store.cancel(task_id, states)
        except BaseException:
            if held is not None:
                self.executor.resume(held)
            raise
        cancelled = found is not None and found[1] in states
        if held is not None and not cancelled:
            self.executor.resume(held)
        if found is None:
            return None
        row, before = found
        if running and before == "placed":  # its start is not committed yet
            row, before = {**row, "state": "running"}, "running"
        if cancelled:
            self.metrics.move(before, "cancelled")
            self.deferrer.cancel(task_id)
            self.scheduler.remove(task_id)
            if held is not None:
                self.jobs.forget(task_id)
                self.placer.release(held.decision)
        return row, before

    def problems(self) -> list[str]:
        """Return what degrades the agent now, one line each (empty: ``ok``)."""
        return [line for check in self.checks for line in check()]

    def _link_problems(self) -> list[str]:
        problem = None if self.link is None else self.link.problem()  # our clock vs the hub's
        return [] if problem is None else [problem]

    def _storage_problems(self) -> list[str]:
        db = self.store.db
        found = []
        if db.trouble is not None:
            found.append(f"storage: {db.trouble} ({db.retrying} task updates waiting)")
        if self.store.bad_rows:
            found.append(f"storage: {self.store.bad_rows} damaged task rows skipped (see the log)")
        if db.damaged is not None:
            found.append(f"storage: database {db.damaged}; run `{db.repair}` once stopped")
        return found

    def storage(self) -> dict[str, Any]:
        """Return the database's state for the health document."""
        db = self.store.db
        return {
            "path": str(db.path),
            "writable": db.trouble is None,
            "trouble": db.trouble,
            "retrying_writes": db.retrying,
            "failed_commits": db.failed_commits,
            "bad_rows": self.store.bad_rows,
            "damaged": db.damaged,
        }

    def health(self) -> dict[str, Any]:
        """Return the agent's health document."""
        problems = self.problems()
        return {
            "status": "degraded" if problems else "ok",
            "problems": problems,
            "problem": "; ".join(problems) or None,
            "version": __version__,
            "uptime_s": round(time.monotonic() - self.started_at, 3),
            "schema_version": self.store.db.schema_version,
            "fleet": {
                "mode": self.fleet.mode,
                "devices": len(self.fleet.devices),
                "profile": self.config.profile,
            },
            "policy": f"{self.policy.name}@{self.policy.version}",
            "queue_depth": self.scheduler.depth(),
            "backlog": self.executor.backlog(),
            "overrunning": sorted(self.overrun.flagged),  # devices running far over estimate
            "overrun_replaced": self.overrun.moved,
            "hub": None if self.link is None else self.link.status(),  # None: no hub configured
            "predictor": None if self.learning is None else self.learning.status(),
            "storage": self.storage(),
            "loops": self.loops.status(),
        }

    # --- hub link -------------------------------------------------------------------
    def _with_shares(self, policy: Policy) -> Policy:
        """Return ``policy`` with the configured tenant shares unless it names its own."""
        if policy.rules.get("tenant_shares") or not self.config.tenant_shares:
            return policy
        rules = {**policy.rules, "tenant_shares": dict(self.config.tenant_shares)}
        return dataclasses.replace(policy, rules=rules)

    async def apply_policy(self, doc: dict[str, Any]) -> None:
        """Validate a policy from the hub, keep it (durably first), and place with it."""
        policy = Policy.from_dict(doc)  # PolicyError (an InvalidInput) names the field
        await self.store.accept_policy(policy.to_dict(), source="hub")
        self.policy = self._with_shares(policy)
        self.placer.policy = self.policy
        self.scheduler.pools.set_specs(self.pool_specs())
        self.scheduler.poke()  # larger quotas may admit waiting work

    def pool_specs(self) -> dict[str, PoolSpec]:
        """Return the pools in force: the config's [pools], with the policy's tenants replaced."""
        rule = parse_pools(self.policy.rules.get("pools") or {}, "policy.rules.pools")
        return {**self.config.pools, **rule}

    def hub_report(self) -> dict[str, Any]:
        """Return this agent's heartbeat body: health, live devices, policy in force."""
        problems = self.problems()
        return {
            "status": "degraded" if problems else "ok",
            "problem": "; ".join(problems)[:200] or None,
            "version": __version__,
            "policy": {"name": self.policy.name, "version": self.policy.version},
            "devices": self.reporter.entries(),
            "peers": [] if self.mesh is None else self.mesh.peer_ids(),  # trusted, online
            "queue_depth": self.scheduler.depth(),
            "slo_misses": self.jobs.slo_misses,
            # hub re-evaluation: carbon forecast, deferred and queued work, moves' outcomes
            **self.deferrer.report(self._movable()),
            "mesh_id": None if self.mesh is None else self.mesh.agent_id,
            "peer_links": [] if self.mesh is None else self.mesh.peer_links(),  # state, RTT
            "move_outcomes": [] if self.mesh is None else self.mesh.move_report(),
        }

    def _movable(self) -> list[tuple[str, TaskContract, float]]:
        """Return the waiting tasks another site could run: (id, contract, deadline_at)."""
        waiting = self.scheduler.waiting()
        return [(w.task_id, w.contract, w.deadline_at) for w in waiting if w.command is None]

    def devices(self) -> list[dict[str, Any]]:
        """Return every device with its capability, live state and current task."""
        out = []
        lives = self.placer.lives()
        for device in self.fleet.devices:
            jobs = self.executor.running_jobs(device.id)  # several: one per FPGA slot
            out.append(
                {
                    **device.summary(),
                    "live": lives[device.id],
                    "running_task": jobs[0].task_id if jobs else None,
                    "running_tasks": [job.task_id for job in jobs],
                    "busy_s": round(self.executor.busy_s[device.id], 6),
                }
            )
        return out

    # --- the deferrer's -----------------------------------------------------------
    async def release_deferred(self, task_id: str) -> None:
        """Queue a deferred task whose hour has come."""
        if await self.store.release_deferred(task_id):
            row = await self.store.get(task_id)
            if row is not None:
                self.metrics.move("deferred", "queued")
                self.scheduler.add(waiting_from_row(row))
