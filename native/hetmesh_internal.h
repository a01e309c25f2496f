/* hetmesh placement kernel: what its source files share, not part of the public interface
 * (hetmesh_kernel.h is the contract; cffi sees only that).
 *
 * hetmesh_input_checks.c  validation of a call's rows (check_inputs, first_outside)
 * hetmesh_place.c         the scoring and placement core: place(), charge(), hm_place_batch
 * hetmesh_bound_call.c    bound calls (hm_call): hm_place_bound's modes (the exploration's
 *                         passes, the probe of clamped factors) and hm_place_one's book
 * hetmesh_live.c          the live-column write, hm_set_live
 */
#ifndef HETMESH_INTERNAL_H
#define HETMESH_INTERNAL_H

#include "hetmesh_kernel.h"

#include <stdint.h>

/* functions and data shared between the kernel's files stay out of the library's exports */
#if defined(__GNUC__)
#define HM_INTERNAL __attribute__((visibility("hidden")))
#else
#define HM_INTERNAL
#endif

/* x is an integer in [lo, hi] (0 <= lo, hi < 2^52): adding and removing 2^52 rounds it. */
static inline int small_int(double x, double lo, double hi) {
    const double two52 = 4503599627370496.0;
    return (x >= lo) & (x <= hi) & (((x + two52) - two52) == x);
}

/* Whether h is a Health value (0 online, 1 suspect, 2 offline). */
static inline int health_ok(double h) {
    return (h == 0.0) | (h == 1.0) | (h == 2.0);
}

/* One pass's options: the optimistic corrections (divisors, except where busy), a pass
 * restricted to one device (only >= 0), whether its choice is charged (commit), and the
 * probe of clamped factors (reset: a factor >= reset_hi or <= reset_lo counts as 1). */
typedef struct {
    const double *divisors;
    const uint8_t *busy;
    int32_t only;
    int commit;
    int reset;
    double reset_lo, reset_hi;
    int checked; /* the inputs passed check_inputs in this call already (an exploration's
                  * later passes: nothing was written since its first) */
} pass_opts;

/* The pessimistic bounds a pass charges by (hm_call.bound_rows): rows of `classes` classes. */
typedef struct {
    const double *rows;
    int32_t classes;
} bounds_t;

/* A pass with no options: every candidate, committed, inputs checked (place()'s usual). */
HM_INTERNAL extern const pass_opts PLAIN;

/* hetmesh_input_checks.c */
/* The first of x[0..n) that is not in [lo, DBL_MAX] ((lo, DBL_MAX] when open), or -1. */
HM_INTERNAL int32_t first_outside(const double *x, int32_t n, double lo, int open);
/* The inputs of a place() call, for it to refuse (a status, and *bad_index) or accept. */
HM_INTERNAL int32_t check_inputs(const double *devices, int32_t n_dev, const double *tasks,
                                 int32_t n_task, const double *weights,
                                 const double *corrections, int32_t n_classes,
                                 int32_t *bad_index, int devices_checked, const double *bounds,
                                 int32_t bound_classes);

/* hetmesh_place.c */
/* Charge the devices of an output row (its HM_OUT_ASSIGNED, HM_OUT_CHARGED) with the task. */
HM_INTERNAL void charge(double *devices, const double *task, const double *o_row);
/* Place n_task tasks over n_dev devices (hm_place_batch, and each pass of a bound call). */
HM_INTERNAL int place(double *devices, int32_t n_dev, const double *tasks, int32_t n_task,
                      const double *weights, const double *corrections, int32_t n_classes,
                      double *scratch, double *out, uint8_t *reasons, const uint8_t *allowed,
                      int32_t *bad_index, int devices_checked, const pass_opts *opt,
                      const bounds_t *bounds);

#endif
