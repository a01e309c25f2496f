/* hetmesh placement kernel: the scoring and placement core. See hetmesh_kernel.h for the
 * contract.
 *
 * The arithmetic mirrors edge_agent/placement/reference.py operation for operation,
 * so that the kernel and its Python twin agree exactly (build with -ffp-contract=off).
 */
#include "hetmesh_internal.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define HM_VISIT_MAX 1024 /* a restricted call lists its candidates up to this many devices */

/* a per-device step, inlined into each loop that runs it (a call per device costs ~20 %) */
#if defined(__GNUC__)
#define HM_STEP static inline __attribute__((always_inline))
#else
#define HM_STEP static inline
#endif

static const double NORM_FLOOR[HM_N_OBJECTIVES] = {
    HM_NORM_FLOOR_0, HM_NORM_FLOOR_1, HM_NORM_FLOOR_2,
    HM_NORM_FLOOR_3, HM_NORM_FLOOR_4, HM_NORM_FLOOR_5, HM_NORM_FLOOR_6};

int hm_abi_version(void) { return HM_ABI_VERSION; }

/* The slot columns, slot 0 first. */
static const int SLOT_COLS[HM_MAX_SLOTS] = {HM_DEV_CONFIG, HM_DEV_CONFIG_2, HM_DEV_CONFIG_3,
                                            HM_DEV_CONFIG_4};

/* A device's slot count: its configurations share the fabric, 1/slots each. */
static int n_slots(const double *dev) {
    return dev[HM_DEV_SLOTS] > 1.0 ? (int)dev[HM_DEV_SLOTS] : 1;
}

/* True when configuration cfg is loaded in one of the device's slots. */
static int config_loaded(const double *dev, double cfg) {
    int k, s = n_slots(dev);
    for (k = 0; k < s; k++)
        if (dev[SLOT_COLS[k]] == cfg) return 1;
    return 0;
}

/* Load cfg (not loaded yet): into the first empty slot, else the round-robin victim. */
static void load_config(double *dev, double cfg) {
    int k, s = n_slots(dev), victim;
    for (k = 0; k < s; k++) {
        if (dev[SLOT_COLS[k]] == 0.0) {
            dev[SLOT_COLS[k]] = cfg;
            return;
        }
    }
    victim = (int)dev[HM_DEV_SLOT_NEXT] % s;
    dev[SLOT_COLS[victim]] = cfg;
    dev[HM_DEV_SLOT_NEXT] = (double)((victim + 1) % s);
}

static int peak_slot(int prec) {
    if (prec == 0 || prec == 3) return HM_SCR_INV_PE_INT8;
    if (prec == 1 || prec == 4) return HM_SCR_INV_PE_FP16;
    return HM_SCR_INV_PE_FP32;
}

/* Per-batch device constants, so that the task loop only multiplies. */
static void device_constants(const double *dev, double *scr) {
    static const int slots[3] = {HM_SCR_INV_PE_INT8, HM_SCR_INV_PE_FP16, HM_SCR_INV_PE_FP32};
    static const int cols[3] = {HM_DEV_PEAK_INT8, HM_DEV_PEAK_FP16, HM_DEV_PEAK_FP32};
    double bw = dev[HM_DEV_MEM_BW], mem_total = dev[HM_DEV_MEM_TOTAL], u;
    int i;
    for (i = 0; i < 3; i++) {
        double pe = dev[cols[i]] * dev[HM_DEV_EFFICIENCY];
        scr[slots[i]] = pe > 0.0 ? 1.0 / pe : 0.0;
    }
    scr[HM_SCR_INV_BW] = bw > 0.0 ? 1.0 / (bw * 1e9) : 0.0;
    u = dev[HM_DEV_PRED_UTIL] > dev[HM_DEV_UTIL] ? dev[HM_DEV_PRED_UTIL] : dev[HM_DEV_UTIL];
    if (u > HM_UTIL_CAP) u = HM_UTIL_CAP;
    scr[HM_SCR_U] = u;
    scr[HM_SCR_INV_AVAIL] = 1.0 / (1.0 - u);
    scr[HM_SCR_INV_MEM] = mem_total > 0.0 ? 1.0 / mem_total : 0.0;
}

