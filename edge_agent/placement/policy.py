"""Scheduling policies: versioned, validated weightings of the placement objectives."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from edge_agent.errors import PolicyError
from edge_agent.placement.layout import OBJECTIVE_NAMES

SCHEMA = "hetmesh.policy/1"

#: Built-in templates: objective weights (normalized to sum 1 when a policy is built).
TEMPLATES: dict[str, dict[str, float]] = {
    # earliest finish; a light balance term spreads equal finishes (energy or throughput
    # terms here cost 1.2x the mean latency of pure earliest-finish in bench_sim_slo)
    "latency-first": {"latency": 0.9, "balance": 0.1},
    # energy first, with a latency guard: a weaker guard piles work onto the most frugal
    # device whatever its queue (4x the latency of latency-first in docs/simulator.md)
    "energy-first": {"energy": 0.5, "latency": 0.45, "carbon": 0.05},
    "throughput-first": {"throughput": 0.6, "balance": 0.25, "latency": 0.15},
    "balanced": {
        "latency": 0.35,
        "energy": 0.25,
        "throughput": 0.15,
        "balance": 0.15,
        "fragmentation": 0.05,
        "carbon": 0.05,
    },
    # deadlines met first: a task with slack goes to the slowest device that still meets
    # its deadline with a margin, so fast devices stay free for tight ones (the "deadline"
    # objective, see hetmesh_place.c deadline_cost); energy breaks near-ties; without a
    # deadline the same term is the latency. When no device can meet a deadline the
    # kernel places on the earliest finish and the decision says so.
    "slo-first": {"deadline": 0.9999, "energy": 0.0001},
}

#: Queue guard per template: no device whose estimated finish exceeds this many times the
#: earliest finish is chosen (0 = no guard). It keeps an energy-weighted policy from
#: building queues on slow, frugal devices.
QUEUE_GUARDS: dict[str, float] = {"balanced": 1.5, "energy-first": 3.0}

#: Congestion charge per template (0 = off): while a device has queued work it costs this
#: many times its service time more in the latency term (ramped in over a queue of
#: layout.CONGESTION_DEPTH fastest services). Earliest-finish alone uses a slow device only
#: once the fast queues are deeper than its whole service, so near capacity a backlog has
#: no force draining it; charging busy devices for their service time sends work to the
#: idle ones sooner and to the efficient ones among the busy (docs/simulator.md, session 8:
#: lat_first_vs_oracle 1.090 -> 0.972 over 40 seeds at 80% load on edge-mixed). While a
#: (class, device) estimate is unmeasured its service is charged at its pessimistic bound
#: (``explore``'s ``bound_rows``; session 9: 0.972 -> 0.965, seed 1 1.171 -> 1.091). At 1
#: (0.5 until session 12) a fully congested device's second costs a second of latency: an
#: earlier finish must save more than the device time it spends (session 12: 0.9552 ->
#: 0.9137 over 240 seeds, seeds above 1.05 29 -> 17; the other scenarios level or better).
CONGESTION_CHARGES: dict[str, float] = {"latency-first": 1.0}

#: Rules a policy may carry, with their types and defaults.
RULE_DEFAULTS: dict[str, Any] = {
    "offload_margin": 0.2,  # a peer's estimate must beat the local one by this fraction
    "allowed_peers": None,  # list of agent ids that may take offload; None = any trusted peer
    "priority_classes": {"low": -10, "normal": 0, "high": 10, "critical": 100},
    "tenant_shares": {},  # tenant -> weight for fair share
    "pools": {},  # tenant -> resource pool (edge_agent/placement/pools.py)
    "tiers": {},  # task class -> ordered device tiers (edge_agent/placement/tiers.py)
    "queue_guard": None,  # >= 1, or 0 = off; None = the template's (QUEUE_GUARDS)
    "congestion_charge": None,  # >= 0, 0 = off; None = the template's (CONGESTION_CHARGES)
}


@dataclass(frozen=True)
class Policy:
    """A named, versioned set of objective weights (summing to 1) plus rules."""

    name: str
    weights: Mapping[str, float]
    version: int = 1
    rules: Mapping[str, Any] = field(default_factory=lambda: dict(RULE_DEFAULTS))

    def queue_guard(self) -> float:
        """Return the queue guard: the rule when set, else the template's, else 0 (off)."""
        rule = self.rules.get("queue_guard")
        if rule is not None:
            return float(rule)
        return QUEUE_GUARDS.get(self.name, 0.0)

    def congestion_charge(self) -> float:
        """Return the congestion charge: the rule when set, else the template's, else 0."""
        rule = self.rules.get("congestion_charge")
        if rule is not None:
            return float(rule)
        return CONGESTION_CHARGES.get(self.name, 0.0)

    @property
    def orders_by_deadline(self) -> bool:
        """Whether devices run waiting work earliest-deadline-first (a deadline weight > 0)."""
        return float(self.weights.get("deadline", 0.0)) > 0.0

    def weight_vector(self) -> list[float]:
        """Return the weights in the kernel's objective order."""
        return [float(self.weights.get(name, 0.0)) for name in OBJECTIVE_NAMES]

    def to_dict(self) -> dict[str, Any]:
        """Return the policy as a JSON-ready document (the inverse of ``from_dict``)."""
        return {
            "schema": SCHEMA,
            "name": self.name,
            "version": self.version,
            "weights": dict(self.weights),
            "rules": dict(self.rules),
        }

    @classmethod
    def template(cls, name: str) -> Policy:
        """Return the built-in template ``name`` (latency-first, energy-first, ...)."""
        if name not in TEMPLATES:
            raise PolicyError(f"unknown policy template {name!r}; known: {', '.join(TEMPLATES)}")
        return cls(name=name, weights=_normalized(TEMPLATES[name], "weights"))

    @classmethod
    def blend(
        cls,
        parts: Mapping[str, float] | Sequence[tuple[Policy | str, float]],
        name: str | None = None,
    ) -> Policy:
        """Return a policy whose weights are the fraction-weighted mix of ``parts``.

        ``parts`` maps template names to fractions, or lists (policy, fraction) pairs.
        """
        items = list(parts.items()) if isinstance(parts, Mapping) else list(parts)
        if not items:
            raise PolicyError("blend: give at least one (policy, fraction) pair")
        mixed = dict.fromkeys(OBJECTIVE_NAMES, 0.0)
        labels = []
        guards, guarded, total, charge = [], 0.0, 0.0, 0.0
        for part, fraction in items:
            policy = part if isinstance(part, Policy) else cls.template(part)
            if fraction and policy.queue_guard() > 0 and _is_weight(fraction):
                guards.append(policy.queue_guard())
                guarded += float(fraction)
            if not _is_weight(fraction):
                raise PolicyError(f"blend: fraction for {policy.name!r} must be a number >= 0")
            total += float(fraction)
            charge += float(fraction) * policy.congestion_charge()
            for obj in OBJECTIVE_NAMES:
                mixed[obj] += float(fraction) * float(policy.weights.get(obj, 0.0))
            labels.append(f"{policy.name}:{fraction:g}")
        rules = dict(RULE_DEFAULTS)
        # the strictest part's guard, when guarded parts make at least half the blend: a
        # guard of a minor part would overrule the objectives that dominate it (a 70 %
        # fragmentation blend guarded by its 30 % of balanced packed like balanced)
        keep = guards and guarded >= 0.5 * total
        rules["queue_guard"] = min(guards) if keep else 0.0
        rules["congestion_charge"] = charge / total if total > 0 else 0.0  # fraction-weighted
        return cls(
            name=name or "blend(" + ",".join(labels) + ")",
            weights=_normalized(mixed, "blend"),
            rules=rules,
        )

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Policy:
        """Build a policy from a document, raising PolicyError that names the field.

        A document gives ``weights``, or ``template``, or ``blend`` ({template: fraction}).
        """
        if not isinstance(doc, Mapping):
            raise PolicyError("policy: expected an object")
        allowed = {"schema", "name", "version", "weights", "template", "blend", "rules"}
        unknown = sorted(set(doc) - allowed)
        if unknown:
            raise PolicyError(f"policy: unknown field(s) {', '.join(unknown)}")
        if doc.get("schema", SCHEMA) != SCHEMA:
            raise PolicyError(f"policy.schema: expected {SCHEMA!r}, got {doc.get('schema')!r}")
        sources = [k for k in ("weights", "template", "blend") if k in doc]
        if len(sources) != 1:
            raise PolicyError("policy: give exactly one of weights, template or blend")
        if "template" in doc:
            base = cls.template(str(doc["template"]))
        elif "blend" in doc:
            if not isinstance(doc["blend"], Mapping):
                raise PolicyError("policy.blend: expected {template: fraction}")
            base = cls.blend(doc["blend"])
        else:
            base = cls(name="custom", weights=_normalized(doc["weights"], "policy.weights"))
        version = doc.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise PolicyError("policy.version: expected an integer >= 1")
        name = doc.get("name", base.name)
        if not isinstance(name, str) or not name:
            raise PolicyError("policy.name: expected a non-empty string")
        rules = doc.get("rules", {})
        if isinstance(rules, Mapping) and rules.get("queue_guard") is None and base.queue_guard():
            rules = {**rules, "queue_guard": base.queue_guard()}  # a renamed template keeps it
        charge = base.congestion_charge()
        if isinstance(rules, Mapping) and rules.get("congestion_charge") is None and charge:
            rules = {**rules, "congestion_charge": charge}
        return cls(name=name, weights=base.weights, version=version, rules=_rules(rules))


