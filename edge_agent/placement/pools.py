"""Per-tenant resource pools: quotas, what each admitted task holds, and admission verdicts.

A pool belongs to one tenant and caps what that tenant's admitted work (placed on a device,
queued there or running, until it finishes) may hold at once:

- ``cpu_cores``: a task placed on a CPU device holds one core per CPU device it occupies
  (so this is the most tasks of the tenant on CPU devices at once);
- ``memory_mb``: a task holds its contract's memory need (``TaskContract.memory_needed``)
  on every device it occupies, in MiB;
- ``accelerator_share``: a fraction of the accelerators' time: the tenant's admitted work on
  accelerator devices (GPU, NPU, FPGA, DSP), in estimated device-seconds, stays within
  ``share x accelerators x HORIZON_S``. A tenant that holds no accelerator time may always
  start one task, so a task longer than the whole share is not starved.

A task whose pool is full waits (stays queued, with the reason) unless its pool has
``borrow = true`` and another pool has that much idle quota: it is then admitted on that
pool's quota, as borrowed work. When the owner's own work needs the quota back, borrowed
work that has not started yields (goes back to waiting); borrowed work already running
keeps its quota until it finishes (the agent never stops a running task). Tenants with no
pool are not limited. ``Pools`` is the one place of these rules: the agent's scheduler and
the simulator (``cloud_hub/simulator/pools.py``) each hold an instance (their admission
state) and call it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edge_agent.placement.decision import Decision
from edge_agent.placement.placer import Placer
from edge_agent.placement.tiers import place_within
from edge_agent.resources.device import Device
from edge_agent.resources.vocab import DeviceKind

MIB = 2**20
#: Seconds of accelerator time that ``accelerator_share`` divides (per accelerator).
HORIZON_S = 1.0
#: Device kinds whose tasks count against ``cpu_cores`` (every other kind is an accelerator).
CPU_KINDS = frozenset({DeviceKind.CPU_X86, DeviceKind.CPU_ARM})
POOL_KEYS = ("cpu_cores", "memory_mb", "accelerator_share", "borrow")


@dataclass(frozen=True)
class PoolSpec:
    """One tenant's quota (inf / 1.0: not limited on that resource)."""

    cpu_cores: float = math.inf
    memory_mb: float = math.inf
    accelerator_share: float = 1.0
    borrow: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return the spec as written in a config or policy (unlimited figures left out)."""
        doc: dict[str, Any] = {"accelerator_share": self.accelerator_share, "borrow": self.borrow}
        for key in ("cpu_cores", "memory_mb"):
            if math.isfinite(getattr(self, key)):
                doc[key] = getattr(self, key)
        return doc


def parse_pools(value: object, where: str) -> dict[str, PoolSpec]:
    """Return ``{tenant: PoolSpec}`` from a config / policy value; ValueError naming the key.

    Each tenant maps to ``{cpu_cores = N >= 0, memory_mb = N >= 0, accelerator_share =
    0..1, borrow = true|false}``, every key optional.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected {{tenant: {{cpu_cores, memory_mb, ...}}}}")
    specs: dict[str, PoolSpec] = {}
    for tenant, doc in value.items():
        at = f"{where}.{tenant}"
        if not isinstance(tenant, str) or not tenant:
            raise ValueError(f"{where}: tenant names must be non-empty strings, got {tenant!r}")
        if not isinstance(doc, Mapping):
            raise ValueError(f"{at}: expected a table of {', '.join(POOL_KEYS)}, got {doc!r}")
        unknown = sorted(set(doc) - set(POOL_KEYS))
        if unknown:
            names, known = ", ".join(map(str, unknown)), ", ".join(POOL_KEYS)
            raise ValueError(f"{at}: unknown key(s) {names}; known: {known}")
        figures: dict[str, float] = {}
        for key, top in (("cpu_cores", math.inf), ("memory_mb", math.inf)):
            if key in doc:
                figures[key] = _number(doc[key], f"{at}.{key}", top, "a number >= 0")
        share = _number(
            doc.get("accelerator_share", 1.0),
            f"{at}.accelerator_share",
            1.0,
            "a fraction in [0, 1]",
        )
        borrow = doc.get("borrow", False)
        if not isinstance(borrow, bool):
            raise ValueError(f"{at}.borrow: expected true or false, got {borrow!r}")
        specs[tenant] = PoolSpec(accelerator_share=share, borrow=borrow, **figures)
    return specs


def _number(value: object, where: str, top: float, expected: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and 0 <= value <= top)
    ):
        raise ValueError(f"{where}: expected {expected}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Usage:
    """What a task holds, or a pool's quota / total: cores, MiB, accelerator-seconds."""

    cores: float = 0.0
    memory_mb: float = 0.0
    accel_s: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.cores + other.cores,
            self.memory_mb + other.memory_mb,
            self.accel_s + other.accel_s,
        )

    def __sub__(self, other: Usage) -> Usage:
        return Usage(
            self.cores - other.cores,
            self.memory_mb - other.memory_mb,
            self.accel_s - other.accel_s,
        )

    def to_dict(self) -> dict[str, float | None]:
        """Return the figures JSON-ready (None: unlimited)."""
        return {
            "cpu_cores": _finite(self.cores),
            "memory_mb": _finite(self.memory_mb),
            "accelerator_s": _finite(self.accel_s),
        }