/* The inverse peak the task runs at on this device: its precision, or, when the task allows
 * several, the fastest of them the device offers; 0 when it offers none. */
HM_STEP double task_inv_peak(const double *dev, const double *scr, const double *task) {
    int prec = (int)task[HM_TASK_PREC], p;
    uint32_t want = (uint32_t)task[HM_TASK_PREC_MASK], have;
    double best = 0.0;
    if (want == 0u)
        return (((uint32_t)dev[HM_DEV_PREC_MASK] >> prec) & 1u) ? scr[peak_slot(prec)] : 0.0;
    have = (uint32_t)dev[HM_DEV_PREC_MASK] & (want | (1u << prec));
    for (p = 0; p < HM_PREC_BITS; p++) {
        double v;
        if (!((have >> p) & 1u)) continue;
        v = scr[peak_slot(p)];
        if (v > 0.0 && (best == 0.0 || v < best)) best = v;
    }
    return best;
}

HM_STEP int static_reason(const double *dev, const double *scr, const double *task,
                         double *inv_pe) {
    uint32_t kind = (uint32_t)dev[HM_DEV_KIND];
    uint32_t kinds = (uint32_t)task[HM_TASK_KINDS_MASK];
    uint32_t fmt = (uint32_t)task[HM_TASK_FORMAT];
    if (dev[HM_DEV_HEALTH] == 2.0) return HM_R_OFFLINE;
    if (kinds != 0 && !((kinds >> kind) & 1u)) return HM_R_KIND;
    *inv_pe = task_inv_peak(dev, scr, task);
    if (*inv_pe == 0.0) return HM_R_PRECISION;
    if ((uint32_t)task[HM_TASK_OPS_MASK] & ~(uint32_t)dev[HM_DEV_OPS_MASK]) return HM_R_OPERATORS;
    if (fmt != 0u && !(fmt & (uint32_t)dev[HM_DEV_FORMAT_MASK])) return HM_R_FORMAT;
    if (task[HM_TASK_CONFIG] != 0.0 && kind != HM_KIND_FPGA) return HM_R_CONFIG;
    if (task[HM_TASK_MEM] > dev[HM_DEV_MEM_FREE]) return HM_R_MEMORY;
    return HM_R_OK;
}

/* The deadline objective: for a task with a deadline, [1, 2) when it is met with the margin
 * (lower for a slower device, so fast ones stay free for tight deadlines, and for an
 * earlier finish), [2, 3] when met without the margin, > 3 when missed; else the latency. */
static double deadline_cost(double deadline, double latency, double service_eff) {
    double target;
    if (!(deadline > 0.0)) return latency;
    target = deadline * (1.0 - HM_DEADLINE_MARGIN);
    if (latency <= target)
        return 1.0 + HM_SLACK_PREF * (1.0 - service_eff / target) +
               (1.0 - HM_SLACK_PREF) * (latency / target);
    if (latency <= deadline) return 2.0 + (latency - target) / (deadline - target);
    return 3.0 + latency / deadline;
}

