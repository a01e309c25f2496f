"""Capability summaries: what a peer can run and how soon, carried on signed answers.

A node answers every signed hello and heartbeat with its summary: its device kinds and
model formats, the work queued on its devices, and its current estimate (seconds, queue
included) for each task class it has seen recently (its own tasks, bids it was asked for,
attempts forwarded to it). The origin keeps the last summary of each trusted peer with the
time it *received* it (our clock, never the peer's): a summary older than the freshness
bound is not used. mDNS TXT records are a discovery hint only and never feed a summary.

Summaries are bounded (``MAX_CLASSES`` classes, short names) and checked field by field;
a hostile or broken one is refused with the reason (``SummaryError``) and the peer's last
good summary stays until it ages out.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edge_agent.resources.vocab import ModelFormat, names_of
from edge_agent.tasks.contract import NAME_MAX

if TYPE_CHECKING:
    from edge_agent.placement import Placer, TaskContract

#: Wire version of the summary document.
VERSION = 1
#: Most task classes one summary carries (the most recently seen ones).
MAX_CLASSES = 32
#: Longest task class, device kind or format name accepted (a contract's name bound).
MAX_NAME = NAME_MAX
#: Most device kinds / model formats listed.
MAX_NAMES = 16
#: Largest number of seconds accepted (queue or estimate): a day.
MAX_SECONDS = 86_400.0


class SummaryError(ValueError):
    """A peer's summary that is refused; ``str(err)`` says which field and why."""


@dataclass(frozen=True, slots=True)
class Summary:
    """A trusted peer's capabilities and estimates, as received at ``received`` (monotonic)."""

    kinds: tuple[str, ...]
    formats: tuple[str, ...]
    queued_s: float
    classes: Mapping[str, float]  # task class -> estimate there (s), queue included
    received: float

    def fresh(self, now: float, max_age_s: float) -> bool:
        """Return True when received no more than ``max_age_s`` ago."""
        return now - self.received <= max_age_s

    def estimate_s(self, task_class: str) -> float | None:
        """Return the peer's estimate for ``task_class``, or None when it has none."""
        return self.classes.get(task_class)


class RecentContracts:
    """The last ``MAX_CLASSES`` task classes seen, each with its latest contract."""

    def __init__(self, cap: int = MAX_CLASSES) -> None:
        self.cap = cap
        self._by_class: OrderedDict[str, TaskContract] = OrderedDict()

    def note(self, contract: TaskContract) -> None:
        """Remember ``contract`` as its class's latest (oldest class dropped past the cap)."""
        name = contract.task_class
        self._by_class[name] = contract
        self._by_class.move_to_end(name)
        while len(self._by_class) > self.cap:
            self._by_class.popitem(last=False)

    def contracts(self) -> list[TaskContract]:
        """Return the remembered contracts, oldest class first."""
        return list(self._by_class.values())


def device_names(placer: Placer) -> tuple[list[str], list[str]]:
    """Return the sorted device kinds and model formats of ``placer``'s devices."""
    kinds = sorted({d.kind.name.lower() for d in placer.devices})
    masks = [d.capability.format_mask for d in placer.devices]
    return kinds, sorted({f for m in masks for f in names_of(ModelFormat, m)})


def build_summary(placer: Placer, recent: RecentContracts) -> dict[str, Any]:
    """Return this node's summary document (estimates from ``preview``: nothing committed)."""
    kinds, formats = device_names(placer)
    classes: dict[str, float] = {}
    for contract in recent.contracts():
        decision = placer.preview(contract)
        if decision.placed and math.isfinite(decision.latency_s):
            classes[contract.task_class] = min(decision.latency_s, MAX_SECONDS)
    queued = sum(live["queued_s"] for live in placer.lives().values())
    return {
        "v": VERSION,
        "kinds": kinds[:MAX_NAMES],
        "formats": formats[:MAX_NAMES],
        "queued_s": min(float(queued), MAX_SECONDS),
        "classes": classes,
    }


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SummaryError(f"{where}: expected a number of seconds, got {type(value).__name__}")
    out = float(value)
    if not (math.isfinite(out) and 0.0 <= out <= MAX_SECONDS):
        raise SummaryError(f"{where}: expected 0..{MAX_SECONDS:g} s, got {out!r:.40}")
    return out


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_NAMES:
        raise SummaryError(f"{where}: expected a list of at most {MAX_NAMES} names")
    for name in value:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or not name.isprintable():
            raise SummaryError(f"{where}: expected printable names of 1..{MAX_NAME} characters")
    return tuple(value)


def parse_summary(doc: Any, received: float) -> Summary:
    """Return the Summary in a peer's ``doc``; SummaryError saying what is wrong otherwise."""
    if not isinstance(doc, dict):
        raise SummaryError(f"summary: expected an object, got {type(doc).__name__}")
    if doc.get("v") != VERSION:
        raise SummaryError(f"summary.v: expected {VERSION}, got {doc.get('v')!r:.20}")
    classes = doc.get("classes")
    if not isinstance(classes, dict):
        raise SummaryError("summary.classes: expected an object of class -> seconds")
    if len(classes) > MAX_CLASSES:
        raise SummaryError(f"summary.classes: {len(classes)} classes, at most {MAX_CLASSES}")
    table: dict[str, float] = {}
    for name, value in classes.items():
        if not 0 < len(name) <= MAX_NAME or not name.isprintable():
            raise SummaryError(
                f"summary.classes: expected printable class names of 1..{MAX_NAME} characters"
            )
        table[name] = _seconds(value, f"summary.classes[{name!r}]")
    return Summary(
        kinds=_names(doc.get("kinds"), "summary.kinds"),
        formats=_names(doc.get("formats"), "summary.formats"),
        queued_s=_seconds(doc.get("queued_s"), "summary.queued_s"),
        classes=table,
        received=received,
    )
