/* A 2-D halo exchange (one double field, halo 1, 8 neighbours, periodic)
 * through sode and through MPI persistent requests (MPI_Send_init /
 * MPI_Recv_init of subarrays, MPI_Startall / MPI_Waitall), in the same run,
 * alternating, for blocks of 16^2 to 1024^2 cells per rank. Prints a table:
 * microseconds per exchange (the slowest rank's mean over a round), median
 * and minimum of the rounds, and sode / MPI of the medians.
 *
 *   mpirun -n 4 ./bench2d [rounds [divisor [largest block]]]
 *
 * (divisor: fewer iterations per round, for emulated machines; largest
 * block: skip the larger rows.)
 */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;

static void check(int rc, const char *what) {
    if (rc != SODE_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The persistent MPI exchange of `u` (n + 2 squared, C order). */
static int mpi_requests(MPI_Comm cart, double *u, int n, MPI_Request *req) {
    int k = 0, coords[2], me, dims[2], periods[2];
    MPI_Comm_rank(cart, &me);
    MPI_Cart_get(cart, 2, dims, periods, coords);
    int sizes[2] = {n + 2, n + 2};
    for (int d0 = -1; d0 <= 1; d0++) {
        for (int d1 = -1; d1 <= 1; d1++) {
            if (d0 == 0 && d1 == 0) {
                continue;
            }
            int o[2] = {d0, d1}, c[2], peer, ss[2], sn[2], rs[2], rn[2];
            for (int a = 0; a < 2; a++) {
                c[a] = (coords[a] + o[a] + dims[a]) % dims[a];
                ss[a] = o[a] == 1 ? n : 1;
                sn[a] = o[a] == 0 ? n : 1;
                rs[a] = o[a] == -1 ? 0 : o[a] == 1 ? n + 1 : 1;
                rn[a] = sn[a];
            }
            MPI_Cart_rank(cart, c, &peer);
            MPI_Datatype st, rt;
            MPI_Type_create_subarray(2, sizes, sn, ss, MPI_ORDER_C, MPI_DOUBLE, &st);
            MPI_Type_create_subarray(2, sizes, rn, rs, MPI_ORDER_C, MPI_DOUBLE, &rt);
            MPI_Type_commit(&st);
            MPI_Type_commit(&rt);
            int tag = (d0 + 1) * 3 + (d1 + 1), back = (1 - d0) * 3 + (1 - d1);
            MPI_Send_init(u, 1, st, peer, tag, cart, &req[k++]);
            MPI_Recv_init(u, 1, rt, peer, back, cart, &req[k++]);
            MPI_Type_free(&st);
            MPI_Type_free(&rt);
        }
    }
    return k;
}

/* Microseconds per exchange on the slowest rank, over `iters`. */
static double time_sode(sode_exchange *x, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        check(sode_exchange_start(x), "start");
        check(sode_exchange_wait(x, 60.0), "wait");
    }
    double us = (MPI_Wtime() - t) * 1e6 / iters, slowest;
    MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* GCC 12 reads MPICH's MPI_STATUSES_IGNORE ((MPI_Status *)1) as an array
 * of size 0; MPI is timed without statuses, as a code would run it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
static double time_mpi(MPI_Request *req, int k, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        MPI_Startall(k, req);
        MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
    }
    double us = (MPI_Wtime() - t) * 1e6 / iters, slowest;
    MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

static void row(MPI_Comm cart, int n, int rounds, int divisor) {
    size_t cells = (size_t)(n + 2) * (n + 2);
    double *us = calloc(cells, sizeof *us), *um = calloc(cells, sizeof *um);
    sode_comm *sc;
    sode_exchange *x;
    int h[2] = {1, 1};
    int64_t ext[2] = {n + 2, n + 2}, lo[2] = {1, 1}, own[2] = {n, n};
    check(sode_comm_create_mpi(cart, 60.0, &sc), "comm");
    check(sode_exchange_create_mpi_cart(sc, cart, h, h, SODE_BOX, &x), "create");
    check(sode_exchange_add_field(x, us, SODE_F64, 2, ext, lo, own, NULL, NULL, SODE_ORDER_C), "field");
    check(sode_exchange_commit(x), "commit");
    MPI_Request req[16];
    int k = mpi_requests(cart, um, n, req);
    int iters = (n <= 64 ? 2000 : n <= 256 ? 300 : 30) / divisor;
    if (iters < 10) {
        iters = 10;
    }
    time_sode(x, iters / 10);
    time_mpi(req, k, iters / 10);
    double *s = malloc(rounds * sizeof *s), *m = malloc(rounds * sizeof *m);
    for (int r = 0; r < rounds; r++) {
        /* Alternate which goes first. */
        if (r % 2 == 0) {
            s[r] = time_sode(x, iters);
            m[r] = time_mpi(req, k, iters);
        } else {
            m[r] = time_mpi(req, k, iters);
            s[r] = time_sode(x, iters);
        }
    }
    qsort(s, rounds, sizeof *s, cmp);
    qsort(m, rounds, sizeof *m, cmp);
    if (rank == 0) {
        printf("| %d x %d | %zu | %.1f | %.1f | %.1f | %.1f | %.2f |\n", n, n,
               (size_t)(4 * n + 4) * sizeof(double), s[rounds / 2], s[0], m[rounds / 2], m[0],
               s[rounds / 2] / m[rounds / 2]);
    }
    for (int i = 0; i < k; i++) {
        MPI_Request_free(&req[i]);
    }
    sode_exchange_free(&x);
    sode_comm_free(&sc);
    free(s);
    free(m);
    free(us);
    free(um);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size, dims[2] = {0, 0}, periods[2] = {1, 1}, rounds = argc > 1 ? atoi(argv[1]) : 7;
    int divisor = argc > 2 ? atoi(argv[2]) : 1, largest = argc > 3 ? atoi(argv[3]) : 1024;
    if (divisor < 1) {
        divisor = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rounds < 1) {
        rounds = 7;
    }
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    if (rank == 0) {
        printf("%d ranks on a %d x %d periodic grid, 8 neighbours, one double field, halo 1; "
               "us per exchange (slowest rank), %d rounds alternating\n\n",
               size, dims[0], dims[1], rounds);
        printf("| block per rank | bytes sent per rank | sode median | sode min | MPI persistent "
               "median | MPI min | sode / MPI |\n|---|---:|---:|---:|---:|---:|---:|\n");
    }
    int sizes[4] = {16, 64, 256, 1024};
    for (int i = 0; i < 4 && sizes[i] <= largest; i++) {
        row(cart, sizes[i], rounds, divisor);
    }
    MPI_Comm_free(&cart);
    MPI_Finalize();
    return 0;
}