def _is_weight(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0


def _normalized(weights: object, where: str) -> dict[str, float]:
    if not isinstance(weights, Mapping):
        raise PolicyError(f"{where}: expected {{objective: weight}}")
    unknown = sorted(set(weights) - set(OBJECTIVE_NAMES))
    if unknown:
        raise PolicyError(
            f"{where}: unknown objective(s) {', '.join(map(str, unknown))}; "
            f"known: {', '.join(OBJECTIVE_NAMES)}"
        )
    for key, value in weights.items():
        if not _is_weight(value):
            raise PolicyError(f"{where}.{key}: weight must be a finite number >= 0, got {value!r}")
    total = sum(float(v) for v in weights.values())
    if total <= 0:
        raise PolicyError(f"{where}: at least one weight must be > 0")
    # rounded so that documents read 0.8, not 0.7999999999999998
    return {name: round(float(weights.get(name, 0.0)) / total, 12) for name in OBJECTIVE_NAMES}


def _rules(rules: object) -> dict[str, Any]:
    if not isinstance(rules, Mapping):
        raise PolicyError("policy.rules: expected an object")
    unknown = sorted(set(rules) - set(RULE_DEFAULTS))
    if unknown:
        raise PolicyError(f"policy.rules: unknown rule(s) {', '.join(unknown)}")
    merged = dict(RULE_DEFAULTS)
    merged.update(rules)
    margin = merged["offload_margin"]
    if not _is_weight(margin) or margin >= 1:
        raise PolicyError("policy.rules.offload_margin: expected a number in [0, 1)")
    guard = merged["queue_guard"]
    if guard is not None and not (_is_weight(guard) and (guard == 0 or guard >= 1)):
        raise PolicyError("policy.rules.queue_guard: expected 0 (off) or a number >= 1")
    charge = merged["congestion_charge"]
    if charge is not None and not _is_weight(charge):
        raise PolicyError("policy.rules.congestion_charge: expected a finite number >= 0")
    peers = merged["allowed_peers"]
    if peers is not None and not (
        isinstance(peers, list) and all(isinstance(p, str) for p in peers)
    ):
        raise PolicyError("policy.rules.allowed_peers: expected a list of agent ids or null")
    for key in ("priority_classes", "tenant_shares"):
        value = merged[key]
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str)
            and not isinstance(v, bool)
            and isinstance(v, (int, float))
            and math.isfinite(v)
            for k, v in value.items()
        ):
            raise PolicyError(f"policy.rules.{key}: expected {{name: number}}")
    _check_pools_and_tiers(merged)
    return merged


def _check_pools_and_tiers(rules: Mapping[str, Any]) -> None:
    """Raise PolicyError naming the field when the ``pools`` or ``tiers`` rule is invalid."""
    from edge_agent.placement.pools import parse_pools
    from edge_agent.placement.tiers import parse_tiers

    try:
        parse_pools(rules["pools"], "policy.rules.pools")
        parse_tiers(rules["tiers"], "policy.rules.tiers")
    except ValueError as err:
        raise PolicyError(str(err)) from None
