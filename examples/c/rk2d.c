/* A Runge-Kutta code's halo exchange: three stage arrays through one
 * committed exchange (sode_exchange_start_arrays), checked bit for bit
 * against the same integration with MPI halo exchanges.
 *
 *   mpirun -n 4 ./rk2d [steps] [lend]
 *
 * The heat equation u_t = L(u) (a 9-point Laplacian, so corners count) on
 * a periodic 2-D grid, integrated by the three-stage strong-stability-
 * preserving Runge-Kutta scheme:
 *   s1 = u + dt L(u)
 *   s2 = 3/4 u + 1/4 (s1 + dt L(s1))
 *   u  = 1/3 u + 2/3 (s2 + dt L(s2))
 * Each L needs the halo of its own stage array: the exchange is committed
 * once, on u, and started on u, s1 and s2 in turn, as MPI takes a buffer
 * per call. The stage arrays are lent to it (sode_exchange_lend_arrays;
 * `lend` 0 does not), so that over RDMA their faces too travel in place,
 * and it prints how many starts went through sode's buffers instead. The
 * grid does not divide evenly among the ranks. */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NX 50
#define NY 37

static int rank;

#define CHECK_SODE(call)                                                                        \
    do {                                                                                        \
        int rc_ = (call);                                                                       \
        if (rc_ != SODE_OK) {                                                                   \
            fprintf(stderr, "rank %d: %s failed (%d): %s\n", rank, #call, rc_, sode_last_error()); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                       \
        }                                                                                       \
    } while (0)

struct grid {
    MPI_Comm cart;
    int own[2], start[2];
    int64_t ext[2]; /* owned + one halo cell each side */
};

/* Cell (i, j) of a local array, C order, halo included. */
static size_t at(const struct grid *g, int i, int j) { return (size_t)i * g->ext[1] + j; }

static void block(int n, int p, int c, int *start, int *size) {
    int q = n / p, r = n % p;
    *start = c * q + (c < r ? c : r);
    *size = q + (c < r);
}

/* L(x) on the owned cells, into out. */
static void laplacian(const struct grid *g, const double *x, double *out) {
    for (int i = 1; i <= g->own[0]; i++) {
        for (int j = 1; j <= g->own[1]; j++) {
            double faces = x[at(g, i - 1, j)] + x[at(g, i + 1, j)] + x[at(g, i, j - 1)] + x[at(g, i, j + 1)];
            double corners = x[at(g, i - 1, j - 1)] + x[at(g, i - 1, j + 1)] + x[at(g, i + 1, j - 1)] +
                             x[at(g, i + 1, j + 1)];
            out[at(g, i, j)] = (4.0 * faces + corners - 20.0 * x[at(g, i, j)]) / 6.0;
        }
    }
}

/* The halo of x by MPI: the 8 neighbours' faces, corners included. */
static void mpi_halo(const struct grid *g, double *x) {
    MPI_Request req[16];
    MPI_Status statuses[sizeof req / sizeof req[0]]; /* not MPI_STATUSES_IGNORE: GCC 12 warns on MPICH's */
    int n = 0;
    for (int di = -1; di <= 1; di++) {
        for (int dj = -1; dj <= 1; dj++) {
            if (di == 0 && dj == 0) {
                continue;
            }
            int coords[2], c[2] = {0, 0}, peer_to, peer_from;
            MPI_Cart_coords(g->cart, rank, 2, coords);
            int dims[2], periods[2];
            MPI_Cart_get(g->cart, 2, dims, periods, c);
            int to[2] = {(coords[0] + di + dims[0]) % dims[0], (coords[1] + dj + dims[1]) % dims[1]};
            int from[2] = {(coords[0] - di + dims[0]) % dims[0], (coords[1] - dj + dims[1]) % dims[1]};
            MPI_Cart_rank(g->cart, to, &peer_to);
            MPI_Cart_rank(g->cart, from, &peer_from);
            int sizes[2] = {(int)g->ext[0], (int)g->ext[1]};
            int sub[2] = {di ? 1 : g->own[0], dj ? 1 : g->own[1]};
            int send_at[2] = {di < 0 ? 1 : (di > 0 ? g->own[0] : 1), dj < 0 ? 1 : (dj > 0 ? g->own[1] : 1)};
            int recv_at[2] = {di < 0 ? g->own[0] + 1 : (di > 0 ? 0 : 1), dj < 0 ? g->own[1] + 1 : (dj > 0 ? 0 : 1)};
            MPI_Datatype st, rt;
            MPI_Type_create_subarray(2, sizes, sub, send_at, MPI_ORDER_C, MPI_DOUBLE, &st);
            MPI_Type_create_subarray(2, sizes, sub, recv_at, MPI_ORDER_C, MPI_DOUBLE, &rt);
            MPI_Type_commit(&st);
            MPI_Type_commit(&rt);
            int tag = (di + 1) * 3 + (dj + 1);
            MPI_Irecv(x, 1, rt, peer_from, tag, g->cart, &req[n++]);
            MPI_Isend(x, 1, st, peer_to, tag, g->cart, &req[n++]);
            MPI_Type_free(&st);
            MPI_Type_free(&rt);
        }
    }
    MPI_Waitall(n, req, statuses);
}

/* The halo of x by sode: one exchange, committed on u, started on x. */
static void sode_halo(const struct grid *g, sode_exchange *x_ex, double *x) {
    (void)g;
    void *arrays[1] = {x};
    CHECK_SODE(sode_exchange_start_arrays(x_ex, 1, arrays));
    CHECK_SODE(sode_exchange_wait(x_ex, 60.0));
}

/* One SSP-RK3 step; halo(x) fills x's halo. */
static void rk3_step(const struct grid *g, double *u, double *s1, double *s2, double *l, double dt,
                     sode_exchange *ex) {
    size_t cells = (size_t)g->ext[0] * g->ext[1];
    double *stage_in[3] = {u, s1, s2};
    for (int s = 0; s < 3; s++) {
        double *x = stage_in[s];
        if (ex) {
            sode_halo(g, ex, x);
        } else {
            mpi_halo(g, x);
        }
        laplacian(g, x, l);
        for (size_t k = 0; k < cells; k++) {
            int i = (int)(k / g->ext[1]), j = (int)(k % g->ext[1]);
            if (i < 1 || i > g->own[0] || j < 1 || j > g->own[1]) {
                continue;
            }
            if (s == 0) {
                s1[k] = u[k] + dt * l[k];
            } else if (s == 1) {
                s2[k] = 0.75 * u[k] + 0.25 * (s1[k] + dt * l[k]);
            } else {
                u[k] = u[k] / 3.0 + 2.0 / 3.0 * (s2[k] + dt * l[k]);
            }
        }
    }
}

/* u after `steps` steps from the same start, by sode (ex) or by MPI (NULL),
 * with stage arrays s1 and s2. */
static double *integrate(const struct grid *g, int steps, sode_exchange *ex, double *u, double *s1,
                         double *s2) {
    size_t cells = (size_t)g->ext[0] * g->ext[1];
    double *l = calloc(cells, sizeof *l);
    if (!l) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 1; i <= g->own[0]; i++) {
        for (int j = 1; j <= g->own[1]; j++) {
            int gi = g->start[0] + i - 1, gj = g->start[1] + j - 1;
            u[at(g, i, j)] = (double)((gi * 7 + gj * 13) % 17) + 0.125 * gi;
        }
    }
    for (int t = 0; t < steps; t++) {
        rk3_step(g, u, s1, s2, l, 0.1, ex);
    }
    free(l);
    return u;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size, steps = argc > 1 ? atoi(argv[1]) : 20, lend = argc > 2 ? atoi(argv[2]) : 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2];
    MPI_Dims_create(size, 2, dims);
    struct grid g;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &g.cart);
    MPI_Comm_rank(g.cart, &rank);
    MPI_Cart_coords(g.cart, rank, 2, coords);
    block(NX, dims[0], coords[0], &g.start[0], &g.own[0]);
    block(NY, dims[1], coords[1], &g.start[1], &g.own[1]);
    g.ext[0] = g.own[0] + 2;
    g.ext[1] = g.own[1] + 2;
    size_t cells = (size_t)g.ext[0] * g.ext[1];
    /* u, s1 and s2 of each run. */
    double *sode_arrays[3], *mpi_arrays[3];
    int missing = 0;
    for (int k = 0; k < 3; k++) {
        sode_arrays[k] = calloc(cells, sizeof(double));
        mpi_arrays[k] = calloc(cells, sizeof(double));
        missing |= !sode_arrays[k] || !mpi_arrays[k];
    }
    double *u_sode = sode_arrays[0], *u_mpi = mpi_arrays[0];
    if (missing) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    sode_comm *sc;
    sode_exchange *ex;
    CHECK_SODE(sode_comm_create_mpi(g.cart, 60.0, &sc));
    int one[2] = {1, 1};
    CHECK_SODE(sode_exchange_create_cart(sc, 2, dims, coords, periods, one, one, SODE_BOX, &ex));
    int64_t lo[2] = {1, 1}, own[2] = {g.own[0], g.own[1]};
    CHECK_SODE(sode_exchange_add_field(ex, u_sode, SODE_F64, 2, g.ext, lo, own, NULL, NULL, SODE_ORDER_C));
    for (int k = 1; k < 3 && lend; k++) {
        void *stage[1] = {sode_arrays[k]};
        CHECK_SODE(sode_exchange_lend_arrays(ex, 1, stage));
    }
    CHECK_SODE(sode_exchange_commit(ex));

    integrate(&g, steps, ex, u_sode, sode_arrays[1], sode_arrays[2]);
    integrate(&g, steps, NULL, u_mpi, mpi_arrays[1], mpi_arrays[2]);
    uint64_t staged, all_staged;
    CHECK_SODE(sode_exchange_staged_starts(ex, &staged));
    MPI_Allreduce(&staged, &all_staged, 1, MPI_UINT64_T, MPI_SUM, g.cart);
    long differ = 0;
    for (int i = 1; i <= g.own[0]; i++) {
        for (int j = 1; j <= g.own[1]; j++) {
            if (memcmp(&u_sode[at(&g, i, j)], &u_mpi[at(&g, i, j)], sizeof(double)) != 0) {
                differ++;
            }
        }
    }
    long all_differ;
    MPI_Allreduce(&differ, &all_differ, 1, MPI_LONG, MPI_SUM, g.cart);
    if (rank == 0) {
        printf("rk2d: %d ranks (%d x %d), %d x %d cells, %d SSP-RK3 steps, three stage arrays through one "
               "exchange (%s): %ld of %d cells differ from MPI; %llu starts through sode's buffers\n",
               size, dims[0], dims[1], NX, NY, steps, lend ? "stages lent" : "stages not lent", all_differ,
               NX * NY, (unsigned long long)all_staged);
    }
    CHECK_SODE(sode_exchange_free(&ex));
    CHECK_SODE(sode_comm_free(&sc));
    for (int k = 0; k < 3; k++) {
        free(sode_arrays[k]);
        free(mpi_arrays[k]);
    }
    MPI_Comm_free(&g.cart);
    MPI_Finalize();
    return all_differ == 0 ? 0 : 1;
}
