/* The cost of the C layer: a start and a wait of an empty exchange (one
 * rank, no neighbours, one field sode keeps: nothing to move) through
 * sode.h, in nanoseconds per start + wait,
 * median and minimum of 7 rounds. `ci/abi-cost.sh` runs it beside the same
 * calls made from Rust (capi/examples/abi_cost.rs). */
#define _POSIX_C_SOURCE 200809L
#include <sode.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    sode_comm *c;
    sode_exchange *x;
    int dims[2] = {1, 1}, coords[2] = {0, 0}, periodic[2] = {0, 0}, h[2] = {1, 1};
    int64_t ext[2] = {10, 10}, lo[2] = {1, 1}, own[2] = {8, 8};
    if (sode_comm_create_env(30.0, &c) != SODE_OK ||
        sode_exchange_create_cart(c, 2, dims, coords, periodic, h, h, SODE_BOX, &x) != SODE_OK ||
        sode_exchange_set_shared_fields(x, 1) != SODE_OK ||
        sode_exchange_add_field(x, NULL, SODE_F64, 2, ext, lo, own, NULL, NULL, SODE_ORDER_C) != SODE_OK ||
        sode_exchange_commit(x) != SODE_OK) {
        fprintf(stderr, "abi_cost: %s\n", sode_last_error());
        return 1;
    }
    const int iters = 1000000;
    double rounds[7];
    for (int r = 0; r < 7; r++) {
        double t = now_ns();
        for (int i = 0; i < iters; i++) {
            if (sode_exchange_start_set(x, 0) != SODE_OK || sode_exchange_wait(x, 1.0) != SODE_OK) {
                fprintf(stderr, "abi_cost: %s\n", sode_last_error());
                return 1;
            }
        }
        rounds[r] = (now_ns() - t) / iters;
    }
    qsort(rounds, 7, sizeof rounds[0], cmp);
    printf("c ns per start+wait: median %.1f min %.1f\n", rounds[3], rounds[0]);
    sode_exchange_free(&x);
    sode_comm_free(&c);
    return 0;
}