HM_STEP int estimate(const double *dev, const double *task, double work, double moved,
                    double corr, double inv_pe, double *scr) {
    double compute_s = work * inv_pe;
    double mem_s = moved * scr[HM_SCR_INV_BW];
    double roof = (mem_s > compute_s ? mem_s : compute_s) + dev[HM_DEV_DISPATCH_S];
    /* a slot holds 1/slots of the fabric: slower by that factor, and the slots drain the
     * device's queue side by side; with one slot both factors are exactly 1 */
    double slots = (double)n_slots(dev);
    double base = roof * slots;
    double service = base * corr;
    double service_eff = service * scr[HM_SCR_INV_AVAIL];
    double cfg = task[HM_TASK_CONFIG];
    double reconf = (cfg != 0.0 && !config_loaded(dev, cfg)) ? dev[HM_DEV_RECONF_S] : 0.0;
    double link = dev[HM_DEV_LINK_S];
    double queue = dev[HM_DEV_QUEUE_S] / slots;
    double latency, energy, frag, max_lat, deadline;
    if (link > 0.0 && dev[HM_DEV_LINK_BW] > 0.0)
        link = link + task[HM_TASK_IN_BYTES] / (dev[HM_DEV_LINK_BW] * 1e9);
    /* an input transfer overlaps the wait for the device */
    latency = (link > queue ? link : queue) + reconf + service_eff;
    energy = dev[HM_DEV_MAX_W] / slots * (service + reconf);
    if (queue == 0.0 && dev[HM_DEV_MEM_FREE] >= dev[HM_DEV_MEM_TOTAL])
        frag = 1.0; /* placing here breaks an untouched device */
    else
        frag = (dev[HM_DEV_MEM_FREE] - task[HM_TASK_MEM]) * scr[HM_SCR_INV_MEM];
    scr[HM_OBJ_LATENCY] = latency;
    scr[HM_OBJ_ENERGY] = energy;
    scr[HM_OBJ_THROUGHPUT] = service_eff + reconf;
    scr[HM_OBJ_BALANCE] = scr[HM_SCR_U] + (queue + service_eff) / HM_BALANCE_HORIZON_S;
    scr[HM_OBJ_FRAGMENTATION] = frag;
    scr[HM_OBJ_CARBON] = energy / 3.6e6 * dev[HM_DEV_CARBON];
    deadline = task[HM_TASK_DEADLINE_S];
    scr[HM_OBJ_DEADLINE] = deadline_cost(deadline, latency, service_eff);
    scr[HM_SCR_SERVICE_EFF] = service_eff;
    scr[HM_SCR_RECONF] = reconf;
    scr[HM_SCR_BASE] = base * scr[HM_SCR_INV_AVAIL];
    max_lat = task[HM_TASK_MAX_LAT_S];
    if (max_lat > 0.0 && latency > max_lat) return HM_R_LATENCY;
    if (deadline > 0.0 && latency > deadline) return HM_R_DEADLINE;
    return HM_R_OK;
}

static const bounds_t NO_BOUNDS = {NULL, 0};

const pass_opts PLAIN = {NULL, NULL, -1, 1, 0, 0.0, 0.0, 0};

/* Write the indices of the nonzero flags among flags[0..n) to out, in order; return how many.
 * Where the bytes of a word are in little-endian order (GCC and Clang say so), eight flags
 * a step: eight zero flags cost a load and a test, each nonzero one a count of zero bits. */
static int32_t list_flagged(const uint8_t *flags, int32_t n, int32_t *out) {
    int32_t d = 0, found = 0;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; d + 8 <= n; d += 8) {
        uint64_t w;
        memcpy(&w, flags + d, sizeof w);
        while (w != 0) {
            int at = __builtin_ctzll(w) >> 3; /* the first nonzero flag's byte */
            out[found++] = d + at;
            w &= ~(0xFFull << (8 * at));
        }
    }
#endif
    for (; d < n; d++) {
        out[found] = d;
        found += flags[d] != 0;
    }
    return found;
}

/* Whether the pass divides device d's estimate by its optimism (a divisor, d not busy). */
static int divides(const pass_opts *opt, int32_t d) {
    return opt->divisors != NULL && !(opt->busy != NULL && opt->busy[d]);
}