def _finite(x: float) -> float | None:
    return round(x, 6) if math.isfinite(x) else None


def usage_of(decision: Decision, devices: Sequence[Device]) -> Usage:
    """Return what a placed decision holds (its devices are indexed in ``devices``)."""
    cores, accel = 0.0, 0.0
    for index, charge in zip(decision.device_indices, decision.charges, strict=True):
        if devices[index].kind in CPU_KINDS:
            cores += 1.0
        else:
            accel += charge
    memory = decision.task.memory_needed() * len(decision.device_indices) / MIB
    return Usage(cores, memory, accel)


@dataclass(frozen=True)
class Holding:
    """An admitted task's usage, and the pool it borrowed from (None: its own)."""

    task_id: str
    tenant: str
    usage: Usage
    lender: str | None


@dataclass(frozen=True)
class Verdict:
    """The answer to one admission: admit (own quota or borrowed), or wait and why."""

    admit: bool
    lender: str | None = None  # admitted on this pool's idle quota
    yield_ids: tuple[str, ...] = ()  # borrowed, not-started work that must give the quota back
    reason: str = ""  # why it waits (or can never be admitted)
    never: bool = False  # the task needs more than its whole pool: it can never fit


class Pools:
    """Quotas of the pooled tenants and every admitted task's holding."""

    def __init__(self, specs: Mapping[str, PoolSpec], accelerators: int) -> None:
        self.specs: dict[str, PoolSpec] = dict(specs)
        self.accelerators = accelerators
        self._held: dict[str, Holding] = {}
        self.waiting: dict[str, tuple[str, str]] = {}  # task id -> (pool, reason)

    @classmethod
    def for_devices(cls, specs: Mapping[str, PoolSpec], devices: Iterable[Device]) -> Pools:
        """Return pools over a fleet (its accelerators are the non-CPU devices)."""
        return cls(specs, sum(1 for d in devices if d.kind not in CPU_KINDS))

    def set_specs(self, specs: Mapping[str, PoolSpec]) -> None:
        """Use new quotas from now on (admitted work keeps what it holds)."""
        self.specs = dict(specs)

    def quota(self, tenant: str) -> Usage:
        """Return the pool's quota (inf everywhere for a tenant with no pool)."""
        spec = self.specs.get(tenant)
        if spec is None:
            return Usage(math.inf, math.inf, math.inf)
        accel = spec.accelerator_share * self.accelerators * HORIZON_S
        return Usage(spec.cpu_cores, spec.memory_mb, accel)

    def charged(self, pool: str) -> Usage:
        """Return what counts against ``pool``: its tenant's own work plus what it lent."""
        total = Usage()
        for h in self._held.values():
            if (h.lender or h.tenant) == pool:
                total += h.usage
        return total

    def holding(self, task_id: str) -> Holding | None:
        """Return what ``task_id`` holds, if admitted."""
        return self._held.get(task_id)

    # --- admission -------------------------------------------------------------------
    def decide(self, tenant: str, need: Usage, yieldable: Callable[[str], bool]) -> Verdict:
        """Return whether a task of ``tenant`` needing ``need`` may be admitted now.

        ``yieldable(task_id)`` tells whether admitted work has not started yet (only such
        borrowed work can give its quota back). Changes nothing; ``admit`` commits.
        """
        spec = self.specs.get(tenant)
        if spec is None:
            return Verdict(True)
        quota = self.quota(tenant)
        over = self._over(Usage(), need, quota)
        if over is not None and over != "accel":
            return Verdict(False, reason=self._reason(tenant, over, need, never=True), never=True)
        charged = self.charged(tenant)
        over = self._over(charged, need, quota)
        if over is None:
            return Verdict(True)
        back = self._reclaim(tenant, charged, need, quota, yieldable)
        if back is not None:
            return Verdict(True, yield_ids=back)
        if spec.borrow:
            for lender in sorted(self.specs):  # the first pool with that much idle quota
                idle = self._over(self.charged(lender), need, self.quota(lender)) is None
                if lender != tenant and idle:
                    return Verdict(True, lender=lender)
        return Verdict(False, reason=self._reason(tenant, over, need))

    def admit(
        self, task_id: str, tenant: str, need: Usage, yieldable: Callable[[str], bool]
    ) -> Verdict:
        """Decide, and when admitted: release the yielded work's holdings, hold ``need``."""
        verdict = self.decide(tenant, need, yieldable)
        if verdict.admit:
            for victim in verdict.yield_ids:
                self.release(victim)
            self._held[task_id] = Holding(task_id, tenant, need, verdict.lender)
            self.waiting.pop(task_id, None)
        else:
            self.waiting[task_id] = (tenant, verdict.reason)
        return verdict

    def release(self, task_id: str) -> bool:
        """Give back what ``task_id`` held (finished, cancelled, withdrawn); False if nothing."""
        self.waiting.pop(task_id, None)
        return self._held.pop(task_id, None) is not None

    def forget(self, task_id: str) -> None:
        """Drop a waiting task's reason (it was cancelled)."""
        self.waiting.pop(task_id, None)

    def reason(self, task_id: str) -> str | None:
        """Return why ``task_id`` waits for its pool, or None."""
        found = self.waiting.get(task_id)
        return None if found is None else found[1]

    def _over(self, held: Usage, need: Usage, quota: Usage) -> str | None:
        """Return the first resource ``held + need`` exceeds (cores, memory, accel) or None."""
        total = held + need
        eps = 1e-9
        if need.cores > 0 and total.cores > quota.cores + eps:
            return "cores"
        if need.memory_mb > 0 and total.memory_mb > quota.memory_mb + eps:
            return "memory"
        # one task may always start on an idle share, however long it is
        if need.accel_s > 0 and total.accel_s > quota.accel_s + eps and held.accel_s > 0:
            return "accel"
        if need.accel_s > 0 and quota.accel_s <= 0:
            return "accel"
        return None

    def _reclaim(
        self,
        pool: str,
        charged: Usage,
        need: Usage,
        quota: Usage,
        yieldable: Callable[[str], bool],
    ) -> tuple[str, ...] | None:
        """Return borrowed, not-started work whose yielding makes ``need`` fit, newest first."""
        lent = [h for h in self._held.values() if h.lender == pool and yieldable(h.task_id)]
        taken: list[str] = []
        for h in reversed(lent):  # admitted last, yields first
            charged -= h.usage
            taken.append(h.task_id)
            if self._over(charged, need, quota) is None:
                return tuple(taken)
        return None

    def _reason(self, pool: str, over: str, need: Usage, never: bool = False) -> str:
        quota, held = self.quota(pool), self.charged(pool)
        if over == "cores":
            figure = f"{held.cores:g}/{quota.cores:g} cores"
        elif over == "memory":
            figure = f"{held.memory_mb:.0f}/{quota.memory_mb:.0f} MB, needs {need.memory_mb:.0f}"
        else:
            figure = f"{held.accel_s:.3g}/{quota.accel_s:.3g} accelerator-s"
        if never:
            if over == "cores":
                return f"needs {need.cores:g} cores; pool {pool} has {quota.cores:g} in all"
            return f"needs {need.memory_mb:.0f} MB; pool {pool} has {quota.memory_mb:.0f} in all"
        lent = sum(1 for h in self._held.values() if h.lender == pool)
        extra = f"; {lent} borrowed running tasks hold part of it" if lent else ""
        return f"waiting: pool {pool} full ({figure}){extra}"

    # --- reporting -------------------------------------------------------------------
    def snapshot(self) -> list[dict[str, Any]]:
        """Return each pool's quota, own use, borrowed, lent and waiting tasks (JSON-ready)."""
        out = []
        for pool in sorted(self.specs):
            own, borrowed, lent = Usage(), Usage(), Usage()
            for h in self._held.values():
                if h.tenant == pool and h.lender is None:
                    own += h.usage
                elif h.tenant == pool:
                    borrowed += h.usage
                elif h.lender == pool:
                    lent += h.usage
            out.append(
                {
                    "pool": pool,
                    "borrow": self.specs[pool].borrow,
                    "accelerator_share": self.specs[pool].accelerator_share,
                    "quota": self.quota(pool).to_dict(),
                    "used": own.to_dict(),
                    "borrowed": borrowed.to_dict(),
                    "lent": lent.to_dict(),
                    "tasks": sum(1 for h in self._held.values() if h.tenant == pool),
                    "waiting": sum(1 for t, _ in self.waiting.values() if t == pool),
                }
            )
        return out


