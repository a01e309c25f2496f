"""Pure-Python twin of the C placement kernel: the fallback and the test oracle.

It takes the same flat rows as the C kernel (``native/hetmesh_place.c``) and performs the same
arithmetic in the same order, so both give identical choices and estimates.
"""

from __future__ import annotations

import math
from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass

from edge_agent.placement import layout as L
from edge_agent.placement.reference_checks import Bounds, check_inputs


def _n_slots(dev: Sequence[float]) -> int:
    """Return a device's slot count: its configurations share the fabric, 1/slots each."""
    return int(dev[L.DEV_SLOTS]) if dev[L.DEV_SLOTS] > 1.0 else 1


def _config_loaded(dev: Sequence[float], cfg: float) -> bool:
    return any(dev[L.SLOT_COLS[k]] == cfg for k in range(_n_slots(dev)))


def _load_config(devices: MutableSequence[float], base: int, cfg: float) -> None:
    """Load ``cfg`` into the first empty slot, else the round-robin victim."""
    s = _n_slots(devices[base : base + L.DEV_FIELDS])
    for k in range(s):
        if devices[base + L.SLOT_COLS[k]] == 0.0:
            devices[base + L.SLOT_COLS[k]] = cfg
            return
    victim = int(devices[base + L.DEV_SLOT_NEXT]) % s
    devices[base + L.SLOT_COLS[victim]] = cfg
    devices[base + L.DEV_SLOT_NEXT] = float((victim + 1) % s)


def _peak_slot(prec: int) -> int:
    """Return the scratch column of the inverse peak used for precision ``prec``."""
    if prec == 0 or prec == 3:  # int8, int4
        return L.SCR_INV_PE_INT8
    if prec == 1 or prec == 4:  # fp16, bf16
        return L.SCR_INV_PE_FP16
    return L.SCR_INV_PE_FP32


def _device_constants(dev: Sequence[float], scr: MutableSequence[float]) -> None:
    """Fill the per-batch constants of one device's scratch row."""
    for slot, col in (
        (L.SCR_INV_PE_INT8, L.DEV_PEAK_INT8),
        (L.SCR_INV_PE_FP16, L.DEV_PEAK_FP16),
        (L.SCR_INV_PE_FP32, L.DEV_PEAK_FP32),
    ):
        pe = dev[col] * dev[L.DEV_EFFICIENCY]
        scr[slot] = 1.0 / pe if pe > 0.0 else 0.0
    bw = dev[L.DEV_MEM_BW]
    scr[L.SCR_INV_BW] = 1.0 / (bw * 1e9) if bw > 0.0 else 0.0
    u = max(dev[L.DEV_UTIL], dev[L.DEV_PRED_UTIL])
    if u > L.UTIL_CAP:
        u = L.UTIL_CAP
    scr[L.SCR_U] = u
    scr[L.SCR_INV_AVAIL] = 1.0 / (1.0 - u)
    mem_total = dev[L.DEV_MEM_TOTAL]
    scr[L.SCR_INV_MEM] = 1.0 / mem_total if mem_total > 0.0 else 0.0


def _task_inv_peak(dev: Sequence[float], scr: Sequence[float], task: Sequence[float]) -> float:
    """Return the inverse peak ``task`` runs at on ``dev`` (the fastest it allows), or 0."""
    prec = int(task[L.TASK_PREC])
    want = int(task[L.TASK_PREC_MASK])
    if want == 0:
        return scr[_peak_slot(prec)] if (int(dev[L.DEV_PREC_MASK]) >> prec) & 1 else 0.0
    have = int(dev[L.DEV_PREC_MASK]) & (want | (1 << prec))
    best = 0.0
    for p in range(L.PREC_BITS):
        if not (have >> p) & 1:
            continue
        v = scr[_peak_slot(p)]
        if v > 0.0 and (best == 0.0 or v < best):
            best = v
    return best


