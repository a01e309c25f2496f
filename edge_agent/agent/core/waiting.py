"""A task waiting for placement (``Waiting``) and its one builder, ``waiting_from_row``.

The scheduler queues it, the executor's ``Job`` carries it once placed (runners.py), and a
preempted job goes back to waiting as the same ``Waiting``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from edge_agent.placement import TaskContract


@dataclass(eq=False)
class Waiting:
    """A task waiting for placement (once placed, its ``Job`` carries it)."""

    task_id: str
    contract: TaskContract
    command: tuple[str, ...] | None
    submitted_at: float
    deadline_at: float  # epoch seconds; inf = none
    state: str  # where it waits from: queued or interrupted (from the mesh: queued, offloaded)

    def contract_at(self, now: float) -> TaskContract:
        """Return the contract with its deadline counted from ``now`` (it was from submission)."""
        if math.isinf(self.deadline_at):
            return self.contract
        left = max(self.deadline_at - now, 1e-9)
        req = dataclasses.replace(self.contract.requirements, deadline_s=left)
        return dataclasses.replace(self.contract, requirements=req)


def waiting_from_row(row: dict[str, Any], contract: TaskContract | None = None) -> Waiting:
    """Return the scheduler's view of a stored task row (``contract``: already parsed)."""
    command = row.get("command")
    deadline = row.get("deadline_at")
    return Waiting(
        row["id"],
        TaskContract.from_dict(row["contract"]) if contract is None else contract,
        None if command is None else tuple(command),
        float(row["submitted_at"]),
        math.inf if deadline is None else float(deadline),
        str(row["state"]),
    )
