/* hetmesh placement kernel: places a batch of tasks over a fleet of devices.
 *
 * C99, no allocation, no global state, no Python.h. Rows are doubles; the column
 * numbers below are mirrored in edge_agent/placement/layout.py (a test checks them).
 */
#ifndef HETMESH_KERNEL_H
#define HETMESH_KERNEL_H

#include <stdint.h>

#define HM_ABI_VERSION 8

/* device row */
#define HM_DEV_KIND 0
#define HM_DEV_PEAK_INT8 1
#define HM_DEV_PEAK_FP16 2
#define HM_DEV_PEAK_FP32 3
#define HM_DEV_MEM_TOTAL 4
#define HM_DEV_MEM_BW 5
#define HM_DEV_IDLE_W 6
#define HM_DEV_MAX_W 7
#define HM_DEV_PREC_MASK 8
#define HM_DEV_OPS_MASK 9
#define HM_DEV_FORMAT_MASK 10
#define HM_DEV_EFFICIENCY 11
#define HM_DEV_DISPATCH_S 12
#define HM_DEV_RECONF_S 13
#define HM_DEV_LINK_S 14
#define HM_DEV_LINK_BW 15
#define HM_DEV_CARBON 16
#define HM_DEV_UTIL 17
#define HM_DEV_MEM_FREE 18
#define HM_DEV_QUEUE_S 19
#define HM_DEV_PRED_UTIL 20
#define HM_DEV_HEALTH 21
#define HM_DEV_CONFIG 22 /* configuration loaded in slot 0 */
#define HM_DEV_SLOTS 23 /* partial-reconfiguration slots, 0..HM_MAX_SLOTS (0 = 1) */
#define HM_DEV_CONFIG_2 24 /* configurations loaded in slots 1..3 */
#define HM_DEV_CONFIG_3 25
#define HM_DEV_CONFIG_4 26
#define HM_DEV_SLOT_NEXT 27 /* the slot the next new configuration replaces when all are full */
#define HM_DEV_FIELDS 28
#define HM_MAX_SLOTS 4

/* task row */
#define HM_TASK_KINDS_MASK 0
#define HM_TASK_PREC 1
#define HM_TASK_OPS_MASK 2
#define HM_TASK_FORMAT 3 /* mask of accepted model formats, 0 = any */
#define HM_TASK_MEM 4
#define HM_TASK_COUNT 5
#define HM_TASK_MAX_LAT_S 6
#define HM_TASK_DEADLINE_S 7
#define HM_TASK_GFLOP 8
#define HM_TASK_BYTES 9
#define HM_TASK_IN_BYTES 10
#define HM_TASK_CLASS 11
#define HM_TASK_CONFIG 12
#define HM_TASK_PREC_MASK 13 /* further precisions the task may run at, 0 = only TASK_PREC */
#define HM_TASK_FLAGS 14 /* HM_TF_* bits */
#define HM_TASK_FIELDS 15

/* task flags */
#define HM_TF_DROP_IF_LATE 1 /* leave unplaced when no device meets the deadline */
#define HM_PREC_BITS 5       /* precisions a task's PREC_MASK may name */

/* objectives (costs) */
#define HM_OBJ_LATENCY 0
#define HM_OBJ_ENERGY 1
#define HM_OBJ_THROUGHPUT 2
#define HM_OBJ_BALANCE 3
#define HM_OBJ_FRAGMENTATION 4
#define HM_OBJ_CARBON 5
#define HM_OBJ_DEADLINE 6 /* slack-aware deadline cost; the latency for a task without one */
#define HM_N_OBJECTIVES 7
/* the weights buffer: the objective weights, then the queue guard (0 = off, else >= 1: no
 * device whose finish exceeds guard x the earliest finish is chosen, for one-device tasks),
 * then the congestion charge (>= 0, 0 = off; see HM_CONGESTION_DEPTH; a bound call charges a
 * device's service at its pessimistic bound, hm_call.bound_rows) */
#define HM_W_QUEUE_GUARD 7
#define HM_W_CONGESTION 8
#define HM_N_WEIGHTS 9

/* estimate columns */
#define HM_EST_LATENCY_S 0
#define HM_EST_SERVICE_S 1
#define HM_EST_ENERGY_J 2
#define HM_EST_CARBON_G 3
#define HM_EST_SCORE 4
#define HM_EST_RUNNER_UP_SCORE 5
#define HM_EST_BASE_S 6 /* the service estimate without the learned correction */
#define HM_N_EST 7

