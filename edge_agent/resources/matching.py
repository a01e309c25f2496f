"""Firmware-profile match rules: the host facts they read and how they are evaluated.

A profile's match block is ``{"priority": int, "any": [rule, ...]}``. A rule is an object
whose keys must all hold (AND); a profile matches when any rule does (OR); among matching
profiles the highest priority wins, ties going to the lower profile id. Keys:

- ``arch``: equals platform.machine() (x86_64, aarch64, ...)
- ``cpu_model_regex``: re.search on the /proc/cpuinfo model ("model name", "Model", "Hardware")
- ``dt_compatible``: one of the NUL-separated entries of /proc/device-tree/compatible
- ``device_node``: glob over /dev entries two levels deep ("/dev/rknpu*", "/dev/accel*")
- ``pci_id`` / ``usb_id``: "vvvv:dddd" lower-case hex, from /sys/bus/{pci,usb}/devices
- ``sysfs_path``: glob that must match an existing path ("/sys/class/fpga_manager/fpga*")
"""

from __future__ import annotations

import fnmatch
import os
import platform
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from edge_agent.errors import ProfileError
from edge_agent.resources.backends import bus_ids, glob_host, host_path
from edge_agent.resources.backends.cpu import cpu_model
from edge_agent.resources.profile_schema import MATCH_RULE_KEYS


@dataclass(frozen=True)
class HostFacts:
    """What match rules are evaluated against, collected once per probe."""

    arch: str
    cpu_model: str | None
    dt_compatible: tuple[str, ...] = ()
    device_nodes: tuple[str, ...] = ()
    pci_ids: tuple[str, ...] = ()
    usb_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """Return these facts as a JSON-ready dict."""
        return {key: list(v) if isinstance(v, tuple) else v for key, v in asdict(self).items()}


def _dev_nodes(root: Path) -> tuple[str, ...]:
    """Return the /dev entries one and two levels deep, as "/dev/x" and "/dev/x/y"."""
    nodes: list[str] = []
    try:
        with os.scandir(host_path(root, "/dev")) as top:
            for entry in top:
                nodes.append(f"/dev/{entry.name}")
                if entry.is_dir(follow_symlinks=False):
                    try:
                        nodes.extend(f"/dev/{entry.name}/{sub}" for sub in os.listdir(entry.path))
                    except OSError:
                        continue
    except OSError:
        return ()
    return tuple(sorted(nodes))


def _dt_compatible(root: Path) -> tuple[str, ...]:
    """Return the device-tree ``compatible`` strings (empty on machines without one)."""
    try:
        raw = host_path(root, "/proc/device-tree/compatible").read_bytes()
    except OSError:
        return ()
    return tuple(s for s in raw.decode("utf-8", errors="replace").split("\0") if s)


def collect_host_facts(root: Path = Path("/")) -> HostFacts:
    """Return the host facts read from ``root`` (arch always from platform.machine())."""
    return HostFacts(
        arch=platform.machine(),
        cpu_model=cpu_model(root),
        dt_compatible=_dt_compatible(root),
        device_nodes=_dev_nodes(root),
        pci_ids=tuple(bus_ids(root, "pci")),
        usb_ids=tuple(bus_ids(root, "usb")),
    )


def _holds(key: str, value: str, facts: HostFacts, root: Path) -> str | None:
    """Return evidence that ``key: value`` holds on this host, or None if it does not."""
    if key == "arch":
        return f"arch={facts.arch}" if facts.arch == value else None
    if key == "cpu_model_regex":
        found = re.search(value, facts.cpu_model or "")
        return f"cpu model {facts.cpu_model!r} ~ /{value}/" if found else None
    if key == "dt_compatible":
        return f"dt compatible {value!r}" if value in facts.dt_compatible else None
    if key == "device_node":
        nodes = [n for n in facts.device_nodes if fnmatch.fnmatchcase(n, value)]
        return f"device node {nodes[0]}" if nodes else None
    if key in ("pci_id", "usb_id"):
        ids = facts.pci_ids if key == "pci_id" else facts.usb_ids
        return f"{key.replace('_', ' ')} {value}" if value.lower() in ids else None
    paths = glob_host(root, value)  # sysfs_path
    return f"path {paths[0]}" if paths else None


def check_rule(rule: Mapping[str, object], facts: HostFacts, root: Path) -> list[str] | None:
    """Return evidence for each key if every key of ``rule`` holds, else None.

    Raises ValueError for an empty rule, an unknown key, a non-string value or a bad regex.
    """
    if not rule:
        raise ValueError("a rule needs at least one key")
    evidence: list[str] = []
    for key in sorted(rule):
        value = rule[key]
        if key not in MATCH_RULE_KEYS:
            raise ValueError(f"unknown rule key {key!r}; use one of {sorted(MATCH_RULE_KEYS)}")
        if not isinstance(value, str) or not value:
            raise ValueError(f"rule key {key!r} needs a non-empty string")
        try:
            found = _holds(key, value, facts, root)
        except re.error as err:
            raise ValueError(f"bad regular expression {value!r}: {err}") from None
        if found is None:
            return None
        evidence.append(found)
    return evidence


@dataclass(frozen=True)
class ProfileMatch:
    """Which profile matched this host, with which rule, and on what evidence."""

    profile_id: str
    priority: int
    rule_index: int
    rule: Mapping[str, object]
    evidence: tuple[str, ...]

    @property
    def board_specific(self) -> bool:
        """Whether the rule names more than the CPU architecture (a generic fallback)."""
        return any(key != "arch" for key in self.rule)

    @property
    def reason(self) -> str:
        """Return a one-line explanation, e.g. "rule 0: dt compatible 'rockchip,rk3588'"."""
        return f"rule {self.rule_index}: " + ", ".join(self.evidence)


def match_profile(
    profile_id: str,
    priority: int,
    rules: Sequence[Mapping[str, object]],
    facts: HostFacts,
    root: Path,
) -> ProfileMatch | None:
    """Return how the first matching rule of a profile matches this host, or None.

    Raises ProfileError naming the profile and the rule when a rule is malformed.
    """
    for index, rule in enumerate(rules):
        try:
            evidence = check_rule(rule, facts, root)
        except ValueError as err:
            raise ProfileError(profile_id, f"match.any[{index}]", str(err)) from None
        if evidence is not None:
            return ProfileMatch(profile_id, priority, index, dict(rule), tuple(evidence))
    return None


def best_match(
    profiles: Iterable[tuple[str, int, Sequence[Mapping[str, object]]]],
    facts: HostFacts,
    root: Path,
) -> ProfileMatch | None:
    """Return the highest-priority match among (profile id, priority, rules), or None."""
    matches = [m for p in profiles if (m := match_profile(*p, facts, root)) is not None]
    if not matches:
        return None
    return min(matches, key=lambda m: (-m.priority, m.profile_id))
