/* A job of one, linked with the static library (sode::static): no MPI,
 * no launcher. A periodic 2-D field exchanges with itself; every halo cell
 * must hold the value of the owned cell it wraps around to.
 *
 *   ./alone */
#include <sode.h>

#include <stdint.h>
#include <stdio.h>

enum { NY = 6, NX = 9, H = 2 };

static double value(int64_t i, int64_t j) { return (double)(i * 100 + j); }

static int64_t wrap(int64_t i, int64_t n) { return ((i % n) + n) % n; }

int main(void) {
    static double u[NY + 2 * H][NX + 2 * H];
    for (int64_t i = 0; i < NY + 2 * H; i++) {
        for (int64_t j = 0; j < NX + 2 * H; j++) {
            int owned = i >= H && i < NY + H && j >= H && j < NX + H;
            u[i][j] = owned ? value(i - H, j - H) : -1.0;
        }
    }
    sode_comm *c = NULL;
    sode_exchange *x = NULL;
    int dims[2] = {1, 1}, coords[2] = {0, 0}, periodic[2] = {1, 1}, h[2] = {H, H};
    int64_t ext[2] = {NY + 2 * H, NX + 2 * H}, first[2] = {H, H}, own[2] = {NY, NX};
    if (sode_comm_create_env(30.0, &c) != SODE_OK
        || sode_exchange_create_cart(c, 2, dims, coords, periodic, h, h, SODE_BOX, &x) != SODE_OK
        || sode_exchange_add_field(x, &u[0][0], SODE_F64, 2, ext, first, own, NULL, NULL, SODE_ORDER_C) != SODE_OK
        || sode_exchange_commit(x) != SODE_OK || sode_exchange_start(x) != SODE_OK
        || sode_exchange_wait(x, 30.0) != SODE_OK) {
        fprintf(stderr, "alone: %s\n", sode_last_error());
        return 1;
    }
    int wrong = 0, halo = 0;
    for (int64_t i = 0; i < NY + 2 * H; i++) {
        for (int64_t j = 0; j < NX + 2 * H; j++) {
            double want = value(wrap(i - H, NY), wrap(j - H, NX));
            halo += !(i >= H && i < NY + H && j >= H && j < NX + H);
            wrong += u[i][j] != want;
        }
    }
    if (sode_exchange_free(&x) != SODE_OK || sode_comm_free(&c) != SODE_OK) {
        fprintf(stderr, "alone: %s\n", sode_last_error());
        return 1;
    }
    if (wrong) {
        fprintf(stderr, "alone: %d of %d cells wrong\n", wrong, (NY + 2 * H) * (NX + 2 * H));
        return 1;
    }
    printf("ok sode %s, linked statically: a job of one, %d halo cells wrapped around\n", sode_version(), halo);
    return 0;
}