/* the output row of one task */
#define HM_OUT_ASSIGNED 0
#define HM_OUT_CHARGED 8
#define HM_OUT_RUNNER_UP 16
#define HM_OUT_EST 17
#define HM_OUT_COMP 24
#define HM_OUT_COUNTS 31
#define HM_OUT_FLAGS 42 /* HM_OF_* bits */
#define HM_OUT_FIELDS 43

/* output flags */
#define HM_OF_LATE 1 /* no device meets the deadline: placed on the earliest finish */

/* an exploration call (hm_place_bound's modes): its outcomes, output rows, the modes */
#define HM_EX_NO_UNTRIED 0 /* no device is untried (and free to probe): the usual choice */
#define HM_EX_NONE_AMONG_CANDIDATES 1 /* untried devices, none a candidate: the usual one */
#define HM_EX_FRUITLESS 2 /* the optimistic pass chose a tried device (or none): usual */
#define HM_EX_DEFERRED 3 /* the probe would be unplaced or late (the usual choice is not) */
#define HM_EX_PROBE 4 /* the untried device the optimistic pass chose: committed */
#define HM_EX_ROW_USUAL 0
#define HM_EX_ROW_PROBE 1
#define HM_EX_ROW_OPTIMISTIC 2
#define HM_EX_ROWS 3
#define HM_MODE_PLACE 0
#define HM_MODE_EXPLORE 1
#define HM_MODE_PROBE 2

/* hm_place_one: what it returns besides a status (nothing was decided) */
#define HM_ONE_EXPLORE 16 /* the class's exploration decision is due: run HM_MODE_EXPLORE */
#define HM_ONE_PROBE 17 /* the clamped-factor probe is due: run HM_MODE_PROBE */
#define HM_ONE_EXPLORED 32 /* + an HM_EX_* outcome: the exploration decision ran (rows bound) */
/* hm_place_one's book (int64): HM_BK_GLOBALS entries, then HM_BK_CLASS_FIELDS per class */
#define HM_BK_COUNTING 0 /* nonzero: decisions are counted and explored (0: a preview) */
#define HM_BK_EXPLORING 1 /* nonzero: exploration is enabled */
#define HM_BK_DECISIONS 2 /* decisions counted */
#define HM_BK_PROBE_TICK 3 /* decisions since the last clamped-factor probe */
#define HM_BK_PROBE_EVERY 4 /* that probe is due every this many decisions */
#define HM_BK_HOPELESS_EVERY 5 /* a pressed class's exploration interval, at most */
#define HM_BK_GLOBALS 6
#define HM_BK_TICK 0 /* per class: decisions since its last exploration decision */
#define HM_BK_EVERY 1 /* its exploration interval */
#define HM_BK_PRESSED 2 /* its last decision was late or congested */
#define HM_BK_UNTRIED 3 /* nonzero while it has untried pairs */
#define HM_BK_CLASS_FIELDS 4

/* rejection reasons */
#define HM_R_OK 0
#define HM_R_OFFLINE 1
#define HM_R_KIND 2
#define HM_R_PRECISION 3
#define HM_R_OPERATORS 4
#define HM_R_FORMAT 5
#define HM_R_MEMORY 6
#define HM_R_LATENCY 7
#define HM_R_DEADLINE 8
#define HM_R_CONFIG 9
#define HM_R_EXCLUDED 10 /* not among the call's candidates */
#define HM_N_REASONS 11
#define HM_KIND_FPGA 5

/* scratch columns (0..6 are the objective costs) */
#define HM_SCR_SERVICE_EFF 7
#define HM_SCR_RECONF 8
#define HM_SCR_SCORE 9
#define HM_SCR_REASON 10
#define HM_SCR_INV_PE_INT8 11
#define HM_SCR_INV_PE_FP16 12
#define HM_SCR_INV_PE_FP32 13
#define HM_SCR_INV_BW 14
#define HM_SCR_U 15
#define HM_SCR_INV_AVAIL 16
#define HM_SCR_INV_MEM 17
#define HM_SCR_BASE 18 /* service without the correction */
#define HM_SCR_FIELDS 19

