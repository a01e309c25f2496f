/* hetmesh placement kernel: the checks of a call's inputs (check_inputs) before place()
 * reads them. See hetmesh_kernel.h for the contract; edge_agent/placement/reference_checks.py
 * is the Python twin.
 */
#include "hetmesh_internal.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define HM_CLASS_BITMAP_BITS 1024

/* Validation is branch-free (bitwise &) so that a fleet is checked in a few ns a device
 * (small_int and health_ok, in hetmesh_internal.h, as well). */
#define MASK_MAX 2147483647.0

/* True when none of x[0..n) is NaN, infinite or negative (-0.0 is fine). A vectorizable
 * pass over the high 32 bits (sign and exponent) flags suspects; they are re-checked exactly. */
static int all_finite_nonneg(const double *x, size_t n) {
    uint32_t flagged = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        uint64_t b;
        memcpy(&b, x + i, sizeof b);
        flagged |= (uint32_t)(b >> 32) >= 0x7FF00000u;
    }
    if (!flagged) return 1;
    for (i = 0; i < n; i++)
        if (!(x[i] >= 0.0 && x[i] <= DBL_MAX)) return 0;
    return 1;
}

/* The checks of a device row beyond all_finite_nonneg. Kind and masks are read truncated
 * to integers, as the Python twin's int() does. */
static int device_ranges_ok(const double *r) {
    return (r[HM_DEV_KIND] <= 31.0) & (r[HM_DEV_PREC_MASK] <= MASK_MAX) &
           (r[HM_DEV_OPS_MASK] <= MASK_MAX) & (r[HM_DEV_FORMAT_MASK] <= MASK_MAX) &
           (r[HM_DEV_EFFICIENCY] > 0.0) & (r[HM_DEV_EFFICIENCY] <= 1.0) &
           (r[HM_DEV_UTIL] <= 1.0) & (r[HM_DEV_PRED_UTIL] <= 1.0) &
           health_ok(r[HM_DEV_HEALTH]) & small_int(r[HM_DEV_SLOTS], 0, HM_MAX_SLOTS) &
           small_int(r[HM_DEV_SLOT_NEXT], 0, HM_MAX_SLOTS - 1);
}

static int task_ok(const double *r, int32_t n_classes) {
    int i;
    for (i = 0; i < HM_TASK_FIELDS; i++) {
        if (!isfinite(r[i])) return 0;
        if (r[i] < 0.0) return 0;
    }
    return small_int(r[HM_TASK_FORMAT], 0, MASK_MAX) &&
           small_int(r[HM_TASK_PREC_MASK], 0, (1 << HM_PREC_BITS) - 1) &&
           small_int(r[HM_TASK_FLAGS], 0, HM_TF_DROP_IF_LATE) &&
           small_int(r[HM_TASK_KINDS_MASK], 0, 2147483647.0) &&
           small_int(r[HM_TASK_PREC], 0, HM_PREC_BITS - 1) &&
           small_int(r[HM_TASK_OPS_MASK], 0, 2147483647.0) &&
           small_int(r[HM_TASK_COUNT], 1, HM_MAX_GANG) &&
           small_int(r[HM_TASK_CLASS], 0, (double)n_classes - 1.0) &&
           small_int(r[HM_TASK_CONFIG], 0, 2147483647.0);
}

/* x is in [lo, DBL_MAX], or (lo, DBL_MAX] when open (NaN is in neither). */
static int in_range(double x, double lo, int open) {
    return (open ? x > lo : x >= lo) & (x <= DBL_MAX);
}

/* The first of x[0..n) that is not in_range, or -1 (lo >= 0). Every call checks its class's
 * correction and bound rows, so first a pass that vectorises (as all_finite_nonneg's) flags
 * suspects by the high 32 bits alone: a double whose high word is in [floor_hi, 0x7FF00000)
 * is positive, finite and at least the double with high word floor_hi and low word 0,
 * which floor_hi keeps in range; only when one is flagged are they checked exactly. */