def _static_reason(
    dev: Sequence[float], scr: Sequence[float], task: Sequence[float]
) -> tuple[int, float]:
    """Return (the first hard constraint ``dev`` fails that needs no estimate, inverse peak)."""
    kind = int(dev[L.DEV_KIND])
    kinds = int(task[L.TASK_KINDS_MASK])
    fmt = int(task[L.TASK_FORMAT])
    if dev[L.DEV_HEALTH] == 2.0:
        return L.R_OFFLINE, 0.0
    if kinds != 0 and not (kinds >> kind) & 1:
        return L.R_KIND, 0.0
    inv_pe = _task_inv_peak(dev, scr, task)
    if inv_pe == 0.0:
        return L.R_PRECISION, inv_pe
    if int(task[L.TASK_OPS_MASK]) & ~int(dev[L.DEV_OPS_MASK]):
        return L.R_OPERATORS, inv_pe
    if fmt != 0 and not fmt & int(dev[L.DEV_FORMAT_MASK]):
        return L.R_FORMAT, inv_pe
    if task[L.TASK_CONFIG] != 0.0 and kind != L.KIND_FPGA:
        return L.R_CONFIG, inv_pe
    if task[L.TASK_MEM] > dev[L.DEV_MEM_FREE]:
        return L.R_MEMORY, inv_pe
    return L.R_OK, inv_pe


def _deadline_cost(deadline: float, latency: float, service_eff: float) -> float:
    """Return the deadline objective (see hetmesh_place.c: deadline_cost)."""
    if not deadline > 0.0:
        return latency
    target = deadline * (1.0 - L.DEADLINE_MARGIN)
    if latency <= target:
        return (
            1.0
            + L.SLACK_PREF * (1.0 - service_eff / target)
            + (1.0 - L.SLACK_PREF) * (latency / target)
        )
    if latency <= deadline:
        return 2.0 + (latency - target) / (deadline - target)
    return 3.0 + latency / deadline


def _estimate(
    dev: Sequence[float],
    task: Sequence[float],
    work: float,
    moved: float,
    corr: float,
    inv_pe: float,
    scr: MutableSequence[float],
) -> int:
    """Fill one device's scratch row with its costs for ``task``; return its reason code."""
    compute_s = work * inv_pe
    mem_s = moved * scr[L.SCR_INV_BW]
    roof = (mem_s if mem_s > compute_s else compute_s) + dev[L.DEV_DISPATCH_S]
    # a slot holds 1/slots of the fabric: slower by that factor, and the slots drain the
    # device's queue side by side; with one slot both factors are exactly 1
    slots = float(_n_slots(dev))
    base = roof * slots
    service = base * corr
    service_eff = service * scr[L.SCR_INV_AVAIL]
    cfg = task[L.TASK_CONFIG]
    reconf = dev[L.DEV_RECONF_S] if cfg != 0.0 and not _config_loaded(dev, cfg) else 0.0
    link = dev[L.DEV_LINK_S]
    if link > 0.0 and dev[L.DEV_LINK_BW] > 0.0:
        link = link + task[L.TASK_IN_BYTES] / (dev[L.DEV_LINK_BW] * 1e9)
    queue = dev[L.DEV_QUEUE_S] / slots
    latency = (link if link > queue else queue) + reconf + service_eff  # transfer overlaps wait
    energy = dev[L.DEV_MAX_W] / slots * (service + reconf)
    if queue == 0.0 and dev[L.DEV_MEM_FREE] >= dev[L.DEV_MEM_TOTAL]:
        frag = 1.0  # placing here breaks an untouched device
    else:
        frag = (dev[L.DEV_MEM_FREE] - task[L.TASK_MEM]) * scr[L.SCR_INV_MEM]
    scr[L.OBJ_LATENCY] = latency
    scr[L.OBJ_ENERGY] = energy
    scr[L.OBJ_THROUGHPUT] = service_eff + reconf
    scr[L.OBJ_BALANCE] = scr[L.SCR_U] + (queue + service_eff) / L.BALANCE_HORIZON_S
    scr[L.OBJ_FRAGMENTATION] = frag
    scr[L.OBJ_CARBON] = energy / 3.6e6 * dev[L.DEV_CARBON]
    deadline = task[L.TASK_DEADLINE_S]
    scr[L.OBJ_DEADLINE] = _deadline_cost(deadline, latency, service_eff)
    scr[L.SCR_SERVICE_EFF] = service_eff
    scr[L.SCR_RECONF] = reconf
    scr[L.SCR_BASE] = base * scr[L.SCR_INV_AVAIL]
    max_lat = task[L.TASK_MAX_LAT_S]
    if max_lat > 0.0 and latency > max_lat:
        return L.R_LATENCY
    if deadline > 0.0 and latency > deadline:
        return L.R_DEADLINE
    return L.R_OK


