"""Running work the mesh node placed on this box, through the agent's store and executor.

Two kinds of work reach ``MeshServe.run_task``:

- peer: a forwarded attempt, already placed on our devices by the node, becomes a task row
  (``origin`` set, idempotency key ``mesh:<origin>:<key>:<attempt>``), is counted against
  its tenant's pool here (refused, never waiting, when the pool is full) and runs on the
  agent's executor like any other: it shows in ``edge-agent tasks`` and survives restarts as
  a record (never resumed here: its origin places it again).
- origin: our own offloaded task whose bids did not beat this box turns ``placed`` again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.agent.core.executor import Job
from edge_agent.agent.core.intake import NewTask
from edge_agent.agent.core.scheduler import decision_row
from edge_agent.agent.core.waiting import waiting_from_row
from edge_agent.errors import HetmeshError
from edge_agent.mesh.accept import MESH_META
from edge_agent.mesh.errors import MeshError
from edge_agent.mesh.offload import LOCAL
from edge_agent.placement import Decision, TaskContract
from edge_agent.placement.pools import usage_of

if TYPE_CHECKING:
    from edge_agent.agent.mesh.link import MeshLink


class TaskFailed(HetmeshError):
    """A task run for the mesh failed on its device; the message is the task's error."""


class MeshServe:
    """Runs the tasks the link's node placed on this box (the node's ``run_task``)."""

    def __init__(self, link: MeshLink) -> None:
        self.link = link

    async def run_task(
        self, contract: TaskContract, decision: Decision, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """Run a task the node placed on this box, through the agent's store and executor."""
        agent = self.link.agent
        meta = payload.get(MESH_META)
        try:
            if isinstance(meta, dict):
                task_id = await self._forwarded_row(contract, decision, meta)
                await self._admit_forwarded(task_id, decision, str(meta.get("origin")))
                placed_from = "queued"
            elif isinstance(payload.get(LOCAL), str):
                task_id = await self._local_row(str(payload[LOCAL]), decision)
                placed_from = "offloaded"
            else:
                raise MeshError("a task for the mesh names neither an origin nor a local task")
        except BaseException:
            agent.placer.release(decision)
            raise
        # it never waited here: no command, no deadline (its origin keeps that), counted from now
        row = {"id": task_id, "submitted_at": time.time(), "state": placed_from}
        job = Job(waiting_from_row(row, decision.task), decision)
        outcome = await agent.jobs.run_job(job)
        if not outcome.ok:
            raise TaskFailed(outcome.error or "the task failed")
        return dict(outcome.result or {})

    async def _admit_forwarded(self, task_id: str, decision: Decision, origin: str) -> None:
        """Count a peer's task against its tenant's pool here; TaskFailed when it is full.

        Work run for a peer never makes this box's own borrowed work yield, and never waits:
        refused, the attempt fails with the pool's reason and its origin places it elsewhere.
        The pool is given back when the task finishes, as for any task (``Jobs.job_finished``).
        """
        agent = self.link.agent
        pools = agent.scheduler.pools
        tenant = decision.task.tenant
        if tenant not in pools.specs:
            return
        need = usage_of(decision, agent.placer.devices)
        verdict = pools.admit(task_id, tenant, need, lambda _task_id: False)
        if verdict.admit:
            return
        pools.forget(task_id)
        error = f"refused for {origin}: {verdict.reason}"
        await agent.store.refuse_forwarded(task_id, error)
        agent.metrics.move("placed", "failed")
        raise TaskFailed(error)

    def _emulated(self, decision: Decision) -> bool:
        device = self.link.agent.placer.devices[decision.device_indices[0]]
        return bool(device.emulated or decision.task.model is None)

    async def _local_row(self, task_id: str, decision: Decision) -> str:
        """Turn our own offloaded task back into a placed one (the bids did not beat us)."""
        agent = self.link.agent
        emulated = self._emulated(decision)
        placed = await agent.store.take_back(
            task_id, decision.device_id, emulated, decision_row(decision)
        )
        if not placed:
            raise MeshError(f"task {task_id} is no longer offloaded (cancelled?)")
        agent.metrics.move("offloaded", "placed")
        return task_id

    async def _forwarded_row(
        self, contract: TaskContract, decision: Decision, meta: dict[str, Any]
    ) -> str:
        """Record a peer's forwarded attempt as a placed task of ours; return its id."""
        agent = self.link.agent
        if contract.model is not None:  # never a path from elsewhere: our model dirs only
            try:
                path = agent.intake.resolve_model(Path(contract.model).stem)
            except HetmeshError:
                if not self._emulated(decision):
                    raise
            else:
                decision.task = contract = dataclasses.replace(contract, model=str(path))
        key = f"mesh:{meta.get('origin')}:{meta.get('key')}:{meta.get('attempt')}"
        digest = hashlib.sha256(key.encode()).hexdigest()
        [(row, created)] = await agent.store.submit([NewTask(contract, digest, key)])
        if not created:
            raise MeshError(f"forwarded attempt {key} is already recorded here")
        agent.metrics.move(None, "queued")
        emulated = self._emulated(decision)
        origin = str(meta.get("origin"))
        placed = decision_row(decision)
        await agent.store.place_forwarded(row["id"], decision.device_id, emulated, origin, placed)
        agent.metrics.move("queued", "placed")
        return str(row["id"])
