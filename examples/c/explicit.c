/* An exchange described box by box, as a code with its own decomposition
 * would: a periodic ring of ranks owning columns of unequal width (5 +
 * rank), each sending its first and last owned columns to its left and
 * right neighbours, for a float and an int64 field. Compared with the same
 * exchange done by MPI (Isend/Irecv of column types) and with the owners'
 * values, bit for bit; then a receive of the wrong shape on one rank must
 * fail the commit on every rank with SODE_ERR_MISMATCH.
 *
 *   mpirun -n 3 ./explicit
 */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NY 4
enum { RIGHTWARD = 0, LEFTWARD = 1 };

static int rank, size;

static void check(int rc, const char *what) {
    if (rc != SODE_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, what, sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static int width(int r) { return 5 + r; }
static int first_col(int r) {
    int c = 0;
    for (int q = 0; q < r; q++) c += width(q);
    return c;
}
static float u_of(int col, int row) { return (float)(col * 1000 + row) + 0.5f; }
static int64_t w_of(int col, int row) { return ((int64_t)col << 32) | (int64_t)row; }

/* Fills owned cells with their values, halo columns with sentinels. */
static void fill(float *u, int64_t *w, int nx) {
    for (int i = 0; i < NY; i++) {
        for (int j = 0; j < nx + 2; j++) {
            int owned = j >= 1 && j <= nx;
            int col = first_col(rank) + j - 1;
            u[i * (nx + 2) + j] = owned ? u_of(col, i) : -1.0f;
            w[i * (nx + 2) + j] = owned ? w_of(col, i) : -1;
        }
    }
}

static sode_exchange *describe(sode_comm *sc, float *u, int64_t *w, int nx, int wrong) {
    sode_exchange *x;
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    int64_t ext[2] = {NY, nx + 2}, lo0[2] = {0, 1}, own[2] = {NY, nx};
    int64_t first[2] = {0, 1}, last[2] = {0, nx}, halo_l[2] = {0, 0}, halo_r[2] = {0, nx + 1};
    int64_t column[2] = {NY, 1}, bad[2] = {NY - 1, 1};
    check(sode_exchange_create(sc, 2, &x), "create");
    check(sode_exchange_add_field(x, u, SODE_F32, 2, ext, lo0, own, NULL, NULL, SODE_ORDER_C), "u");
    check(sode_exchange_add_field(x, w, SODE_I64, 2, ext, lo0, own, NULL, NULL, SODE_ORDER_C), "w");
    check(sode_exchange_add_send(x, right, RIGHTWARD, last, column), "send right");
    check(sode_exchange_add_send(x, left, LEFTWARD, first, column), "send left");
    check(sode_exchange_add_recv(x, left, RIGHTWARD, halo_l, column), "recv left");
    check(sode_exchange_add_recv(x, right, LEFTWARD, halo_r, wrong ? bad : column), "recv right");
    return x;
}

static void mpi_exchange(float *u, int64_t *w, int nx) {
    int left = (rank + size - 1) % size, right = (rank + 1) % size, k = 0;
    MPI_Datatype fcol, lcol;
    MPI_Type_vector(NY, 1, nx + 2, MPI_FLOAT, &fcol);
    MPI_Type_vector(NY, 1, nx + 2, MPI_INT64_T, &lcol);
    MPI_Type_commit(&fcol);
    MPI_Type_commit(&lcol);
    MPI_Request req[8];
    MPI_Status statuses[8]; /* not MPI_STATUSES_IGNORE: GCC 12 warns on MPICH's */
    MPI_Isend(&u[nx], 1, fcol, right, RIGHTWARD, MPI_COMM_WORLD, &req[k++]);
    MPI_Isend(&u[1], 1, fcol, left, LEFTWARD, MPI_COMM_WORLD, &req[k++]);
    MPI_Irecv(&u[0], 1, fcol, left, RIGHTWARD, MPI_COMM_WORLD, &req[k++]);
    MPI_Irecv(&u[nx + 1], 1, fcol, right, LEFTWARD, MPI_COMM_WORLD, &req[k++]);
    MPI_Isend(&w[nx], 1, lcol, right, 10 + RIGHTWARD, MPI_COMM_WORLD, &req[k++]);
    MPI_Isend(&w[1], 1, lcol, left, 10 + LEFTWARD, MPI_COMM_WORLD, &req[k++]);
    MPI_Irecv(&w[0], 1, lcol, left, 10 + RIGHTWARD, MPI_COMM_WORLD, &req[k++]);
    MPI_Irecv(&w[nx + 1], 1, lcol, right, 10 + LEFTWARD, MPI_COMM_WORLD, &req[k++]);
    MPI_Waitall(k, req, statuses);
    MPI_Type_free(&fcol);
    MPI_Type_free(&lcol);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int nx = width(rank), total = first_col(size), cells = NY * (nx + 2);
    float *u = malloc(cells * sizeof *u), *um = malloc(cells * sizeof *um);
    int64_t *w = malloc(cells * sizeof *w), *wm = malloc(cells * sizeof *wm);
    sode_comm *sc;
    check(sode_comm_create_mpi(MPI_COMM_WORLD, 60.0, &sc), "comm");
    sode_exchange *x = describe(sc, u, w, nx, 0);
    check(sode_exchange_commit(x), "commit");
    for (int it = 0; it < 3; it++) {
        fill(u, w, nx);
        fill(um, wm, nx);
        check(sode_exchange_start(x), "start");
        check(sode_exchange_wait(x, 30.0), "wait");
        mpi_exchange(um, wm, nx);
        if (memcmp(u, um, cells * sizeof *u) != 0 || memcmp(w, wm, cells * sizeof *w) != 0) {
            fprintf(stderr, "rank %d: sode and MPI differ\n", rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int i = 0; i < NY; i++) {
            int lcol = (first_col(rank) - 1 + total) % total, rcol = (first_col(rank) + nx) % total;
            float ul = u_of(lcol, i), ur = u_of(rcol, i);
            if (memcmp(&u[i * (nx + 2)], &ul, sizeof ul) || memcmp(&u[i * (nx + 2) + nx + 1], &ur, sizeof ur) ||
                w[i * (nx + 2)] != w_of(lcol, i) || w[i * (nx + 2) + nx + 1] != w_of(rcol, i)) {
                fprintf(stderr, "rank %d: row %d's halo is not its neighbours' edge\n", rank, i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    }
    check(sode_exchange_free(&x), "free");
    /* The last rank expects a box of the wrong shape: every rank fails. */
    x = describe(sc, u, w, nx, rank == size - 1);
    int rc = sode_exchange_commit(x);
    char why[512];
    snprintf(why, sizeof why, "%s", sode_last_error());
    if (rc != SODE_ERR_MISMATCH || strstr(why, "receives [3, 1]") == NULL) {
        fprintf(stderr, "rank %d: a mismatched box: status %d, \"%s\"\n", rank, rc, why);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    check(sode_exchange_free(&x), "free");
    check(sode_comm_free(&sc), "comm free");
    if (rank == 0) {
        printf("ok explicit boxes on %d ranks (columns of widths 5..%d, float and int64): equal to "
               "MPI's and the owners' values, bit for bit; a mismatched box failed every rank's "
               "commit: %s\n",
               size, width(size - 1), why);
    }
    MPI_Finalize();
    return 0;
}
