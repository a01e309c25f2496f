"""Row layouts of the flat arrays the placement kernel reads and writes.

These numbers mirror ``native/hetmesh_kernel.h``; a test checks that the two agree.
Devices, tasks and policies cross into C as rows of doubles so that one call places a
whole batch without touching Python objects.
"""

from __future__ import annotations

import math

# --- device row (capability, then live state) ---------------------------------------
DEV_KIND = 0  # DeviceKind value
DEV_PEAK_INT8 = 1  # GOPS
DEV_PEAK_FP16 = 2
DEV_PEAK_FP32 = 3
DEV_MEM_TOTAL = 4  # bytes
DEV_MEM_BW = 5  # GB/s
DEV_IDLE_W = 6
DEV_MAX_W = 7
DEV_PREC_MASK = 8
DEV_OPS_MASK = 9
DEV_FORMAT_MASK = 10
DEV_EFFICIENCY = 11  # achievable fraction of peak, (0, 1]
DEV_DISPATCH_S = 12
DEV_RECONF_S = 13
DEV_LINK_S = 14
DEV_LINK_BW = 15  # GB/s, 0 = transfer not modelled
DEV_CARBON = 16  # gCO2 per kWh at the device's site
DEV_UTIL = 17  # 0..1
DEV_MEM_FREE = 18  # bytes
DEV_QUEUE_S = 19  # seconds of committed work; the kernel adds to it
DEV_PRED_UTIL = 20  # 0..1
DEV_HEALTH = 21  # Health value
DEV_CONFIG = 22  # configuration loaded in slot 0; the kernel updates slots on commit
DEV_SLOTS = 23  # partial-reconfiguration slots, 0..MAX_SLOTS (0 = 1)
DEV_CONFIG_2 = 24  # configurations loaded in slots 1..3
DEV_CONFIG_3 = 25
DEV_CONFIG_4 = 26
DEV_SLOT_NEXT = 27  # the slot the next new configuration replaces when all are full
DEV_FIELDS = 28
MAX_SLOTS = 4
SLOT_COLS = (DEV_CONFIG, DEV_CONFIG_2, DEV_CONFIG_3, DEV_CONFIG_4)
LIVE_NAMES = {
    DEV_UTIL: "utilization",
    DEV_MEM_FREE: "memory_free_bytes",
    DEV_QUEUE_S: "queued_s",
    DEV_PRED_UTIL: "predicted_utilization",
    DEV_HEALTH: "health",
    DEV_LINK_S: "link_latency_s",
    DEV_LINK_BW: "link_bw_gbs",
    DEV_CARBON: "carbon_g_per_kwh",
    DEV_CONFIG: "loaded_config",
    DEV_SLOTS: "slots",
}
#: the live columns written for every device at once (``update_live_many``, the kernel's
#: ``hm_set_live``), each with its largest valid value (health: a Health value, 0, 1 or 2)
LIVE_TOP = {
    DEV_UTIL: 1.0,
    DEV_PRED_UTIL: 1.0,
    DEV_QUEUE_S: math.inf,
    DEV_MEM_FREE: math.inf,
    DEV_HEALTH: 2.0,
    DEV_LINK_S: math.inf,
    DEV_LINK_BW: math.inf,
    DEV_CARBON: math.inf,
}
#: the live columns the kernel's kept per-device constants are computed from: writing one
#: must make the next call recompute them (``KernelCall.devices_changed``)
CONSTANTS_FROM = frozenset({DEV_UTIL, DEV_PRED_UTIL})

# --- task row ------------------------------------------------------------------------
TASK_KINDS_MASK = 0  # 0 = any kind
TASK_PREC = 1  # Precision value
TASK_OPS_MASK = 2
TASK_FORMAT = 3  # mask of accepted ModelFormat bits, 0 = any
TASK_MEM = 4  # bytes per device
TASK_COUNT = 5  # devices wanted, 1..MAX_GANG
TASK_MAX_LAT_S = 6  # 0 = no bound
TASK_DEADLINE_S = 7  # 0 = none
TASK_GFLOP = 8  # giga-operations
TASK_BYTES = 9  # bytes moved through memory per run (params + activations)
TASK_IN_BYTES = 10  # bytes shipped over a link to a remote device
TASK_CLASS = 11  # row of the correction matrix
TASK_CONFIG = 12  # required configuration id, 0 = none
TASK_PREC_MASK = 13  # further precisions the task may run at, 0 = only TASK_PREC
TASK_FLAGS = 14  # TF_* bits
TASK_FIELDS = 15