@dataclass(frozen=True)
class PassOptions:
    """One pass's options (the kernel's ``pass_opts``): optimistic corrections (divided by
    ``divisors`` except where ``busy``), one device only (``only`` >= 0), whether to charge,
    and the probe of clamped factors (``reset`` = (lo, hi): a factor >= hi or <= lo is 1)."""

    divisors: Sequence[float] | None = None
    busy: Sequence[int] | None = None
    only: int = -1
    commit: bool = True
    reset: tuple[float, float] | None = None


PLAIN = PassOptions()


def _dividing(opt: PassOptions, d: int) -> Sequence[float] | None:
    """The pass's divisors when it divides device ``d``'s estimate by its optimism (the
    kernel's ``divides``: a divisor, ``d`` not busy), else None."""
    if opt.divisors is None or (opt.busy is not None and opt.busy[d]):
        return None
    return opt.divisors


def device_scratch(devices: Sequence[float], n_dev: int) -> list[list[float]]:
    """Return the scratch rows with each device's per-batch constants filled in."""
    scratch = [[0.0] * L.SCR_FIELDS for _ in range(n_dev)]
    for d in range(n_dev):
        _device_constants(devices[d * L.DEV_FIELDS : (d + 1) * L.DEV_FIELDS], scratch[d])
    return scratch


def place_batch(
    devices: MutableSequence[float],
    n_dev: int,
    tasks: Sequence[float],
    n_task: int,
    weights: Sequence[float],
    corrections: Sequence[float],
    n_classes: int,
    out: MutableSequence[float],
    reasons: MutableSequence[int] | None = None,
    allowed: Sequence[int] | None = None,
    opt: PassOptions = PLAIN,
    bounds: Bounds = None,
) -> tuple[int, int]:
    """Place ``n_task`` task rows over ``n_dev`` device rows in order; return (status, bad row).

    Mutates the live columns of ``devices`` (queue, free memory, loaded config) as tasks
    are committed, and fills ``out`` (one OUT_FIELDS row per task) and ``reasons`` exactly
    as ``hm_place_batch`` does; ``allowed`` (nonzero per candidate device, None = all)
    is the ``hm_call.allowed`` restriction, ``opt`` a pass's options (one-task callers),
    ``bounds`` a bound call's pessimistic bounds (``hm_call.bound_rows``; None: none).
    Nothing is changed when the status is not OK.
    """
    status, bad = check_inputs(
        devices, n_dev, tasks, n_task, weights, corrections, n_classes, out, bounds
    )
    if status != L.ST_OK:
        return status, bad
    scratch = device_scratch(devices, n_dev)
    for t in range(n_task):
        task = tasks[t * L.TASK_FIELDS : (t + 1) * L.TASK_FIELDS]
        row = place_task(
            devices, n_dev, task, t, weights, corrections, scratch, reasons, allowed, opt, bounds
        )
        out[t * L.OUT_FIELDS : (t + 1) * L.OUT_FIELDS] = row
    return L.ST_OK, -1


