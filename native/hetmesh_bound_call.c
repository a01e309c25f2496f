/* hetmesh placement kernel: bound calls (hm_call). hm_place_bound's modes (a plain pass,
 * the exploration's three passes, the probe of clamped factors) and hm_place_one, which keeps
 * the exploration and probe book. See hetmesh_kernel.h for the contract;
 * edge_agent/placement/reference_explore.py and reference_one.py are the Python twins.
 */
#include "hetmesh_internal.h"

#include <stddef.h>
#include <string.h>

/* place() over a bound call's buffers: the first n_task task rows into `out` (and
 * `reasons`), among `allowed`; the device rows are checked unless the last call left them
 * valid, and they count as checked after a call that succeeded. */
static int call_place(hm_call *c, int32_t n_task, double *out, uint8_t *reasons,
                      const uint8_t *allowed, const pass_opts *opt) {
    bounds_t bounds = {c->bound_rows, c->bound_rows != NULL ? c->bound_classes : 0};
    int st = place(c->devices, c->n_dev, c->tasks, n_task, c->weights, c->corrections,
                   c->n_classes, c->scratch, out, reasons, allowed, &c->bad_index,
                   c->devices_checked != 0, opt, &bounds);
    c->devices_checked = st == HM_ST_OK;
    return st;
}

/* One pass of an exploration over task row 0: into out row `row`, reasons row `row` if
 * asked (and kept); nothing is charged. */
static int explore_pass(hm_call *c, int row, int with_reasons, const pass_opts *opt) {
    uint8_t *reasons = (with_reasons && c->reasons != NULL) ? c->reasons + (size_t)row * c->n_dev
                                                            : NULL;
    return call_place(c, 1, c->out + (size_t)row * HM_OUT_FIELDS, reasons, c->allowed, opt);
}

/* HM_MODE_EXPLORE (see hm_place_bound). */
static int explore(hm_call *c) {
    const double *divisors = c->divisors;
    const uint8_t *busy = c->busy;
    int32_t *outcome = &c->outcome;
    pass_opts optimistic = {NULL, NULL, -1, 0, 0, 0.0, 0.0, 0};
    pass_opts honest = {NULL, NULL, -1, 0, 0, 0.0, 0.0, 0};
    const double *usual, *probe;
    int32_t d, chosen;
    int st, untried = 0, candidate = 0, hopeless;
    if (divisors == NULL) return HM_ST_BAD_SHAPE;
    *outcome = HM_EX_NO_UNTRIED;
    d = first_outside(divisors, c->n_dev, 1.0, 0);
    if (d >= 0) {
        c->bad_index = d;
        return HM_ST_BAD_CORRECTION;
    }
    st = explore_pass(c, HM_EX_ROW_USUAL, 1, &honest);
    if (st != HM_ST_OK) return st;
    usual = c->out + (size_t)HM_EX_ROW_USUAL * HM_OUT_FIELDS;
    for (d = 0; d < c->n_dev; d++) {
        if (divisors[d] > 1.0 && !(busy != NULL && busy[d])) {
            untried = 1;
            candidate |= c->allowed == NULL || c->allowed[d];
        }
    }
    if (!untried || !candidate) {
        *outcome = untried ? HM_EX_NONE_AMONG_CANDIDATES : HM_EX_NO_UNTRIED;
        charge(c->devices, c->tasks, usual);
        return HM_ST_OK;
    }
    optimistic.divisors = divisors;
    optimistic.busy = busy;
    optimistic.checked = 1; /* the usual pass checked the inputs; nothing was written since */
    st = explore_pass(c, HM_EX_ROW_OPTIMISTIC, 0, &optimistic);
    if (st != HM_ST_OK) return st;
    chosen = (int32_t)c->out[(size_t)HM_EX_ROW_OPTIMISTIC * HM_OUT_FIELDS + HM_OUT_ASSIGNED];
    if (chosen < 0 || divisors[chosen] == 1.0 || (busy != NULL && busy[chosen])) {
        *outcome = HM_EX_FRUITLESS;
        charge(c->devices, c->tasks, usual);
        return HM_ST_OK;
    }
    honest.only = chosen;
    honest.checked = 1;
    st = explore_pass(c, HM_EX_ROW_PROBE, 1, &honest);
    if (st != HM_ST_OK) return st;
    probe = c->out + (size_t)HM_EX_ROW_PROBE * HM_OUT_FIELDS;
    hopeless = usual[HM_OUT_ASSIGNED] >= 0.0 && ((int)usual[HM_OUT_FLAGS] & HM_OF_LATE);
    if (probe[HM_OUT_ASSIGNED] < 0.0 || (((int)probe[HM_OUT_FLAGS] & HM_OF_LATE) && !hopeless)) {
        *outcome = HM_EX_DEFERRED;
        charge(c->devices, c->tasks, usual);
        return HM_ST_OK;
    }
    *outcome = HM_EX_PROBE;
    charge(c->devices, c->tasks, probe);
    return HM_ST_OK;
}

