/* Faces packed or in place over RDMA: two ranks on a 2 x 1 grid exchange
 * the rows of one double field (halo of h rows, one halo column each side,
 * so each face is h separate runs), every neighbour over RDMA, once with
 * every face packed and unpacked (SODE_ZERO_COPY_NEVER), once read and
 * written in place by the device (SODE_ZERO_COPY_ALWAYS), and once with
 * the in-place exchange started on another array of the same layout
 * (staged: packed and unpacked through sode's buffers), in the same run,
 * rotating round by round which goes first. Prints a table: microseconds
 * per exchange (rank 0's mean over a round), median and minimum of the
 * rounds, and in place / packed and staged / packed of the medians; then
 * checks that all three left the same field, bit for bit, with the peer's
 * rows in its halo.
 *
 *   (ranks started by sode-run or SODE_* variables, 2 of them)
 *   ./zerocopy [rounds [iterations per round]]
 */
#include <sode.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank;

static void check(int rc, const char *what) {
    if (rc != SODE_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, sode_last_error());
        exit(2);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* An exchange of `u` (rows + 2h by n + 2, C order) in zero-copy `mode`. */
static sode_exchange *exchange(sode_comm *comm, double *u, int rows, int n, int h, int mode) {
    int dims[2] = {2, 1}, coords[2] = {rank, 0}, periodic[2] = {0, 0};
    int lo[2] = {h, 1}, hi[2] = {h, 1};
    sode_exchange *x;
    check(sode_exchange_create_cart(comm, 2, dims, coords, periodic, lo, hi, SODE_STAR, &x),
          "create");
    check(sode_exchange_set_transport(x, SODE_TRANSPORT_RDMA), "transport");
    check(sode_exchange_set_zero_copy(x, mode), "zero copy");
    int64_t ext[2] = {rows + 2 * h, n + 2}, owned_lo[2] = {h, 1}, own[2] = {rows, n};
    check(sode_exchange_add_field(x, u, SODE_F64, 2, ext, owned_lo, own, NULL, NULL, SODE_ORDER_C),
          "add field");
    check(sode_exchange_commit(x), "commit");
    return x;
}

/* Whether the halo rows hold the peer's owned rows next to this rank
 * (the peer filled its field with peer * 1e9 + cell index). */
static int halo_is_peers(const double *u, int rows, int n, int h) {
    int width = n + 2;
    for (int k = 0; k < h; k++) {
        /* Rank 0's high halo is rank 1's first owned rows; rank 1's low
         * halo is rank 0's last owned rows. */
        int here = rank == 0 ? h + rows + k : k, there = rank == 0 ? h + k : rows + k;
        for (int j = 1; j <= n; j++) {
            double want = (1 - rank) * 1e9 + (double)there * width + j;
            if (u[(size_t)here * width + j] != want) {
                return 0;
            }
        }
    }
    return 1;
}

/* Mean microseconds per exchange over `iters`, started on `array` (NULL:
 * the field's own). */
static double round_us(sode_exchange *x, int iters, double *array) {
    void *arrays[1] = {array};
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        check(sode_exchange_start_arrays(x, 1, arrays), "start");
        check(sode_exchange_wait(x, 60.0), "wait");
    }
    return (now() - t0) / iters * 1e6;
}

/* Every cell of a rank's field (halo included) as this rank fills it. */
static void fill(double *u, size_t cells) {
    for (size_t c = 0; c < cells; c++) {
        u[c] = rank * 1e9 + (double)c;
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7, iters = argc > 2 ? atoi(argv[2]) : 100;
    sode_comm *comm;
    check(sode_comm_create_env(60.0, &comm), "comm");
    int size;
    check(sode_comm_rank(comm, &rank), "rank");
    check(sode_comm_size(comm, &size), "size");
    if (size != 2 || rounds < 1 || iters < 1 || rounds > 99) {
        fprintf(stderr, "zerocopy: 2 ranks, 1 to 99 rounds, at least 1 iteration (got %d ranks)\n",
                size);
        return 2;
    }
    if (rank == 0) {
        printf("2 ranks over RDMA, one double field, faces of h rows (h runs each); %d rounds of "
               "%d exchanges, rotating which goes first\n\n",
               rounds, iters);
        printf("| h | row (bytes) | face (bytes) | packed median us | packed min | in place median "
               "us | in place min | staged median us | staged min | in place / packed | staged / "
               "packed |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    const int widths[2] = {1, 4};
    /* Rows of 256 B to 256 KiB. */
    const int lengths[7] = {32, 128, 512, 1024, 2048, 8192, 32768};
    int failures = 0;
    for (int w = 0; w < 2; w++) {
        for (int l = 0; l < 7; l++) {
            int h = widths[w], rows = 8, n = lengths[l];
            size_t cells = (size_t)(rows + 2 * h) * (n + 2);
            double *u = malloc(cells * sizeof *u), *other = malloc(cells * sizeof *u),
                   *packed_halo = malloc(cells * sizeof *u);
            if (!u || !other || !packed_halo) {
                fprintf(stderr, "rank %d: out of memory\n", rank);
                return 2;
            }
            fill(u, cells);
            fill(other, cells);
            /* Packed, in place, and in place started on `other`. */
            sode_exchange *x[3] = {exchange(comm, u, rows, n, h, SODE_ZERO_COPY_NEVER),
                                   exchange(comm, u, rows, n, h, SODE_ZERO_COPY_ALWAYS), NULL};
            x[2] = x[1];
            double *on[3] = {NULL, NULL, other};
            double t[3][99];
            for (int k = 0; k < 3; k++) { /* warm up each */
                round_us(x[k], iters / 10 + 1, on[k]);
            }
            for (int r = 0; r < rounds; r++) {
                /* Rotate which goes first. */
                for (int k = 0; k < 3; k++) {
                    int way = (r + k) % 3;
                    t[way][r] = round_us(x[way], iters, on[way]);
                }
            }
            /* All three leave the same field: the peer's rows in the halo. */
            fill(u, cells);
            round_us(x[0], 1, NULL);
            memcpy(packed_halo, u, cells * sizeof *u);
            fill(u, cells);
            round_us(x[1], 1, NULL);
            int same = memcmp(packed_halo, u, cells * sizeof *u) == 0 && halo_is_peers(u, rows, n, h);
            fill(u, cells);
            fill(other, cells);
            round_us(x[2], 1, other);
            same = same && memcmp(packed_halo, other, cells * sizeof *u) == 0;
            if (!same) {
                fprintf(stderr, "rank %d: packed, in place and staged differ, or miss the peer's rows (h %d, row %d)\n", rank, h, n);
                failures++;
            }
            if (rank == 0) {
                for (int k = 0; k < 3; k++) {
                    qsort(t[k], rounds, sizeof(double), cmp);
                }
                double p = t[0][rounds / 2], z = t[1][rounds / 2], st = t[2][rounds / 2];
                printf("| %d | %zu | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f |\n", h,
                       n * sizeof(double), (size_t)h * n * sizeof(double), p, t[0][0], z, t[1][0], st,
                       t[2][0], z / p, st / p);
                fflush(stdout);
            }
            check(sode_exchange_free(&x[0]), "free");
            check(sode_exchange_free(&x[1]), "free");
            free(u);
            free(other);
            free(packed_halo);
        }
    }
    check(sode_comm_free(&comm), "comm free");
    if (failures == 0 && rank == 0) {
        printf("\nok packed, in place and staged left the same field, the peer's rows in the halo, bit "
               "for bit\n");
    }
    return failures ? 1 : 0;
}