def admit_placed(
    pools: Pools,
    placer: Placer,
    task_id: str,
    decision: Decision,
    yieldable: Callable[[str], bool],
) -> tuple[Verdict, Decision]:
    """Admit a placed task through its tenant's pool; return (verdict, decision in force).

    When the pool has no accelerator time left but CPU room, the task is placed again on
    the CPU devices only. A task the pool cannot take has its devices released in
    ``placer``; the caller keeps it waiting (or fails it when the verdict says ``never``)
    and withdraws the verdict's ``yield_ids`` from their devices.
    """
    tenant = decision.task.tenant
    if not decision.placed or tenant not in pools.specs:
        pools.forget(task_id)  # no longer waiting on its pool (if it was)
        return Verdict(True), decision
    need = usage_of(decision, placer.devices)
    verdict = pools.admit(task_id, tenant, need, yieldable)
    if verdict.admit:
        return verdict, decision
    placer.release(decision)
    cpus = [i for i, d in enumerate(placer.devices) if d.kind in CPU_KINDS]
    if need.accel_s > 0 and cpus and pools.decide(tenant, Usage(1.0), yieldable).admit:
        again = place_within(placer, decision.task, cpus)
        if again.placed:
            retry = pools.admit(task_id, tenant, usage_of(again, placer.devices), yieldable)
            if retry.admit:
                return retry, again
            placer.release(again)
        pools.waiting[task_id] = (tenant, verdict.reason)
    return verdict, decision