/* Charge the devices of an output row (its HM_OUT_ASSIGNED, HM_OUT_CHARGED) with the task. */
void charge(double *devices, const double *task, const double *o_row) {
    int j;
    for (j = 0; j < HM_MAX_GANG && o_row[HM_OUT_ASSIGNED + j] >= 0.0; j++) {
        double *row = devices + (size_t)o_row[HM_OUT_ASSIGNED + j] * HM_DEV_FIELDS;
        row[HM_DEV_QUEUE_S] += o_row[HM_OUT_CHARGED + j];
        row[HM_DEV_MEM_FREE] -= task[HM_TASK_MEM];
        if (task[HM_TASK_CONFIG] != 0.0 && !config_loaded(row, task[HM_TASK_CONFIG]))
            load_config(row, task[HM_TASK_CONFIG]);
    }
}

/* Record the chosen devices and the task's estimates in its output row. */
static void record(const int32_t *chosen, int n_chosen, const double *scratch,
                   const double *inv, const double *mins, double *o_row) {
    double *est = o_row + HM_OUT_EST, *comp = o_row + HM_OUT_COMP;
    const double *first = scratch + (size_t)chosen[0] * HM_SCR_FIELDS;
    int o, j;
    for (o = 0; o < HM_N_OBJECTIVES; o++) comp[o] = (first[o] - mins[o]) * inv[o];
    est[HM_EST_SCORE] = first[HM_SCR_SCORE];
    for (j = 0; j < n_chosen; j++) {
        const double *scr = scratch + (size_t)chosen[j] * HM_SCR_FIELDS;
        o_row[HM_OUT_ASSIGNED + j] = (double)chosen[j];
        if (scr[HM_OBJ_LATENCY] > est[HM_EST_LATENCY_S]) est[HM_EST_LATENCY_S] = scr[HM_OBJ_LATENCY];
        if (scr[HM_SCR_SERVICE_EFF] > est[HM_EST_SERVICE_S]) {
            est[HM_EST_SERVICE_S] = scr[HM_SCR_SERVICE_EFF];
            est[HM_EST_BASE_S] = scr[HM_SCR_BASE];
        }
        est[HM_EST_ENERGY_J] += scr[HM_OBJ_ENERGY];
        est[HM_EST_CARBON_G] += scr[HM_OBJ_CARBON];
        o_row[HM_OUT_CHARGED + j] = scr[HM_SCR_SERVICE_EFF] + scr[HM_SCR_RECONF];
    }
}

/* The congestion charge of one device, in latency seconds before the charge weight: its
 * service time, ramped in by its queue (full at HM_CONGESTION_DEPTH of the task's fastest
 * service). Under load a second of a busy device's time delays the work queued behind it
 * as well; an idle device's delays nobody, so busy devices pay for inefficient service. */
static double congestion_s(const double *dev, const double *scr, const double *mins) {
    double fastest = mins[HM_OBJ_THROUGHPUT], queue = dev[HM_DEV_QUEUE_S] / n_slots(dev);
    double ramp;
    if (!(fastest > 0.0)) return 0.0;
    ramp = queue / (HM_CONGESTION_DEPTH * fastest);
    return scr[HM_OBJ_THROUGHPUT] * (ramp < 1.0 ? ramp : 1.0);
}

/* rank()'s step for device d: its score, and its place among the best kept so far. */
HM_STEP void rank_one(int32_t d, const double *devices, double *scratch,
                            const double *inv, const double *mins, int k, double guard_s,
                            double congestion, const double *bound, const pass_opts *opt,
                            int32_t *chosen, double *top, int *n_chosen) {
    double *scr = scratch + (size_t)d * HM_SCR_FIELDS, score = 0.0;
    int pos, o;
    if (scr[HM_SCR_REASON] != 0.0) return;
    if (guard_s > 0.0 && scr[HM_OBJ_LATENCY] > guard_s) return;
    for (o = 0; o < HM_N_OBJECTIVES; o++) score += (scr[o] - mins[o]) * inv[o];
    if (congestion > 0.0) {
        double c = congestion_s(devices + (size_t)d * HM_DEV_FIELDS, scr, mins);
        if (bound != NULL && !divides(opt, d))
            c *= bound[d];
        score += congestion * c;
    }
    if (devices[(size_t)d * HM_DEV_FIELDS + HM_DEV_HEALTH] == 1.0)
        score += HM_SUSPECT_PENALTY;
    scr[HM_SCR_SCORE] = score;
    if (*n_chosen == k + 1 && !(score < top[k])) return;
    pos = *n_chosen < k + 1 ? *n_chosen : k;
    if (*n_chosen < k + 1) (*n_chosen)++;
    while (pos > 0 && score < top[pos - 1]) {
        top[pos] = top[pos - 1];
        chosen[pos] = chosen[pos - 1];
        pos--;
    }
    top[pos] = score;
    chosen[pos] = d;
}