TF_DROP_IF_LATE = 1  # leave unplaced when no device meets the deadline

# --- policy weights (objectives; all costs, lower is better) -------------------------
OBJ_LATENCY = 0
OBJ_ENERGY = 1
OBJ_THROUGHPUT = 2
OBJ_BALANCE = 3
OBJ_FRAGMENTATION = 4
OBJ_CARBON = 5
OBJ_DEADLINE = 6  # slack-aware deadline cost; the latency for a task without a deadline
N_OBJECTIVES = 7
OBJECTIVE_NAMES = (
    "latency",
    "energy",
    "throughput",
    "balance",
    "fragmentation",
    "carbon",
    "deadline",
)
# The weights buffer: the objective weights, then the queue guard (0 = off, else >= 1: no
# device whose finish exceeds guard x the earliest finish is chosen, for one-device tasks),
# then the congestion charge (>= 0, 0 = off: a device with queued work costs this many times
# its service time more in the latency term, ramped up by its queue, see CONGESTION_DEPTH).
W_QUEUE_GUARD = 7
W_CONGESTION = 8
N_WEIGHTS = 9

# --- estimate columns per task -------------------------------------------------------
EST_LATENCY_S = 0
EST_SERVICE_S = 1
EST_ENERGY_J = 2
EST_CARBON_G = 3
EST_SCORE = 4
EST_RUNNER_UP_SCORE = 5
EST_BASE_S = 6  # the service estimate without the learned correction
N_EST = 7

# --- the output row of one task: every result in one row of doubles ------------------
OUT_ASSIGNED = 0  # MAX_GANG device indices, NO_DEVICE when unused / unplaced
OUT_CHARGED = 8  # MAX_GANG queue seconds charged to each chosen device
OUT_RUNNER_UP = 16  # best device not chosen, or NO_DEVICE
OUT_EST = 17  # N_EST estimate columns (EST_*)
OUT_COMP = 24  # N_OBJECTIVES weighted score terms of the first chosen device
OUT_COUNTS = 31  # N_REASONS devices rejected per reason
OUT_FLAGS = 42  # OF_* bits
OUT_FIELDS = 43

OF_LATE = 1  # no device meets the deadline: placed on the earliest finish

# --- an exploration call (hm_place_bound's modes): outcomes, output rows, modes -------
EX_NO_UNTRIED = 0  # no device untried (and free to probe): the usual choice committed
EX_NONE_AMONG_CANDIDATES = 1  # untried devices, none a candidate: the usual choice
EX_FRUITLESS = 2  # the optimistic pass chose a tried device (or none): the usual choice
EX_DEFERRED = 3  # the probe would be unplaced or late (the usual one is not): the usual
EX_PROBE = 4  # the untried device the optimistic pass chose: committed
EX_ROW_USUAL, EX_ROW_PROBE, EX_ROW_OPTIMISTIC, EX_ROWS = 0, 1, 2, 3
MODE_PLACE = 0  # hm_call.mode: a plain call
MODE_EXPLORE = 1  # an exploration decision (hm_call.divisors, busy; outcome: EX_*)
MODE_PROBE = 2  # a decision probing its class's clamped factors (outcome: any clamped)