def place_task(
    devices: MutableSequence[float],
    n_dev: int,
    task: Sequence[float],
    t: int,
    weights: Sequence[float],
    corrections: Sequence[float],
    scratch: list[list[float]],
    reasons: MutableSequence[int] | None,
    allowed: Sequence[int] | None,
    opt: PassOptions = PLAIN,
    bounds: Bounds = None,
) -> list[float]:
    """Estimate, score, choose and commit one task; return its output row."""
    cls = int(task[L.TASK_CLASS])
    bound = bounds[cls] if bounds is not None and cls < len(bounds) else None
    k = int(task[L.TASK_COUNT])
    work = task[L.TASK_GFLOP] / task[L.TASK_COUNT]
    moved = task[L.TASK_BYTES] / task[L.TASK_COUNT]
    row = [0.0] * L.OUT_FIELDS
    for j in range(L.MAX_GANG):
        row[L.OUT_ASSIGNED + j] = float(L.NO_DEVICE)
    row[L.OUT_RUNNER_UP] = float(L.NO_DEVICE)
    mins = [math.inf] * L.N_OBJECTIVES
    n_ok = n_late = 0
    for d in range(n_dev):
        dev = devices[d * L.DEV_FIELDS : (d + 1) * L.DEV_FIELDS]
        scr = scratch[d]
        if (allowed is not None and not allowed[d]) or (opt.only >= 0 and d != opt.only):
            reason, inv_pe = L.R_EXCLUDED, 0.0
        else:
            reason, inv_pe = _static_reason(dev, scr, task)
        if reason == L.R_OK:
            corr = corrections[cls * n_dev + d]
            divisors = _dividing(opt, d)
            if divisors is not None:
                corr = corr / divisors[d]
            if opt.reset is not None and (corr >= opt.reset[1] or corr <= opt.reset[0]):
                corr = 1.0
            reason = _estimate(dev, task, work, moved, corr, inv_pe, scr)
        scr[L.SCR_REASON] = float(reason)
        if reasons is not None:
            reasons[t * n_dev + d] = reason
        if reason != L.R_OK:
            row[L.OUT_COUNTS + reason] += 1.0
            n_late += reason == L.R_DEADLINE
            continue
        n_ok += 1
        for o in range(L.N_OBJECTIVES):
            if scr[o] < mins[o]:
                mins[o] = scr[o]
    guard_s = congestion = 0.0
    if n_ok < k:
        # no k devices meet the deadline: the earliest finishes, unless told to drop
        if n_ok + n_late < k or int(task[L.TASK_FLAGS]) & L.TF_DROP_IF_LATE:
            return row
        row[L.OUT_FLAGS] = float(L.OF_LATE)
        mins = [math.inf] * L.N_OBJECTIVES
        inv = [0.0] * L.N_OBJECTIVES
        for d in range(n_dev):
            scr = scratch[d]
            if scr[L.SCR_REASON] == float(L.R_DEADLINE):
                scr[L.SCR_REASON] = 0.0
            if scr[L.SCR_REASON] != 0.0:
                continue
            for o in range(L.N_OBJECTIVES):
                if scr[o] < mins[o]:
                    mins[o] = scr[o]
        inv[L.OBJ_LATENCY] = 1.0 / (mins[L.OBJ_LATENCY] + L.NORM_FLOOR[L.OBJ_LATENCY])
    else:
        inv = [weights[o] / (mins[o] + L.NORM_FLOOR[o]) for o in range(L.N_OBJECTIVES)]
        if k == 1 and weights[L.W_QUEUE_GUARD] > 0.0:
            guard_s = weights[L.W_QUEUE_GUARD] * mins[L.OBJ_LATENCY]
        congestion = weights[L.W_CONGESTION] * inv[L.OBJ_LATENCY]
    chosen, top = _rank(devices, n_dev, scratch, inv, mins, k, guard_s, congestion, bound, opt)
    if len(chosen) > k:
        row[L.OUT_RUNNER_UP] = float(chosen.pop())
        row[L.OUT_EST + L.EST_RUNNER_UP_SCORE] = top[k]
    _record(chosen, scratch, inv, mins, row)
    if opt.commit:
        charge(devices, task, row)
    return row


def _congestion_s(dev: Sequence[float], scr: Sequence[float], mins: Sequence[float]) -> float:
    """Return one device's congestion charge before its weight (hetmesh_place.c congestion_s).

    Its service time, ramped in by its queue (full at CONGESTION_DEPTH of the task's fastest
    service): under load a busy device's second delays the work queued behind it as well.
    """
    fastest = mins[L.OBJ_THROUGHPUT]
    queue = dev[L.DEV_QUEUE_S] / _n_slots(dev)
    if not fastest > 0.0:
        return 0.0
    ramp = queue / (L.CONGESTION_DEPTH * fastest)
    return scr[L.OBJ_THROUGHPUT] * (ramp if ramp < 1.0 else 1.0)