/* cost-model constants (mirrored in layout.py) */
#define HM_BALANCE_HORIZON_S 1.0
#define HM_UTIL_CAP 0.95
#define HM_SUSPECT_PENALTY 1.0
#define HM_NORM_FLOOR_0 1e-6
#define HM_NORM_FLOOR_1 1e-6
#define HM_NORM_FLOOR_2 1e-6
#define HM_NORM_FLOOR_3 0.05
#define HM_NORM_FLOOR_4 0.05
#define HM_NORM_FLOOR_5 1e-9
#define HM_NORM_FLOOR_6 1e-6
#define HM_DEADLINE_MARGIN 0.5 /* a deadline is met "with a margin" within (1 - margin) of it */
#define HM_SLACK_PREF 0.2 /* within the margin: weight of a slower device vs an earlier finish */
#define HM_CONGESTION_DEPTH 8.0 /* congestion charge full at this many fastest services queued */
#define HM_MAX_GANG 8
#define HM_NO_DEVICE (-1)

/* status codes */
#define HM_ST_OK 0
#define HM_ST_BAD_SHAPE 1
#define HM_ST_BAD_DEVICE 2
#define HM_ST_BAD_TASK 3
#define HM_ST_BAD_POLICY 4
#define HM_ST_BAD_CORRECTION 5

/* cffi:begin -- native/build_kernel.py hands the declarations up to cffi:end to cffi */
int hm_abi_version(void);

/* Place n_task tasks (in array order) over n_dev devices.
 *
 * devices       n_dev * HM_DEV_FIELDS; live columns QUEUE_S, MEM_FREE, CONFIG are
 *               updated as tasks are committed (never on a non-OK status).
 * tasks         n_task * HM_TASK_FIELDS
 * weights       HM_N_WEIGHTS: the objective weights (finite, >= 0, not all zero), the
 *               queue guard (0 or a finite number >= 1) and the congestion charge (finite,
 *               >= 0)
 * corrections   n_classes * n_dev factors (> 0), row = task class (no pessimistic bounds:
 *               those are hm_call.bound_rows, for bound calls)
 * scratch       n_dev * HM_SCR_FIELDS, caller-provided work space
 * out           n_task * HM_OUT_FIELDS results, one row per task (see HM_OUT_*): chosen
 *               device indices (HM_NO_DEVICE when unused or unplaced), queue seconds charged
 *               to each, runner-up, estimates, weighted score terms, rejections per reason
 * reasons       n_task * n_dev reason per (task, device), or NULL to skip
 * bad_index     out: the offending row/entry on a non-OK status, else -1
 * Returns an HM_ST_* status code.
 */
int hm_place_batch(double *devices, int32_t n_dev, const double *tasks, int32_t n_task,
                   const double *weights, const double *corrections, int32_t n_classes,
                   double *scratch, double *out, uint8_t *reasons, int32_t *bad_index);

/* The same call with its buffers bound once in a struct (cheaper to call from Python).
 *
 * devices_checked: the kernel sets it after an OK call; the caller must clear it whenever
 * it writes a device row. While it is set, device rows are not validated again and the
 * per-device constants kept in scratch are reused (the kernel's own commits only move
 * queue, free memory and loaded configuration, which keep a valid row valid). */
typedef struct {
    double *devices;
    int32_t n_dev;
    const double *tasks;
    const double *weights;
    const double *corrections;
    int32_t n_classes;
    double *scratch;
    double *out;
    uint8_t *reasons;
    const uint8_t *allowed; /* n_dev flags, nonzero = a candidate; NULL = every device */
    int32_t bad_index;
    int32_t devices_checked;
    int32_t mode;           /* HM_MODE_*: what the next call does (the caller resets it) */
    const double *divisors; /* HM_MODE_EXPLORE: n_dev finite factors >= 1 */
    const uint8_t *busy;    /* HM_MODE_EXPLORE: n_dev flags (or NULL) */
    double clamp_lo;        /* HM_MODE_PROBE: factors <= clamp_lo or >= clamp_hi count as 1 */
    double clamp_hi;
    int32_t outcome;        /* out: HM_MODE_EXPLORE's HM_EX_*, HM_MODE_PROBE's "stuck" */
    const uint8_t *sets;    /* hm_place_one: n_sets kept candidate masks of n_dev flags */
    int32_t n_sets;
    int64_t *book;          /* hm_place_one: exploration bookkeeping (HM_BK_*) */
    int32_t book_classes;   /* classes the book has rows for */
    double congested;       /* hm_place_one: pressed when latency > congested * service */
    const double *divisor_rows; /* hm_place_one: book_classes * n_dev divisors (or NULL) */
    /* every bound call: bound_classes * n_dev factors (finite, >= 1) or NULL (all 1): each
     * (class, device) estimate's pessimistic bound over the estimate, > 1 while the pair is
     * unmeasured; the congestion charge counts a device's service at its bound (a class
     * outside the rows, and a device a pass divides by its optimism, count 1) */
    const double *bound_rows;
    int32_t bound_classes;
} hm_call;