int32_t first_outside(const double *x, int32_t n, double lo, int open) {
    uint64_t lo_bits, b;
    uint32_t floor_hi, flagged = 0;
    int32_t i;
    memcpy(&lo_bits, &lo, sizeof lo_bits);
    floor_hi = (uint32_t)(lo_bits >> 32) + (uint32_t)(open || (uint32_t)lo_bits != 0u);
    for (i = 0; i < n; i++) {
        memcpy(&b, x + i, sizeof b);
        flagged |= ((uint32_t)(b >> 32) - floor_hi) >= (0x7FF00000u - floor_hi);
    }
    if (!flagged) return -1;
    for (i = 0; i < n; i++)
        if (!in_range(x[i], lo, open)) return i;
    return -1;
}

int32_t check_inputs(const double *devices, int32_t n_dev, const double *tasks,
                     int32_t n_task, const double *weights, const double *corrections,
                     int32_t n_classes, int32_t *bad_index, int devices_checked,
                     const double *bounds, int32_t bound_classes) {
    int32_t i;
    double wsum = 0.0;
    uint64_t seen[HM_CLASS_BITMAP_BITS / 64] = {0};
    for (i = 0; i < HM_N_OBJECTIVES; i++) {
        if (!isfinite(weights[i]) || weights[i] < 0.0) return HM_ST_BAD_POLICY;
        wsum += weights[i];
    }
    if (wsum <= 0.0) return HM_ST_BAD_POLICY;
    if (!(weights[HM_W_QUEUE_GUARD] == 0.0 ||
          (weights[HM_W_QUEUE_GUARD] >= 1.0 && weights[HM_W_QUEUE_GUARD] <= DBL_MAX)))
        return HM_ST_BAD_POLICY;
    if (!(weights[HM_W_CONGESTION] >= 0.0 && weights[HM_W_CONGESTION] <= DBL_MAX))
        return HM_ST_BAD_POLICY;
    if (!devices_checked) {
        if (!all_finite_nonneg(devices, (size_t)n_dev * HM_DEV_FIELDS)) {
            for (i = 0; i < n_dev; i++) {
                if (!all_finite_nonneg(devices + (size_t)i * HM_DEV_FIELDS, HM_DEV_FIELDS)) {
                    *bad_index = i;
                    return HM_ST_BAD_DEVICE;
                }
            }
        }
        for (i = 0; i < n_dev; i++) {
            if (!device_ranges_ok(devices + (size_t)i * HM_DEV_FIELDS)) {
                *bad_index = i;
                return HM_ST_BAD_DEVICE;
            }
        }
    }
    for (i = 0; i < n_task; i++) {
        if (!task_ok(tasks + (size_t)i * HM_TASK_FIELDS, n_classes)) {
            *bad_index = i;
            return HM_ST_BAD_TASK;
        }
    }
    /* only the correction rows this batch uses, each once (classes past the bitmap: each time) */
    for (i = 0; i < n_task; i++) {
        int32_t cls = (int32_t)tasks[(size_t)i * HM_TASK_FIELDS + HM_TASK_CLASS], d;
        const double *row = corrections + (size_t)cls * n_dev;
        if (cls < HM_CLASS_BITMAP_BITS) {
            uint64_t bit = 1ull << (cls & 63);
            if (seen[cls >> 6] & bit) continue;
            seen[cls >> 6] |= bit;
        }
        d = first_outside(row, n_dev, 0.0, 1);
        if (d < 0 && bounds != NULL && cls < bound_classes)
            d = first_outside(bounds + (size_t)cls * n_dev, n_dev, 1.0, 0);
        if (d >= 0) {
            *bad_index = cls * n_dev + d;
            return HM_ST_BAD_CORRECTION;
        }
    }
    return HM_ST_OK;
}
