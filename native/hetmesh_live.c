/* hetmesh placement kernel: hm_set_live, the write of a bound call's live device columns
 * (checked first, written only when every value may stand). See hetmesh_kernel.h.
 */
#include "hetmesh_internal.h"

#include <float.h>
#include <stddef.h>

/* Whether v may stand in live column col (hm_set_live): 1 yes, 0 no, -1 not a live column. */
static int live_value_ok(int32_t col, double v) {
    int ok = (v >= 0.0) & (v <= DBL_MAX);
    switch (col) {
    case HM_DEV_UTIL:
    case HM_DEV_PRED_UTIL:
        return ok & (v <= 1.0);
    case HM_DEV_HEALTH:
        return health_ok(v);
    case HM_DEV_QUEUE_S:
    case HM_DEV_MEM_FREE:
    case HM_DEV_LINK_S:
    case HM_DEV_LINK_BW:
    case HM_DEV_CARBON:
        return ok;
    default:
        return -1;
    }
}

int32_t hm_set_live(hm_call *c, const int32_t *cols, int32_t n_cols, const double *values) {
    int32_t k, d, n_dev;
    if (c == NULL || n_cols < 0 || (n_cols > 0 && (cols == NULL || values == NULL)))
        return -2;
    n_dev = c->n_dev;
    for (k = 0; k < n_cols; k++) {
        const double *v = values + (size_t)k * n_dev;
        if (live_value_ok(cols[k], 0.0) < 0) return -2;
        for (d = 0; d < n_dev; d++)
            if (!live_value_ok(cols[k], v[d])) return k * n_dev + d;
    }
    for (k = 0; k < n_cols; k++) {
        const double *v = values + (size_t)k * n_dev;
        double *cell = c->devices + cols[k];
        for (d = 0; d < n_dev; d++) cell[(size_t)d * HM_DEV_FIELDS] = v[d];
    }
    return -1;
}