# --- hm_place_one (place_one's call): its returns besides a status, and its book -----
ONE_EXPLORE = 16  # the class's exploration decision is due (nothing decided)
ONE_PROBE = 17  # the clamped-factor probe is due (nothing decided)
ONE_EXPLORED = 32  # + an EX_* outcome: the exploration decision ran (divisor rows bound)
BK_COUNTING = 0  # book globals: nonzero while decisions are counted (0: a preview)
BK_EXPLORING = 1  # nonzero: exploration enabled
BK_DECISIONS = 2  # decisions counted
BK_PROBE_TICK = 3  # decisions since the last clamped-factor probe
BK_PROBE_EVERY = 4  # that probe's interval
BK_HOPELESS_EVERY = 5  # a pressed class's exploration interval, at most
BK_GLOBALS = 6
BK_TICK = 0  # per class (after the globals): decisions since its last exploration
BK_EVERY = 1  # its exploration interval
BK_PRESSED = 2  # its last decision was late or congested
BK_UNTRIED = 3  # nonzero while it has untried pairs
BK_CLASS_FIELDS = 4

# --- rejection reasons (first failing check wins) ------------------------------------
R_OK = 0
R_OFFLINE = 1
R_KIND = 2
R_PRECISION = 3
R_OPERATORS = 4
R_FORMAT = 5
R_MEMORY = 6
R_LATENCY = 7
R_DEADLINE = 8
R_CONFIG = 9
R_EXCLUDED = 10  # not among the call's candidates
N_REASONS = 11
REASON_NAMES = (
    "ok",
    "offline",
    "kind not allowed",
    "precision unsupported",
    "operator family unsupported",
    "model format unsupported",
    "not enough free memory",
    "estimated latency over max_latency",
    "would miss the deadline",
    "cannot load a configuration (not an FPGA)",
    "not among the call's candidates",
)
KIND_FPGA = 5  # DeviceKind.FPGA: the only kind that loads configurations

# --- per-device scratch columns (caller-provided; no allocation in the kernel) -------
# Columns 0..6 hold the device's cost for each objective, in objective order.
SCR_SERVICE_EFF = 7  # service time stretched by current/predicted utilization
SCR_RECONF = 8
SCR_SCORE = 9
SCR_REASON = 10
# Per-batch device constants, computed once per call so the task loop only multiplies.
SCR_INV_PE_INT8 = 11  # 1 / (peak * efficiency) per peak slot, 0 when the peak is 0
SCR_INV_PE_FP16 = 12
SCR_INV_PE_FP32 = 13
SCR_INV_BW = 14  # 1 / (bandwidth in bytes/s), 0 when not modelled
SCR_U = 15  # max(utilization, predicted), capped at UTIL_CAP
SCR_INV_AVAIL = 16  # 1 / (1 - u)
SCR_INV_MEM = 17  # 1 / memory_total, 0 when the device reports none
SCR_BASE = 18  # the service estimate without the correction
SCR_FIELDS = 19

MAX_GANG = 8  # most devices one task may take

# --- status codes --------------------------------------------------------------------
ST_OK = 0
ST_BAD_SHAPE = 1
ST_BAD_DEVICE = 2
ST_BAD_TASK = 3
ST_BAD_POLICY = 4
ST_BAD_CORRECTION = 5
STATUS_NAMES = {
    ST_OK: "ok",
    ST_BAD_SHAPE: "bad array shape or null buffer",
    ST_BAD_DEVICE: "device row has NaN, infinity or an out-of-range value",
    ST_BAD_TASK: "task row has NaN, infinity or an out-of-range value",
    ST_BAD_POLICY: "policy weights must be finite, >= 0 and not all zero",
    ST_BAD_CORRECTION: "correction factors must be finite and > 0",
}

NO_DEVICE = -1

# Fixed constants of the cost model, shared by the kernel and its twin.
BALANCE_HORIZON_S = 1.0  # balance cost: utilization plus backlog over this horizon
UTIL_CAP = 0.95  # a device is never modelled as more than 95% busy
SUSPECT_PENALTY = 1.0  # added to the score of a device whose health is suspect
NORM_FLOOR = (1e-6, 1e-6, 1e-6, 0.05, 0.05, 1e-9, 1e-6)  # per objective, keeps ratios finite
DEADLINE_MARGIN = 0.5  # a deadline is met "with a margin" within (1 - margin) of it
SLACK_PREF = 0.2  # within the margin: weight of a slower device vs an earlier finish
CONGESTION_DEPTH = 8.0  # congestion charge full at this many fastest services queued
PREC_BITS = 5  # precisions a task's PREC_MASK may name
