"""Encodes devices and task contracts into the kernel's flat rows (layout.py)."""

from __future__ import annotations

from dataclasses import dataclass

from edge_agent.errors import ContractError
from edge_agent.placement import layout as L
from edge_agent.resources.device import Device
from edge_agent.resources.vocab import ModelFormat, OperatorFamily, mask_of
from edge_agent.tasks.contract import TaskContract, kinds_mask


def device_row(dev: Device) -> list[float]:
    """Return ``dev`` as one kernel device row."""
    cap, live = dev.capability, dev.live
    row = [0.0] * L.DEV_FIELDS
    row[L.DEV_KIND] = float(dev.kind)
    row[L.DEV_PEAK_INT8] = cap.peak_int8_gops
    row[L.DEV_PEAK_FP16] = cap.peak_fp16_gops
    row[L.DEV_PEAK_FP32] = cap.peak_fp32_gops
    row[L.DEV_MEM_TOTAL] = cap.memory_bytes
    row[L.DEV_MEM_BW] = cap.memory_bw_gbs
    row[L.DEV_IDLE_W] = cap.idle_power_w
    row[L.DEV_MAX_W] = cap.max_power_w
    row[L.DEV_PREC_MASK] = float(cap.precision_mask)
    row[L.DEV_OPS_MASK] = float(cap.operator_mask)
    row[L.DEV_FORMAT_MASK] = float(cap.format_mask)
    row[L.DEV_EFFICIENCY] = cap.efficiency
    row[L.DEV_DISPATCH_S] = cap.dispatch_s
    row[L.DEV_RECONF_S] = cap.reconfig_s
    row[L.DEV_LINK_S] = cap.link_latency_s
    row[L.DEV_LINK_BW] = cap.link_bw_gbs
    row[L.DEV_CARBON] = dev.carbon_g_per_kwh
    row[L.DEV_UTIL] = live.utilization
    free = live.memory_free_bytes
    row[L.DEV_MEM_FREE] = cap.memory_bytes if free is None else free
    row[L.DEV_QUEUE_S] = live.queued_s
    row[L.DEV_PRED_UTIL] = live.predicted_utilization
    row[L.DEV_HEALTH] = float(live.health)
    row[L.DEV_CONFIG] = float(live.loaded_config)
    return row


@dataclass(frozen=True, slots=True)
class PreparedTask:
    """A contract encoded once (at submit time) into its kernel row.

    ``row`` has class 0; ``Placer.prepare`` also sets ``bound``: the row's float64 bytes
    with that Placer's class index, so placing it again copies those bytes and nothing else.
    """

    contract: TaskContract
    row: tuple[float, ...]
    bound: tuple[object, bytes, int] | None = None  # (placer, row's bytes, class)


def prepare(contract: TaskContract) -> PreparedTask:
    """Encode ``contract`` into a kernel row; raise ContractError for bad names."""
    req, sem = contract.requirements, contract.semantics
    try:
        ops = (
            mask_of(OperatorFamily, req.operator_families, what="operator family")
            if req.operator_families is not None
            else sem.operator_mask()
        )
        fmt = mask_of(ModelFormat, req.formats(), what="model format")
        precisions = contract.precisions()
        row = [0.0] * L.TASK_FIELDS
        row[L.TASK_KINDS_MASK] = float(kinds_mask(list(req.kinds)))
        row[L.TASK_PREC] = float(precisions[0])
    except ValueError as err:
        raise ContractError(str(err)) from None
    row[L.TASK_OPS_MASK] = float(ops)
    row[L.TASK_FORMAT] = float(fmt)
    row[L.TASK_MEM] = contract.memory_needed()
    row[L.TASK_COUNT] = float(req.device_count)
    row[L.TASK_MAX_LAT_S] = req.max_latency_s
    row[L.TASK_DEADLINE_S] = req.deadline_s
    row[L.TASK_GFLOP] = sem.gflops
    row[L.TASK_BYTES] = sem.param_bytes + sem.activation_bytes
    row[L.TASK_IN_BYTES] = sem.input_bytes
    row[L.TASK_CONFIG] = float(req.config_id)
    if len(precisions) > 1:
        row[L.TASK_PREC_MASK] = float(sum({1 << int(p) for p in precisions}))
    row[L.TASK_FLAGS] = float(L.TF_DROP_IF_LATE if req.drop_if_late else 0)
    return PreparedTask(contract, tuple(row))


def with_deadline(task: PreparedTask, contract: TaskContract) -> PreparedTask:
    """Return ``task``'s row for ``contract``: the same contract but for its deadline.

    A waiting task's deadline is counted from the moment it is placed; its row need not be
    encoded again for that.
    """
    row = list(task.row)
    row[L.TASK_DEADLINE_S] = contract.requirements.deadline_s
    return PreparedTask(contract, tuple(row))
