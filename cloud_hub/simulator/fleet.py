"""Fleet files: boxes (a firmware profile each), their sites, links and slow devices."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloud_hub.simulator.carbon import Intensity, parse_site
from cloud_hub.simulator.errors import SimulationInputError
from cloud_hub.simulator.inline import InlineDevice, parse_inline
from edge_agent.errors import InvalidInput
from edge_agent.resources.device import Device
from edge_agent.resources.profiles import FirmwareProfile, load_profile

SCHEMA = "hetmesh.sim.fleet/1"
_BOX_KEYS = {
    "id",
    "profile",
    "devices",
    "count",
    "carbon_g_per_kwh",
    "carbon_series",
    "links_ms",
    "slowdown",
}
_TOP_KEYS = {"schema", "name", "note", "default_link_ms", "link_gbit_s", "boxes"}


@dataclass(frozen=True)
class SimDevice:
    """A fleet device as the simulator sees it: where it is and how far off its datasheet."""

    index: int
    box: int  # index of the box instance
    local_id: str  # the device's id within its profile ("npu")
    slowdown: float  # true service time / published figure (1 = as published)
    device: Device  # as seen from its own box (no link cost)
    profile: FirmwareProfile | None  # None for a device described inline
    rates: Mapping[str, float] = dataclasses.field(default_factory=dict)  # model -> units/s


@dataclass(frozen=True)
class Fleet:
    """Box instances, their devices, and the one-way link latency between any two boxes."""

    name: str
    boxes: tuple[str, ...]  # box instance ids ("shop-a-1" for copy 1 of group "shop-a")
    groups: tuple[str, ...]  # the fleet-file box id of each instance
    devices: tuple[SimDevice, ...]
    link_s: tuple[tuple[float, ...], ...]  # [box][box], 0 on the diagonal
    link_gbs: float  # link bandwidth, GB/s
    sites: tuple[Intensity, ...] = ()  # grid carbon intensity per box instance

    def site(self, box: int) -> Intensity:
        """Return box ``box``'s carbon intensity over time (its constant when none given)."""
        if self.sites:
            return self.sites[box]
        return Intensity(self.devices_of(box)[0].device.carbon_g_per_kwh)

    def devices_of(self, box: int) -> list[SimDevice]:
        """Return the devices of box instance ``box``."""
        return [sd for sd in self.devices if sd.box == box]

    def transfer_s(self, origin: int, dev: int, input_bytes: float) -> float:
        """Return the time to ship a task's input from ``origin`` to device ``dev``."""
        link = self.link_s[origin][self.devices[dev].box]
        if link <= 0.0:
            return 0.0
        return link + (input_bytes / (self.link_gbs * 1e9) if self.link_gbs > 0 else 0.0)

    def devices_from(self, origin: int) -> list[Device]:
        """Return every device as box ``origin``'s agent sees it (peers carry link costs)."""
        out = []
        for sd in self.devices:
            link = self.link_s[origin][sd.box]
            cap = dataclasses.replace(
                sd.device.capability,
                link_latency_s=link,
                link_bw_gbs=self.link_gbs if link > 0 else 0.0,
            )
            out.append(dataclasses.replace(sd.device, capability=cap))
        return out


