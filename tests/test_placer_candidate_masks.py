"""Kept candidate masks (``Placer._restrict``): reusing a tuple/frozenset candidate set
decides exactly as passing a fresh list of the same ids every call."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from edge_agent.errors import InvalidInput
from edge_agent.placement import Placer, Policy, devices_from_profiles
from edge_agent.placement import layout as L
from edge_agent.placement.placer import _MASKS_KEPT
from edge_agent.resources.device import Device
from edge_agent.resources.profiles import list_profiles
from edge_agent.resources.vocab import Health
from edge_agent.tasks.contract import Requirements, Semantics, TaskContract


def fleet64() -> list[Device]:
    names = list_profiles()
    return devices_from_profiles([names[i % len(names)] for i in range(40)])[:64]


def tasks() -> list[TaskContract]:
    return [
        TaskContract(
            Semantics(gflops=g, param_bytes=2e7, precision=prec),
            Requirements(model_format=None),
            task_class=f"m{g}:{prec}",
        )
        for g in (0.6, 8.2, 16.5)
        for prec in ("int8", "fp16", "fp32")
    ]


def test_kept_sets_decide_as_fresh_lists(backend: str) -> None:
    """16 tuples and 4 frozensets cycled (kept masks copied in) vs new lists each call."""
    devices = fleet64()
    kept = Placer(devices, Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]
    fresh = Placer(devices, Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]
    rng = random.Random(5)
    ids = kept.device_ids
    sets: list[tuple[str, ...] | frozenset[str]] = [tuple(rng.sample(ids, 16)) for _ in range(16)]
    sets += [frozenset(rng.sample(ids, 8)) for _ in range(4)]
    work = tasks()
    for i in range(600):
        chosen = sets[(i * 7) % len(sets)]  # a different set most calls, sometimes the same
        a = kept.place_one(work[i % len(work)], candidates=chosen)
        b = fresh.place_one(work[i % len(work)], candidates=list(chosen))
        assert (a.device_ids, a.latency_s, a.reasons) == (b.device_ids, b.latency_s, b.reasons)
        assert a.placed and set(a.device_ids) <= set(chosen)
        if i % 3 == 0:  # some finish, the others stay queued
            kept.release(a)
            fresh.release(b)
    assert all(kept._slots[id(s)][0] is s for s in sets)  # every set kept
    assert not any(isinstance(m[0], list) for m in fresh._slots.values())  # lists never


def test_a_new_set_at_a_dead_sets_address_is_not_mistaken(backend: str) -> None:
    """A kept set's id may be reused by a new tuple once it is freed: the new one's flags count."""
    p = Placer(fleet64(), Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]
    ids = p.device_ids
    for k in range(2 * _MASKS_KEPT + 10):  # also past the cap (kept masks dropped, rebuilt)
        only = (ids[k % len(ids)],)  # freed after each turn: CPython reuses the address
        d = p.place_one(tasks()[0], candidates=only)
        assert d.device_ids == only
        p.release(d)
    assert len(p._slots) <= _MASKS_KEPT


def test_no_untried_candidate_skips_the_optimistic_pass(backend: str) -> None:
    """A due exploration pass whose candidates are all tried runs the usual pass only (the
    optimistic pass's row is left alone) and backs off (as a fruitless pass does)."""
    p = Placer(fleet64()[:3], Policy.template("latency-first"), backend=backend)  # type: ignore[arg-type]
    only = (p.device_ids[0],)
    work = tasks()[0]
    first = p.place_one(work, candidates=only)
    p.feedback(first, latency_s=first.base_s)  # the pair (class, device 0) is now tried
    cls = first.task_class_index
    every = p.exploration._every[cls]
    outcomes: list[int] = []
    explored = p._explored  # every exploration call's outcome passes here (one call or two)

    def counted(contract: Any, cls: int, outcome: int) -> Any:
        outcomes.append(outcome)
        return explored(contract, cls, outcome)

    p._explored = counted  # type: ignore[method-assign]
    p._ws.out[L.EX_ROW_OPTIMISTIC] = 7.0  # a sentinel: the optimistic pass would write it
    for _ in range(every):
        d = p.place_one(work, candidates=only)
        assert d.device_ids == only and not d.probe
        p.release(d)
    assert p.exploration.stats.optimistic_passes == 1
    assert outcomes == [L.EX_NONE_AMONG_CANDIDATES]
    assert (p._ws.out[L.EX_ROW_OPTIMISTIC] == 7.0).all()  # the usual pass only
    assert p.exploration._every[cls] == 2 * every  # backed off, as a fruitless pass does


def _same(a: Any, b: Any) -> None:
    assert (a.device_ids, a.latency_s, a.reasons, a.probe) == (
        b.device_ids,
        b.latency_s,
        b.reasons,
        b.probe,
    )


def test_kept_sets_follow_each_fleets_own_device_table(backend: str) -> None:
    """The same tuple objects given to Placers over different device tables (devices renamed,
    removed, added, reordered) flag each table's own devices, and stay right when a table's
    workspace is rebuilt (new classes) or its live state changes (a device goes offline)."""
    devices = fleet64()
    ids = [d.id for d in devices]
    renamed = [replace(d, id=f"{d.id}-r") if i % 5 == 0 else d for i, d in enumerate(devices)]
    others = [
        devices[::-1],  # reordered: each id at another index
        devices[8:],  # removed: the first eight
        renamed,  # one in five renamed
        devices + [replace(d, id=f"{d.id}-new") for d in devices[:4]],  # added
    ]
    rng = random.Random(9)
    known = [i for i in ids[8:] if ids.index(i) % 5 != 0]  # in every table
    sets = [tuple(rng.sample(known, 12)) for _ in range(6)] + [frozenset(rng.sample(known, 5))]
    policy = Policy.template("latency-first")
    kept = [Placer(t, policy, backend=backend) for t in [devices, *others]]  # type: ignore[arg-type]
    fresh = [Placer(t, policy, backend=backend) for t in [devices, *others]]  # type: ignore[arg-type]
    work = tasks()
    for i in range(400):
        chosen = sets[i % len(sets)]
        if i == 200:  # a device of every set goes offline in one table only
            for p in (kept[1], fresh[1]):
                for s in sets:
                    p.update_live(next(iter(s)), health=Health.OFFLINE)
        task = work[i % len(work)]
        if i >= 300:  # new classes: the workspaces and books outgrow their first size
            task = replace(task, task_class=f"late{i % 40}")
        for k, (a_placer, b_placer) in enumerate(zip(kept, fresh, strict=True)):
            a = a_placer.place_one(task, candidates=chosen)
            b = b_placer.place_one(task, candidates=list(chosen))
            _same(a, b)
            assert set(a.device_ids) <= set(chosen)
            if k == 1 and i >= 200:
                assert not set(a.device_ids) & {next(iter(s)) for s in sets}
            if i % 2:
                a_placer.release(a)
                b_placer.release(b)
    assert kept[0]._ws.n_classes > 16 and len(kept[0]._classes) > 40  # rebuilt on the way


def test_an_id_another_table_lacks_is_refused_and_counts_nothing(backend: str) -> None:
    """A set kept by one Placer names a device another's table renamed: InvalidInput there,
    with nothing counted or charged, and the first Placer still decides with it."""
    devices = fleet64()
    first = Placer(devices, backend=backend)  # type: ignore[arg-type]
    second = Placer([replace(devices[0], id="renamed"), *devices[1:]], backend=backend)  # type: ignore[arg-type]
    chosen = (devices[0].id, devices[1].id)
    assert first.place_one(tasks()[0], candidates=chosen).placed
    before = second._ws.devices.copy()
    with pytest.raises(InvalidInput, match="unknown device"):
        second.place_one(tasks()[0], candidates=chosen)
    assert second.exploration.stats.decisions == 0 and (second._ws.devices == before).all()
    assert first.place_one(tasks()[0], candidates=chosen).device_ids[0] in chosen