/* Place like hm_place_batch; with call->mode (task row 0 alone, n_task is ignored):
 *
 * HM_MODE_EXPLORE, one exploration decision (the Placer's ``_explore``):
 * 1. the usual pass: out row HM_EX_ROW_USUAL, reasons row 0;
 * 2. when a device is untried (divisors[d] > 1 and busy[d] == 0) among the call's
 *    candidates: the optimistic pass, with those devices' corrections divided by
 *    divisors[d], into out row HM_EX_ROW_OPTIMISTIC (no reasons);
 * 3. when it chose an untried device: that device's honest pass (its own correction, the
 *    other devices excluded), out row HM_EX_ROW_PROBE, reasons row 1.
 * Exactly one of the usual decision and the probe is committed: the probe when it is
 * placed and either on time or the usual choice is late anyway (outcome HM_EX_PROBE),
 * else the usual decision (outcome says why). Each pass computes what a plain call would
 * from the state before the call. out needs HM_EX_ROWS rows, reasons (if any) 2. A divisor
 * < 1 or not finite: HM_ST_BAD_CORRECTION, bad_index = the device.
 *
 * HM_MODE_PROBE, a decision that probes its class's clamped factors (the Placer's
 * ``_probe``): outcome = 1 when a factor of the class's correction row is >= clamp_hi or
 * <= clamp_lo, and then the pass counts those factors as 1; else the plain pass. Either
 * way the choice is committed.
 *
 * One entry for all modes, so that the rare ones run through the same warm call path. */
int hm_place_bound(hm_call *call, int32_t n_task);

/* place_one's ordinary call: task row 0, committed, among the devices flagged in row `set`
 * of call->sets (set -1: every device), with the exploration bookkeeping in call->book.
 * `task`: HM_TASK_FIELDS doubles' bytes (a prepared task's), first copied into task row 0
 * (which then stays there for a probe or an exploration the call leaves due), or NULL to
 * decide the row already there:
 *
 * 1. while book[HM_BK_COUNTING]: count the decision; when exploring and the task's class
 *    has untried pairs, tick the class and, once its tick reaches its interval (at most
 *    HM_BK_HOPELESS_EVERY while the class is pressed), reset the tick and: with
 *    divisor_rows bound, run the exploration decision (HM_MODE_EXPLORE with the class's
 *    row of divisor_rows, call->busy and the set's flags) and return its status when not
 *    OK, else set the class's HM_BK_PRESSED from the usual row (as step 3 does) and return
 *    HM_ONE_EXPLORED + its outcome; without, return HM_ONE_EXPLORE undecided;
 * 2. tick the clamped-factor probe; when due, reset it and return HM_ONE_PROBE;
 * 3. decide as a plain call (mode is ignored); while counting, set the class's
 *    HM_BK_PRESSED: late (HM_OUT_FLAGS nonzero) or latency > congested * service.
 *
 * A set outside [-1, n_sets) or no book: HM_ST_BAD_SHAPE. A class outside the book's
 * rows skips the class's bookkeeping (place then refuses the task). */
int hm_place_one(hm_call *call, int32_t set, const char *task);

/* Write live columns of every device (update_live_many's whole-fleet write): for k < n_cols,
 * values[k * n_dev + d] into column cols[k] of device row d, after checking every value
 * against its column's bounds, those the bound calls check a device row by: finite and
 * >= 0; at most 1 for HM_DEV_UTIL and HM_DEV_PRED_UTIL; 0, 1 or 2 for HM_DEV_HEALTH. The
 * columns must be among those and HM_DEV_QUEUE_S, MEM_FREE, LINK_S, LINK_BW, CARBON.
 *
 * Returns -1 when every value was written; else nothing is written and it returns the
 * position in `values` of the first bad value, or -2 for a column outside the live ones
 * (or no call, or n_cols < 0). devices_checked is left as it was: these checks keep a
 * valid row valid, and the caller clears it when a utilization column, which the kept
 * per-device constants are computed from, was written. */
int32_t hm_set_live(hm_call *call, const int32_t *cols, int32_t n_cols, const double *values);

/* cffi:end */

#endif