def load_fleet(path: str | Path) -> Fleet:
    """Load and validate a fleet file; SimulationInputError names the file and field."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise SimulationInputError(where, "(file)", f"cannot be read: {err.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SimulationInputError(
            where, "(file)", f"not valid JSON: {err.msg}", err.lineno
        ) from None
    return parse_fleet(doc, where)


def _num(
    doc: Mapping[str, Any], key: str, where: str, field: str, default: float, low: float = 0.0
) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SimulationInputError(where, field, f"expected a finite number, got {value!r}")
    if value < low:
        raise SimulationInputError(where, field, f"must be >= {low:g}, got {value!r}")
    return float(value)


def _object(value: object, where: str, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SimulationInputError(where, field, f"expected an object, got {value!r}")
    unknown = sorted(set(value) - (_BOX_KEYS if field.startswith("boxes") else _TOP_KEYS))
    if unknown:
        raise SimulationInputError(where, field, f"unknown key(s) {', '.join(unknown)}")
    return value


def parse_fleet(doc: object, where: str = "<fleet>") -> Fleet:
    """Build a Fleet from a parsed fleet document (see docs/simulator.md)."""
    top = _object(doc, where, "(top level)")
    if top.get("schema", SCHEMA) != SCHEMA:
        raise SimulationInputError(where, "schema", f"expected {SCHEMA!r}, got {top['schema']!r}")
    default_link = _num(top, "default_link_ms", where, "default_link_ms", 2.0) / 1e3
    gbs = _num(top, "link_gbit_s", where, "link_gbit_s", 1.0) / 8.0
    raw_boxes = top.get("boxes")
    if not isinstance(raw_boxes, list) or not raw_boxes:
        raise SimulationInputError(where, "boxes", "expected a non-empty list of boxes")
    groups: list[Mapping[str, Any]] = []
    names: list[str] = []
    instances: list[tuple[str, int]] = []  # (instance id, group index)
    devices: list[SimDevice] = []
    sites: list[Intensity] = []
    for g, raw in enumerate(raw_boxes):
        field = f"boxes[{g}]"
        box = _object(raw, where, field)
        gid = box.get("id")
        if not isinstance(gid, str) or not gid or "/" in gid or gid in names:
            raise SimulationInputError(
                where, f"{field}.id", f"expected a unique name without '/', got {gid!r}"
            )
        count = box.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise SimulationInputError(
                where, f"{field}.count", f"expected an integer 1..1000, got {count!r}"
            )
        specs = _box_devices(box, gid, where, field)
        carbon = _num(box, "carbon_g_per_kwh", where, f"{field}.carbon_g_per_kwh", 0.0)
        site = parse_site(box, carbon, where, field)
        carbon = site.at_hour(0)
        slow = box.get("slowdown", {})
        if not isinstance(slow, Mapping):
            raise SimulationInputError(where, f"{field}.slowdown", "expected {device id: factor}")
        local_ids = [i.local_id for i in specs[1]]
        for key in slow:
            if key not in local_ids:
                raise SimulationInputError(
                    where, f"{field}.slowdown.{key}", f"the box has devices {', '.join(local_ids)}"
                )
            _num(slow, key, where, f"{field}.slowdown.{key}", 1.0, low=1e-3)
        names.append(gid)
        groups.append(box)
        for k in range(count):
            iid = gid if count == 1 else f"{gid}-{k + 1}"
            b = len(instances)
            instances.append((iid, g))
            sites.append(site)
            profile, mine = specs if iid == gid else _box_devices(box, iid, where, field)
            for spec in mine:
                devices.append(
                    SimDevice(
                        len(devices),
                        b,
                        spec.local_id,
                        float(slow.get(spec.local_id, 1.0)),
                        dataclasses.replace(spec.device, carbon_g_per_kwh=carbon),
                        profile,
                        spec.rates,
                    )
                )
    links = _links(groups, names, where, default_link)
    link_s = tuple(
        tuple(0.0 if a == b else links[ga][gb] for b, (_, gb) in enumerate(instances))
        for a, (_, ga) in enumerate(instances)
    )
    name = top.get("name", Path(where).stem)
    boxes = tuple(i for i, _ in instances)
    return Fleet(
        str(name),
        boxes,
        tuple(names[g] for _, g in instances),
        tuple(devices),
        link_s,
        gbs,
        tuple(sites),
    )


def _links(
    groups: list[Mapping[str, Any]], names: list[str], where: str, default: float
) -> list[list[float]]:
    n = len(groups)
    table = [[default] * n for _ in range(n)]
    given: dict[tuple[int, int], float] = {}
    for g, box in enumerate(groups):
        raw = box.get("links_ms", {})
        field = f"boxes[{g}].links_ms"
        if not isinstance(raw, Mapping):
            raise SimulationInputError(where, field, "expected {box id: one-way latency in ms}")
        for other, _ in raw.items():
            if other not in names or other == names[g]:
                raise SimulationInputError(
                    where, f"{field}.{other}", "not another box of this fleet"
                )
            o = names.index(other)
            ms = _num(raw, other, where, f"{field}.{other}", 0.0) / 1e3
            pair = (min(g, o), max(g, o))
            if pair in given and given[pair] != ms:
                raise SimulationInputError(
                    where, f"{field}.{other}", "conflicts with the latency given on the other box"
                )
            given[pair] = ms
            table[g][o] = table[o][g] = ms
    return table


def _box_devices(
    box: Mapping[str, Any], iid: str, where: str, field: str
) -> tuple[FirmwareProfile | None, list[InlineDevice]]:
    """Return a box instance's profile (None when inline) and its devices, ids under ``iid``."""
    if ("profile" in box) == ("devices" in box):
        raise SimulationInputError(where, field, "give exactly one of profile or devices")
    if "devices" in box:
        raw = box["devices"]
        if not isinstance(raw, list) or not raw:
            raise SimulationInputError(where, f"{field}.devices", "expected a non-empty list")
        out = [
            d
            for i, r in enumerate(raw)
            for d in parse_inline(r, iid, where, f"{field}.devices[{i}]")
        ]
        ids = [d.local_id for d in out]
        if len(set(ids)) != len(ids):
            raise SimulationInputError(where, f"{field}.devices", "device ids must be unique")
        return None, out
    try:
        profile = load_profile(str(box.get("profile")))
    except InvalidInput as err:
        raise SimulationInputError(where, f"{field}.profile", str(err)) from None
    devs = profile.devices(emulated=True, id_prefix=iid)
    return profile, [InlineDevice(d.id.split("/", 1)[1], d, {}) for d in devs]