/* Keep the k+1 best-scoring feasible devices in order (ties: lowest index); return how many
 * were kept. The devices visited: visit[0..n_visit), or 0..n_visit when visit is NULL (two
 * loops over one inlined step: the plain loop keeps its index arithmetic cheap).
 * guard_s > 0: skip devices whose finish is later than that; congestion > 0: the
 * congestion charge's weight in score units (its weight x the latency term's scale), each
 * device's charge times its pessimistic bound (bound: the task class's row, or NULL), except
 * where the pass divides the device's estimate by its optimism (opt). */
static int rank(const double *devices, const int32_t *visit, int32_t n_visit, double *scratch,
                const double *inv, const double *mins, int k, double guard_s, double congestion,
                const double *bound, const pass_opts *opt, int32_t *chosen, double *top) {
    int32_t i;
    int n_chosen = 0;
    if (visit != NULL)
        for (i = 0; i < n_visit; i++)
            rank_one(visit[i], devices, scratch, inv, mins, k, guard_s, congestion, bound, opt,
                     chosen, top, &n_chosen);
    else
        for (i = 0; i < n_visit; i++)
            rank_one(i, devices, scratch, inv, mins, k, guard_s, congestion, bound, opt, chosen,
                     top, &n_chosen);
    return n_chosen;
}

/* One task's pass over its devices (place()): what each device's step reads and counts. */
typedef struct {
    const double *task, *corr;
    const pass_opts *opt;
    double work, moved;
    double *counts;
    double mins[HM_N_OBJECTIVES]; /* here, not a pointer: the compiler keeps them near */
    uint8_t *reasons; /* the task's reasons row, or NULL */
    int32_t n_ok, n_late;
} assess_t;

/* place()'s step for device d: its hard constraints and estimate, its reason, the minima. */
HM_STEP void assess(assess_t *a, const double *devices, double *scratch, int32_t d) {
    const double *dev = devices + (size_t)d * HM_DEV_FIELDS;
    double *scr = scratch + (size_t)d * HM_SCR_FIELDS, inv_pe = 0.0;
    const pass_opts *opt = a->opt;
    int reason = static_reason(dev, scr, a->task, &inv_pe), o;
    if (reason == HM_R_OK) {
        double corr_d = a->corr[d];
        if (divides(opt, d)) corr_d = corr_d / opt->divisors[d];
        if (opt->reset && (corr_d >= opt->reset_hi || corr_d <= opt->reset_lo)) corr_d = 1.0;
        reason = estimate(dev, a->task, a->work, a->moved, corr_d, inv_pe, scr);
    }
    scr[HM_SCR_REASON] = (double)reason;
    if (a->reasons != NULL) a->reasons[d] = (uint8_t)reason;
    if (reason != HM_R_OK) {
        a->counts[reason] += 1.0;
        a->n_late += reason == HM_R_DEADLINE;
        return;
    }
    a->n_ok++;
    for (o = 0; o < HM_N_OBJECTIVES; o++)
        if (scr[o] < a->mins[o]) a->mins[o] = scr[o];
}

