"""A placement decision: where a task goes, the estimate behind it, and why not elsewhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edge_agent.placement import layout as L
from edge_agent.tasks.contract import TaskContract


@dataclass(slots=True, repr=False, eq=False)
class Decision:
    """The kernel's verdict for one task, with everything needed to explain it.

    Treat it as read-only (it is not frozen only because frozen construction is slower,
    and a decision is built on the hot path).
    """

    task: TaskContract
    placed: bool
    device_ids: tuple[str, ...]
    latency_s: float  # estimated completion latency: queue wait + reconfig + link + service
    service_s: float  # estimated time on the device
    energy_j: float
    carbon_g: float
    score: float  # weighted relative regret, 0 = best on every objective
    runner_up: str | None
    runner_up_score: float
    components: tuple[float, ...]  # weighted score terms, in OBJECTIVE_NAMES order
    reject_counts: tuple[int, ...]  # devices rejected, by reason code
    policy: str  # "name@version"
    backend: str
    device_order: tuple[str, ...]  # the fleet's device ids when decided (for why_not)
    reasons: bytes | None = None  # reason code per device in device_order
    device_indices: tuple[int, ...] = ()
    charges: tuple[float, ...] = ()  # queue seconds charged to each chosen device
    task_class_index: int = 0

    def __repr__(self) -> str:
        return f"<Decision {self.task.task_class} -> {self.summary()}>"

    @property
    def device_id(self) -> str | None:
        """Return the (first) chosen device, or None when the task could not be placed."""
        return self.device_ids[0] if self.device_ids else None

    def rejections(self) -> dict[str, int]:
        """Return how many devices each hard constraint rejected."""
        return {
            L.REASON_NAMES[code]: count
            for code, count in enumerate(self.reject_counts)
            if count and code != L.R_OK
        }

    def why_not(self, device_id: str) -> str:
        """Return why ``device_id`` was not chosen (its failed constraint, or its score)."""
        if device_id in self.device_ids:
            return f"{device_id} was chosen"
        if device_id not in self.device_order:
            return f"{device_id} is not a device of this fleet"
        if self.reasons is None:
            return "per-device reasons were not kept for this decision"
        code = self.reasons[self.device_order.index(device_id)]
        if code != L.R_OK:
            return f"{device_id} rejected: {L.REASON_NAMES[code]}"
        if device_id == self.runner_up:
            return (
                f"{device_id} was feasible and the runner-up: score "
                f"{self.runner_up_score:.4g} vs {self.score:.4g} for {self.device_id}"
            )
        return f"{device_id} was feasible but scored worse than {self.device_id}"

    def summary(self) -> str:
        """Return a one-line human explanation ("why here")."""
        if not self.placed:
            why = ", ".join(f"{n} {r}" for r, n in self.rejections().items()) or "no devices"
            return f"not placed: no feasible device ({why})"
        main = max(range(L.N_OBJECTIVES), key=lambda o: self.components[o])
        extra = f"; runner-up {self.runner_up}" if self.runner_up else ""
        return (
            f"{', '.join(self.device_ids)}: est {self.latency_s * 1e3:.3f} ms, "
            f"{self.energy_j * 1e3:.3f} mJ, score {self.score:.3f} "
            f"(largest term {L.OBJECTIVE_NAMES[main]}){extra}"
        )

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
            "summary": self.summary(),
        }