/* HM_MODE_PROBE (see hm_place_bound). */
static int probe_clamped(hm_call *c) {
    pass_opts probe = {NULL, NULL, -1, 1, 0, 0.0, 0.0, 0};
    double cls, lo = c->clamp_lo, hi = c->clamp_hi;
    int32_t d, *stuck = &c->outcome;
    *stuck = 0;
    cls = c->n_dev > 0 && c->tasks != NULL ? c->tasks[HM_TASK_CLASS] : -1.0;
    if (small_int(cls, 0, (double)c->n_classes - 1.0)) { /* else place() refuses the task */
        const double *row = c->corrections + (size_t)cls * c->n_dev;
        for (d = 0; d < c->n_dev && !*stuck; d++) *stuck = row[d] >= hi || row[d] <= lo;
    }
    probe.reset = *stuck;
    probe.reset_lo = lo;
    probe.reset_hi = hi;
    return call_place(c, 1, c->out, c->reasons, c->allowed, &probe);
}

int hm_place_bound(hm_call *c, int32_t n_task) {
    if (c == NULL) return HM_ST_BAD_SHAPE;
    if (c->mode == HM_MODE_EXPLORE) return explore(c);
    if (c->mode == HM_MODE_PROBE) return probe_clamped(c);
    return call_place(c, n_task, c->out, c->reasons, c->allowed, &PLAIN);
}

/* A class's book row: its last decision (output row o, the usual one) was pressed, i.e. late
 * (HM_OUT_FLAGS nonzero) or congested (its latency over `congested` times its service). */
static void set_pressed(int64_t *row, const double *o, double congested) {
    row[HM_BK_PRESSED] = o[HM_OUT_FLAGS] != 0.0 ||
                         o[HM_OUT_EST + HM_EST_LATENCY_S] > congested * o[HM_OUT_EST + HM_EST_SERVICE_S];
}

int hm_place_one(hm_call *c, int32_t set, const char *task) {
    int64_t *bk, *row = NULL;
    double cls;
    int st;
    if (c == NULL || c->book == NULL || c->tasks == NULL) return HM_ST_BAD_SHAPE;
    if (set < -1 || set >= c->n_sets || (set >= 0 && c->sets == NULL)) return HM_ST_BAD_SHAPE;
    /* the task buffer is the caller's, writable (const only for the kernel's passes) */
    if (task != NULL) memcpy((double *)(uintptr_t)c->tasks, task, HM_TASK_FIELDS * sizeof(double));
    bk = c->book;
    cls = c->tasks[HM_TASK_CLASS];
    if (small_int(cls, 0, (double)c->book_classes - 1.0))
        row = bk + HM_BK_GLOBALS + (size_t)cls * HM_BK_CLASS_FIELDS;
    if (bk[HM_BK_COUNTING]) {
        bk[HM_BK_DECISIONS]++;
        if (row != NULL && bk[HM_BK_EXPLORING] && row[HM_BK_UNTRIED]) {
            int64_t tick = row[HM_BK_TICK] + 1, every = row[HM_BK_EVERY];
            if (row[HM_BK_PRESSED] && every > bk[HM_BK_HOPELESS_EVERY])
                every = bk[HM_BK_HOPELESS_EVERY];
            if (tick >= every) {
                const uint8_t *allowed = c->allowed;
                const double *divisors = c->divisors;
                row[HM_BK_TICK] = 0;
                if (c->divisor_rows == NULL) return HM_ONE_EXPLORE;
                c->allowed = set < 0 ? NULL : c->sets + (size_t)set * c->n_dev;
                c->divisors = c->divisor_rows + (size_t)cls * c->n_dev;
                st = explore(c);
                c->allowed = allowed;
                c->divisors = divisors;
                if (st != HM_ST_OK) return st;
                set_pressed(row, c->out + (size_t)HM_EX_ROW_USUAL * HM_OUT_FIELDS, c->congested);
                return HM_ONE_EXPLORED + c->outcome;
            }
            row[HM_BK_TICK] = tick;
        }
    }
    if (++bk[HM_BK_PROBE_TICK] >= bk[HM_BK_PROBE_EVERY]) {
        bk[HM_BK_PROBE_TICK] = 0;
        return HM_ONE_PROBE;
    }
    st = call_place(c, 1, c->out, c->reasons,
                    set < 0 ? NULL : c->sets + (size_t)set * c->n_dev, &PLAIN);
    if (st == HM_ST_OK && row != NULL && bk[HM_BK_COUNTING]) set_pressed(row, c->out, c->congested);
    return st;
}
