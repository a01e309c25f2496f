/* hetmesh placement kernel. See hetmesh_kernel.h for the contract.
 *
 * The arithmetic mirrors edge_agent/placement/reference.py operation for operation,
 * so that the kernel and its Python twin agree exactly (build with -ffp-contract=off).
 */
#include "hetmesh_kernel.h"

#include <math.h>
#include <stddef.h>

static const double NORM_FLOOR[HM_N_OBJECTIVES] = {
    HM_NORM_FLOOR_0, HM_NORM_FLOOR_1, HM_NORM_FLOOR_2,
    HM_NORM_FLOOR_3, HM_NORM_FLOOR_4, HM_NORM_FLOOR_5};

int hm_abi_version(void) { return HM_ABI_VERSION; }

static int small_int(double x, double lo, double hi) {
    return x >= lo && x <= hi && x == floor(x);
}

static int device_ok(const double *r) {
    int i;
    for (i = 0; i < HM_DEV_FIELDS; i++) {
        if (!isfinite(r[i]) || r[i] < 0.0) return 0;
    }
    return small_int(r[HM_DEV_KIND], 0, 31) && small_int(r[HM_DEV_PREC_MASK], 0, 2147483647.0) &&
           small_int(r[HM_DEV_OPS_MASK], 0, 2147483647.0) &&
           small_int(r[HM_DEV_FORMAT_MASK], 0, 2147483647.0) && r[HM_DEV_EFFICIENCY] > 0.0 &&
           r[HM_DEV_EFFICIENCY] <= 1.0 && r[HM_DEV_UTIL] <= 1.0 && r[HM_DEV_PRED_UTIL] <= 1.0 &&
           small_int(r[HM_DEV_HEALTH], 0, 2) && small_int(r[HM_DEV_CONFIG], 0, 2147483647.0);
}

static int task_ok(const double *r, int32_t n_classes) {
    int i;
    for (i = 0; i < HM_TASK_FIELDS; i++) {
        if (!isfinite(r[i])) return 0;
        if (i != HM_TASK_FORMAT && r[i] < 0.0) return 0;
    }
    if (r[HM_TASK_FORMAT] != -1.0 && !small_int(r[HM_TASK_FORMAT], 0, 31)) return 0;
    return small_int(r[HM_TASK_KINDS_MASK], 0, 2147483647.0) && small_int(r[HM_TASK_PREC], 0, 31) &&
           small_int(r[HM_TASK_OPS_MASK], 0, 2147483647.0) &&
           small_int(r[HM_TASK_COUNT], 1, HM_MAX_GANG) &&
           small_int(r[HM_TASK_CLASS], 0, (double)n_classes - 1.0) &&
           small_int(r[HM_TASK_CONFIG], 0, 2147483647.0);
}

static double peak_for(const double *dev, int prec) {
    if (prec == 0 || prec == 3) return dev[HM_DEV_PEAK_INT8];
    if (prec == 1 || prec == 4) return dev[HM_DEV_PEAK_FP16];
    return dev[HM_DEV_PEAK_FP32];
}

static int static_reason(const double *dev, const double *task) {
    uint32_t kind = (uint32_t)dev[HM_DEV_KIND];
    int prec = (int)task[HM_TASK_PREC];
    uint32_t kinds = (uint32_t)task[HM_TASK_KINDS_MASK];
    int fmt = (int)task[HM_TASK_FORMAT];
    if (dev[HM_DEV_HEALTH] == 2.0) return HM_R_OFFLINE;
    if (kinds != 0 && !((kinds >> kind) & 1u)) return HM_R_KIND;
    if (!(((uint32_t)dev[HM_DEV_PREC_MASK] >> prec) & 1u) || peak_for(dev, prec) <= 0.0)
        return HM_R_PRECISION;
    if ((uint32_t)task[HM_TASK_OPS_MASK] & ~(uint32_t)dev[HM_DEV_OPS_MASK]) return HM_R_OPERATORS;
    if (fmt >= 0 && !(((uint32_t)dev[HM_DEV_FORMAT_MASK] >> fmt) & 1u)) return HM_R_FORMAT;
    if (task[HM_TASK_MEM] > dev[HM_DEV_MEM_FREE]) return HM_R_MEMORY;
    return HM_R_OK;
}