int place(double *devices, int32_t n_dev, const double *tasks, int32_t n_task,
          const double *weights, const double *corrections, int32_t n_classes,
          double *scratch, double *out, uint8_t *reasons, const uint8_t *allowed,
          int32_t *bad_index, int devices_checked, const pass_opts *opt,
          const bounds_t *bounds) {
    const int32_t only = opt->only;
    int32_t t, d, visit_buf[HM_VISIT_MAX], n_visit = n_dev;
    const int32_t *visit = NULL;
    int st;
    if (bad_index == NULL) return HM_ST_BAD_SHAPE;
    *bad_index = -1;
    if (n_dev < 0 || n_task < 0 || n_classes < 1) return HM_ST_BAD_SHAPE;
    if (weights == NULL || corrections == NULL) return HM_ST_BAD_SHAPE;
    if (n_dev > 0 && (devices == NULL || scratch == NULL)) return HM_ST_BAD_SHAPE;
    if (n_task > 0 && (tasks == NULL || out == NULL))
        return HM_ST_BAD_SHAPE;
    if ((int64_t)n_classes * n_dev > INT32_MAX) return HM_ST_BAD_SHAPE;
    if (!opt->checked) {
        st = check_inputs(devices, n_dev, tasks, n_task, weights, corrections, n_classes,
                          bad_index, devices_checked, bounds->rows, bounds->classes);
        if (st != HM_ST_OK) return st;
    }

    if (!devices_checked)
        for (d = 0; d < n_dev; d++)
            device_constants(devices + (size_t)d * HM_DEV_FIELDS,
                             scratch + (size_t)d * HM_SCR_FIELDS);

    /* the devices a task's loops visit, in index order: every one, the one a pass is
     * restricted to, or the candidates; the others are excluded. Listed up to HM_VISIT_MAX
     * devices; past that, every device is visited (visit NULL) and an excluded one marked */
    if (only >= 0) {
        n_visit = 0;
        if (only < n_dev && (allowed == NULL || allowed[only])) visit_buf[n_visit++] = only;
        visit = visit_buf;
    } else if (allowed != NULL && n_dev <= HM_VISIT_MAX) {
        n_visit = list_flagged(allowed, n_dev, visit_buf);
        visit = visit_buf;
    }

    for (t = 0; t < n_task; t++) {
        const double *task = tasks + (size_t)t * HM_TASK_FIELDS;
        const double *corr = corrections + (size_t)task[HM_TASK_CLASS] * n_dev;
        double *o_row = out + (size_t)t * HM_OUT_FIELDS;
        double *counts = o_row + HM_OUT_COUNTS;
        double mins[HM_N_OBJECTIVES], inv[HM_N_OBJECTIVES], top[HM_MAX_GANG + 1];
        int32_t chosen[HM_MAX_GANG + 1];
        int k = (int)task[HM_TASK_COUNT];
        double work = task[HM_TASK_GFLOP] / task[HM_TASK_COUNT];
        double moved = task[HM_TASK_BYTES] / task[HM_TASK_COUNT];
        int n_chosen, o, j;
        int32_t n_ok, n_late, n_excluded = 0, i;
        assess_t ax;
        double guard_s = 0.0, congestion = 0.0;
        const double *bound = (bounds->rows != NULL && task[HM_TASK_CLASS] < bounds->classes)
                                  ? bounds->rows + (size_t)task[HM_TASK_CLASS] * n_dev
                                  : NULL;

        for (o = 0; o < HM_OUT_FIELDS; o++) o_row[o] = 0.0;
        for (j = 0; j < HM_MAX_GANG; j++) o_row[HM_OUT_ASSIGNED + j] = HM_NO_DEVICE;
        o_row[HM_OUT_RUNNER_UP] = HM_NO_DEVICE;
        for (o = 0; o < HM_N_OBJECTIVES; o++) mins[o] = INFINITY;
        if (visit != NULL) { /* the devices not listed are excluded: marked at once */
            if (reasons != NULL) memset(reasons + (size_t)t * n_dev, HM_R_EXCLUDED, (size_t)n_dev);
            n_excluded = n_dev - n_visit;
        }
        ax.task = task;
        ax.corr = corr;
        ax.opt = opt;
        ax.work = work;
        ax.moved = moved;
        ax.counts = counts;
        for (o = 0; o < HM_N_OBJECTIVES; o++) ax.mins[o] = INFINITY;
        ax.reasons = reasons != NULL ? reasons + (size_t)t * n_dev : NULL;
        ax.n_ok = ax.n_late = 0;
        if (visit != NULL) {
            for (i = 0; i < n_visit; i++) assess(&ax, devices, scratch, visit[i]);
        } else {
            for (d = 0; d < n_dev; d++) {
                if (allowed != NULL && !allowed[d]) { /* not a candidate: counted after */
                    scratch[(size_t)d * HM_SCR_FIELDS + HM_SCR_REASON] = (double)HM_R_EXCLUDED;
                    if (ax.reasons != NULL) ax.reasons[d] = HM_R_EXCLUDED;
                    n_excluded++;
                    continue;
                }
                assess(&ax, devices, scratch, d);
            }
        }
        n_ok = ax.n_ok;
        n_late = ax.n_late;
        for (o = 0; o < HM_N_OBJECTIVES; o++) mins[o] = ax.mins[o];
        counts[HM_R_EXCLUDED] += (double)n_excluded; /* whole numbers: as one at a time */
        if (n_ok < k) {
            /* no k devices meet the deadline: the earliest finishes, unless told to drop */
            if (n_ok + n_late < k || ((int)task[HM_TASK_FLAGS] & HM_TF_DROP_IF_LATE)) continue;
            o_row[HM_OUT_FLAGS] = (double)HM_OF_LATE;
            for (o = 0; o < HM_N_OBJECTIVES; o++) {
                mins[o] = INFINITY;
                inv[o] = 0.0;
            }
            for (i = 0; i < n_visit; i++) {
                double *scr = scratch + (size_t)(visit != NULL ? visit[i] : i) * HM_SCR_FIELDS;
                if (scr[HM_SCR_REASON] == (double)HM_R_DEADLINE) scr[HM_SCR_REASON] = 0.0;
                if (scr[HM_SCR_REASON] != 0.0) continue;
                for (o = 0; o < HM_N_OBJECTIVES; o++)
                    if (scr[o] < mins[o]) mins[o] = scr[o];
            }
            inv[HM_OBJ_LATENCY] = 1.0 / (mins[HM_OBJ_LATENCY] + NORM_FLOOR[HM_OBJ_LATENCY]);
        } else {
            for (o = 0; o < HM_N_OBJECTIVES; o++)
                inv[o] = weights[o] / (mins[o] + NORM_FLOOR[o]);
            if (k == 1 && weights[HM_W_QUEUE_GUARD] > 0.0)
                guard_s = weights[HM_W_QUEUE_GUARD] * mins[HM_OBJ_LATENCY];
            congestion = weights[HM_W_CONGESTION] * inv[HM_OBJ_LATENCY];
        }
        n_chosen = rank(devices, visit, n_visit, scratch, inv, mins, k, guard_s, congestion,
                        bound, opt, chosen, top);
        if (n_chosen > k) {
            n_chosen--;
            o_row[HM_OUT_RUNNER_UP] = (double)chosen[n_chosen];
            o_row[HM_OUT_EST + HM_EST_RUNNER_UP_SCORE] = top[n_chosen];
        }
        record(chosen, n_chosen, scratch, inv, mins, o_row);
        if (opt->commit) charge(devices, task, o_row);
    }
    return HM_ST_OK;
}

int hm_place_batch(double *devices, int32_t n_dev, const double *tasks, int32_t n_task,
                   const double *weights, const double *corrections, int32_t n_classes,
                   double *scratch, double *out, uint8_t *reasons, int32_t *bad_index) {
    return place(devices, n_dev, tasks, n_task, weights, corrections, n_classes, scratch, out,
                 reasons, NULL, bad_index, 0, &PLAIN, &NO_BOUNDS);
}