def _rank(
    devices: Sequence[float],
    n_dev: int,
    scratch: list[list[float]],
    inv: list[float],
    mins: list[float],
    k: int,
    guard_s: float,
    congestion: float = 0.0,
    bound: Sequence[float] | None = None,
    opt: PassOptions = PLAIN,
) -> tuple[list[int], list[float]]:
    """Return the k+1 best-scoring feasible devices in order (ties: lowest index), scores.

    ``congestion`` > 0: the congestion charge's weight in score units (its weight x the
    latency term's scale), each device's charge times its pessimistic bound (``bound``: the
    task class's row, or None), except where ``opt`` divides the device's estimate by its
    optimism.
    """
    chosen: list[int] = []
    top: list[float] = []
    for d in range(n_dev):
        scr = scratch[d]
        if scr[L.SCR_REASON] != 0.0:
            continue
        if guard_s > 0.0 and scr[L.OBJ_LATENCY] > guard_s:
            continue
        score = 0.0
        for o in range(L.N_OBJECTIVES):
            score += (scr[o] - mins[o]) * inv[o]
        if congestion > 0.0:
            dev = devices[d * L.DEV_FIELDS : (d + 1) * L.DEV_FIELDS]
            c = _congestion_s(dev, scr, mins)
            if bound is not None and _dividing(opt, d) is None:
                c *= bound[d]
            score += congestion * c
        if devices[d * L.DEV_FIELDS + L.DEV_HEALTH] == 1.0:
            score += L.SUSPECT_PENALTY
        scr[L.SCR_SCORE] = score
        if len(chosen) == k + 1 and not score < top[k]:
            continue
        pos = len(chosen) if len(chosen) < k + 1 else k
        while pos > 0 and score < top[pos - 1]:
            pos -= 1
        chosen.insert(pos, d)
        top.insert(pos, score)
        del chosen[k + 1 :], top[k + 1 :]
    return chosen, top


def charge(devices: MutableSequence[float], task: Sequence[float], row: Sequence[float]) -> None:
    """Charge the devices of an output row (assigned, charged) with the task's live state."""
    for j in range(L.MAX_GANG):
        d = int(row[L.OUT_ASSIGNED + j])
        if d < 0:
            break
        base = d * L.DEV_FIELDS
        devices[base + L.DEV_QUEUE_S] += row[L.OUT_CHARGED + j]
        devices[base + L.DEV_MEM_FREE] -= task[L.TASK_MEM]
        cfg = task[L.TASK_CONFIG]
        if cfg != 0.0 and not _config_loaded(devices[base : base + L.DEV_FIELDS], cfg):
            _load_config(devices, base, cfg)


def _record(
    chosen: list[int],
    scratch: list[list[float]],
    inv: list[float],
    mins: list[float],
    row: list[float],
) -> None:
    """Record the chosen devices and the task's estimates in its output row."""
    first = scratch[chosen[0]]
    for o in range(L.N_OBJECTIVES):
        row[L.OUT_COMP + o] = (first[o] - mins[o]) * inv[o]
    est = L.OUT_EST
    row[est + L.EST_SCORE] = first[L.SCR_SCORE]
    for j, d in enumerate(chosen):
        scr = scratch[d]
        row[L.OUT_ASSIGNED + j] = float(d)
        if scr[L.OBJ_LATENCY] > row[est + L.EST_LATENCY_S]:
            row[est + L.EST_LATENCY_S] = scr[L.OBJ_LATENCY]
        if scr[L.SCR_SERVICE_EFF] > row[est + L.EST_SERVICE_S]:
            row[est + L.EST_SERVICE_S] = scr[L.SCR_SERVICE_EFF]
            row[est + L.EST_BASE_S] = scr[L.SCR_BASE]
        row[est + L.EST_ENERGY_J] += scr[L.OBJ_ENERGY]
        row[est + L.EST_CARBON_G] += scr[L.OBJ_CARBON]
        row[L.OUT_CHARGED + j] = scr[L.SCR_SERVICE_EFF] + scr[L.SCR_RECONF]