static int estimate(const double *dev, const double *task, double corr, double *scr) {
    double k = task[HM_TASK_COUNT];
    double work = task[HM_TASK_GFLOP] / k;
    double moved = task[HM_TASK_BYTES] / k;
    double compute_s = work / (peak_for(dev, (int)task[HM_TASK_PREC]) * dev[HM_DEV_EFFICIENCY]);
    double mem_s = dev[HM_DEV_MEM_BW] > 0.0 ? moved / (dev[HM_DEV_MEM_BW] * 1e9) : 0.0;
    double roof = (mem_s > compute_s ? mem_s : compute_s) + dev[HM_DEV_DISPATCH_S];
    double service = roof * corr;
    double u = dev[HM_DEV_PRED_UTIL] > dev[HM_DEV_UTIL] ? dev[HM_DEV_PRED_UTIL] : dev[HM_DEV_UTIL];
    double service_eff, cfg, reconf, link, queue, latency, energy, mem_total, frag;
    double max_lat, deadline;
    if (u > HM_UTIL_CAP) u = HM_UTIL_CAP;
    service_eff = service / (1.0 - u);
    cfg = task[HM_TASK_CONFIG];
    reconf = (cfg != 0.0 && dev[HM_DEV_CONFIG] != cfg) ? dev[HM_DEV_RECONF_S] : 0.0;
    link = dev[HM_DEV_LINK_S];
    if (link > 0.0 && dev[HM_DEV_LINK_BW] > 0.0)
        link = link + task[HM_TASK_IN_BYTES] / (dev[HM_DEV_LINK_BW] * 1e9);
    queue = dev[HM_DEV_QUEUE_S];
    latency = queue + reconf + link + service_eff;
    energy = dev[HM_DEV_MAX_W] * (service + reconf);
    mem_total = dev[HM_DEV_MEM_TOTAL];
    if (queue == 0.0 && dev[HM_DEV_MEM_FREE] >= mem_total)
        frag = 1.0;
    else if (mem_total > 0.0)
        frag = (dev[HM_DEV_MEM_FREE] - task[HM_TASK_MEM]) / mem_total;
    else
        frag = 0.0;
    scr[HM_OBJ_LATENCY] = latency;
    scr[HM_OBJ_ENERGY] = energy;
    scr[HM_OBJ_THROUGHPUT] = service_eff + reconf;
    scr[HM_OBJ_BALANCE] = u + (queue + service_eff) / HM_BALANCE_HORIZON_S;
    scr[HM_OBJ_FRAGMENTATION] = frag;
    scr[HM_OBJ_CARBON] = energy / 3.6e6 * dev[HM_DEV_CARBON];
    scr[HM_SCR_SERVICE_EFF] = service_eff;
    scr[HM_SCR_RECONF] = reconf;
    max_lat = task[HM_TASK_MAX_LAT_S];
    if (max_lat > 0.0 && latency > max_lat) return HM_R_LATENCY;
    deadline = task[HM_TASK_DEADLINE_S];
    if (deadline > 0.0 && latency > deadline) return HM_R_DEADLINE;
    return HM_R_OK;
}

