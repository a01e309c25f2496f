"""A task waiting for placement (``Waiting``) and its one builder, ``waiting_from_row``.

The scheduler queues it, the executor's ``Job`` carries it once placed (runners.py), and a
preempted job goes back to waiting as the same ``Waiting``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from edge_agent.placement import TaskContract
from edge_agent.placement.codec import PreparedTask
from edge_agent.placement.codec import with_deadline as with_row_deadline
from edge_agent.tasks.contract import with_deadline


@dataclass(eq=False)
class Waiting:
    """A task waiting for placement (once placed, its ``Job`` carries it)."""

    task_id: str
    contract: TaskContract
    command: tuple[str, ...] | None
    submitted_at: float
    deadline_at: float  # epoch seconds; inf = none
    state: str  # where it waits from: queued or interrupted (from the mesh: queued, offloaded)
    prepared: PreparedTask | None = None  # the contract's kernel row, from the intake

    def contract_at(self, now: float) -> TaskContract:
        """Return the contract with its deadline counted from ``now`` (it was from submission)."""
        if math.isinf(self.deadline_at):
            return self.contract
        return with_deadline(self.contract, max(self.deadline_at - now, 1e-9))

    def placeable(self, contract: TaskContract) -> TaskContract | PreparedTask:
        """Return what to hand the kernel for ``contract`` (``contract_at``'s): the intake's
        row when the task has one (its deadline updated), else the contract to encode."""
        prepared = self.prepared
        if prepared is None or prepared.contract is not self.contract:
            return contract
        return prepared if contract is self.contract else with_row_deadline(prepared, contract)


def waiting_from_row(
    row: dict[str, Any],
    contract: TaskContract | None = None,
    prepared: PreparedTask | None = None,
) -> Waiting:
    """Return the scheduler's view of a stored task row (``contract``: already parsed, and
    ``prepared``: its kernel row, from the intake)."""
    command = row.get("command")
    deadline = row.get("deadline_at")
    return Waiting(
        row["id"],
        TaskContract.from_dict(row["contract"]) if contract is None else contract,
        None if command is None else tuple(command),
        float(row["submitted_at"]),
        math.inf if deadline is None else float(deadline),
        str(row["state"]),
        prepared,
    )