static int32_t check_inputs(const double *devices, int32_t n_dev, const double *tasks,
                            int32_t n_task, const double *weights, const double *corrections,
                            int32_t n_classes, int32_t *bad_index) {
    int32_t i;
    double wsum = 0.0;
    for (i = 0; i < HM_N_OBJECTIVES; i++) {
        if (!isfinite(weights[i]) || weights[i] < 0.0) return HM_ST_BAD_POLICY;
        wsum += weights[i];
    }
    if (wsum <= 0.0) return HM_ST_BAD_POLICY;
    for (i = 0; i < n_classes * n_dev; i++) {
        if (!(isfinite(corrections[i]) && corrections[i] > 0.0)) {
            *bad_index = i;
            return HM_ST_BAD_CORRECTION;
        }
    }
    for (i = 0; i < n_dev; i++) {
        if (!device_ok(devices + (size_t)i * HM_DEV_FIELDS)) {
            *bad_index = i;
            return HM_ST_BAD_DEVICE;
        }
    }
    for (i = 0; i < n_task; i++) {
        if (!task_ok(tasks + (size_t)i * HM_TASK_FIELDS, n_classes)) {
            *bad_index = i;
            return HM_ST_BAD_TASK;
        }
    }
    return HM_ST_OK;
}

/* Charge the chosen devices with the task and record its estimates. */
static void commit(double *devices, const double *task, const int32_t *chosen, int n_chosen,
                   const double *scratch, const double *inv, const double *mins,
                   int32_t *assigned, double *est, double *comp) {
    const double *first = scratch + (size_t)chosen[0] * HM_SCR_FIELDS;
    int o, j;
    for (o = 0; o < HM_N_OBJECTIVES; o++) comp[o] = (first[o] - mins[o]) * inv[o];
    est[HM_EST_SCORE] = first[HM_SCR_SCORE];
    for (j = 0; j < n_chosen; j++) {
        const double *scr = scratch + (size_t)chosen[j] * HM_SCR_FIELDS;
        double *row = devices + (size_t)chosen[j] * HM_DEV_FIELDS;
        assigned[j] = chosen[j];
        if (scr[HM_OBJ_LATENCY] > est[HM_EST_LATENCY_S]) est[HM_EST_LATENCY_S] = scr[HM_OBJ_LATENCY];
        if (scr[HM_SCR_SERVICE_EFF] > est[HM_EST_SERVICE_S])
            est[HM_EST_SERVICE_S] = scr[HM_SCR_SERVICE_EFF];
        est[HM_EST_ENERGY_J] += scr[HM_OBJ_ENERGY];
        est[HM_EST_CARBON_G] += scr[HM_OBJ_CARBON];
        row[HM_DEV_QUEUE_S] += scr[HM_SCR_SERVICE_EFF] + scr[HM_SCR_RECONF];
        row[HM_DEV_MEM_FREE] -= task[HM_TASK_MEM];
        if (task[HM_TASK_CONFIG] != 0.0) row[HM_DEV_CONFIG] = task[HM_TASK_CONFIG];
    }
}

int hm_place_batch(double *devices, int32_t n_dev, const double *tasks, int32_t n_task,
                   const double *weights, const double *corrections, int32_t n_classes,
                   double *scratch, int32_t *assigned, int32_t *runner_up, double *estimates,
                   double *components, int32_t *reject_counts, uint8_t *reasons,
                   int32_t *bad_index) {
    int32_t t, d;
    int st;
    if (bad_index == NULL) return HM_ST_BAD_SHAPE;
    *bad_index = -1;
    if (n_dev < 0 || n_task < 0 || n_classes < 1) return HM_ST_BAD_SHAPE;
    if (weights == NULL || corrections == NULL) return HM_ST_BAD_SHAPE;
    if (n_dev > 0 && (devices == NULL || scratch == NULL)) return HM_ST_BAD_SHAPE;
    if (n_task > 0 && (tasks == NULL || assigned == NULL || runner_up == NULL ||
                       estimates == NULL || components == NULL || reject_counts == NULL))
        return HM_ST_BAD_SHAPE;
    if ((int64_t)n_classes * n_dev > INT32_MAX) return HM_ST_BAD_SHAPE;
    st = check_inputs(devices, n_dev, tasks, n_task, weights, corrections, n_classes, bad_index);
    if (st != HM_ST_OK) return st;

    for (t = 0; t < n_task; t++) {
        const double *task = tasks + (size_t)t * HM_TASK_FIELDS;
        const double *corr = corrections + (size_t)task[HM_TASK_CLASS] * n_dev;
        int32_t *counts = reject_counts + (size_t)t * HM_N_REASONS;
        int32_t *asg = assigned + (size_t)t * HM_MAX_GANG;
        double *est = estimates + (size_t)t * HM_N_EST;
        double *comp = components + (size_t)t * HM_N_OBJECTIVES;
        double mins[HM_N_OBJECTIVES], inv[HM_N_OBJECTIVES];
        int32_t chosen[HM_MAX_GANG + 1];
        int k = (int)task[HM_TASK_COUNT];
        int n_chosen = 0, o, j;
        int32_t n_ok = 0;

        for (o = 0; o < HM_N_REASONS; o++) counts[o] = 0;
        for (o = 0; o < HM_N_OBJECTIVES; o++) mins[o] = INFINITY;
        for (d = 0; d < n_dev; d++) {
            const double *dev = devices + (size_t)d * HM_DEV_FIELDS;
            double *scr = scratch + (size_t)d * HM_SCR_FIELDS;
            int reason = static_reason(dev, task);
            if (reason == HM_R_OK) reason = estimate(dev, task, corr[d], scr);
            scr[HM_SCR_REASON] = (double)reason;
            if (reasons != NULL) reasons[(size_t)t * n_dev + d] = (uint8_t)reason;
            if (reason != HM_R_OK) {
                counts[reason]++;
                continue;
            }
            n_ok++;
            for (o = 0; o < HM_N_OBJECTIVES; o++)
                if (scr[o] < mins[o]) mins[o] = scr[o];
        }
        for (j = 0; j < HM_MAX_GANG; j++) asg[j] = HM_NO_DEVICE;
        runner_up[t] = HM_NO_DEVICE;
        for (o = 0; o < HM_N_EST; o++) est[o] = 0.0;
        for (o = 0; o < HM_N_OBJECTIVES; o++) comp[o] = 0.0;
        if (n_ok < k) continue;

        for (o = 0; o < HM_N_OBJECTIVES; o++) inv[o] = weights[o] / (mins[o] + NORM_FLOOR[o]);
        for (d = 0; d < n_dev; d++) {
            double *scr = scratch + (size_t)d * HM_SCR_FIELDS;
            double score = 0.0;
            if (scr[HM_SCR_REASON] != 0.0) continue;
            for (o = 0; o < HM_N_OBJECTIVES; o++) score += (scr[o] - mins[o]) * inv[o];
            if (devices[(size_t)d * HM_DEV_FIELDS + HM_DEV_HEALTH] == 1.0)
                score += HM_SUSPECT_PENALTY;
            scr[HM_SCR_SCORE] = score;
        }
        /* the k best (ties: lowest index), then one more as the runner-up */
        while (n_chosen < k + 1) {
            int32_t best = HM_NO_DEVICE;
            double best_score = INFINITY;
            for (d = 0; d < n_dev; d++) {
                const double *scr = scratch + (size_t)d * HM_SCR_FIELDS;
                int taken = 0;
                if (scr[HM_SCR_REASON] != 0.0) continue;
                for (j = 0; j < n_chosen; j++)
                    if (chosen[j] == d) taken = 1;
                if (taken) continue;
                if (scr[HM_SCR_SCORE] < best_score) {
                    best_score = scr[HM_SCR_SCORE];
                    best = d;
                }
            }
            if (best == HM_NO_DEVICE) break;
            chosen[n_chosen++] = best;
        }
        if (n_chosen > k) {
            n_chosen--;
            runner_up[t] = chosen[n_chosen];
            est[HM_EST_RUNNER_UP_SCORE] =
                scratch[(size_t)chosen[n_chosen] * HM_SCR_FIELDS + HM_SCR_SCORE];
        }
        commit(devices, task, chosen, n_chosen, scratch, inv, mins, asg, est, comp);
    }
    return HM_ST_OK;
}
