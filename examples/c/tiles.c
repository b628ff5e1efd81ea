/* Several domains a rank (tiles), as tiled ocean and atmosphere models
 * keep them: a grid of 3 x 4 domains (open along axis 0, periodic along
 * axis 1), scattered over the ranks, each rank keeping its tiles as the
 * last axis of one array, u[nt][NY + 2H][NX + 2H] (x fastest:
 * SODE_ORDER_FORTRAN with extents {NX + 2H, NY + 2H, nt}). One exchange,
 * sode_exchange_create_tiles, fills every tile's halo from the
 * neighbouring domains, on other ranks or on this one (copied, never
 * sent): a cell field (halo 2, corners included) and a node field (both
 * edges owned, never sent; halo 1).
 *
 *   mpirun -n 4 ./tiles            (1 to 12 ranks)
 *   mpirun -n 4 ./tiles --shared   (the fields in sode's shared memory,
 *                                  two sets, alternating)
 *
 * Every halo cell and node must hold its owner's value after each of three
 * iterations, and those past the open edges must stay as they were. */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NX 5 /* cells of a tile along axis 0 */
#define NY 4 /* and along axis 1 */
#define H 2  /* the cells' halo */
#define D0 3 /* domains along axis 0 (open) */
#define D1 4 /* along axis 1 (periodic) */
#define UNTOUCHED -1.0

static int rank;

#define CHECK_SODE(call)                                                                      \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != SODE_OK) {                                                                 \
            fprintf(stderr, "rank %d: %s failed (%d): %s\n", rank, #call, rc_, sode_last_error()); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                     \
        }                                                                                     \
    } while (0)

/* The rank of domain p: scattered, so neighbours are on other ranks and on
 * this one. */
static int owner(int p, int ranks) { return (p * 7 + 3) % ranks; }

/* A field's shape: cells, or nodes (one more, both edges owned). */
struct shape {
    int nodes, halo;
};
static const struct shape shapes[2] = {{0, H}, {1, 1}};

static int extent(const struct shape *s, int n) { return n + s->nodes + 2 * s->halo; }

/* The global index along an axis of n cells a domain and d domains of local
 * index k in domain t; -1 past the open edge. */
static long global(const struct shape *s, int n, int d, int periodic, int t, int k) {
    long g = (long)t * n + k - s->halo, span = (long)d * n;
    if (periodic) {
        return ((g % span) + span) % span;
    }
    return g >= 0 && g <= span - 1 + s->nodes ? g : -1;
}

static double value(int field, int it, long i, long j) { return field * 1e5 + it * 1e4 + i * 100.0 + j; }

/* Fills (check 0) or checks one field of this rank's tiles; the cells
 * wrong. */
static int visit(int field, double *u, const int *coords, int nt, int it, int check) {
    const struct shape *s = &shapes[field];
    int e0 = extent(s, NX), e1 = extent(s, NY), wrong = 0;
    for (int t = 0; t < nt; t++) {
        for (int b = 0; b < e1; b++) {
            for (int a = 0; a < e0; a++) {
                double *cell = &u[a + (size_t)e0 * (b + (size_t)e1 * t)];
                long i = global(s, NX, D0, 0, coords[2 * t], a), j = global(s, NY, D1, 1, coords[2 * t + 1], b);
                double want = i >= 0 && j >= 0 ? value(field, it, i, j) : UNTOUCHED;
                int owned = a >= s->halo && a < s->halo + NX + s->nodes && b >= s->halo && b < s->halo + NY + s->nodes;
                if (!check) {
                    *cell = owned ? want : UNTOUCHED;
                } else if (*cell != want && wrong++ < 3) {
                    fprintf(stderr, "rank %d: field %d, tile (%d, %d), local (%d, %d) holds %.0f, not %.0f\n", rank, field,
                            coords[2 * t], coords[2 * t + 1], a, b, *cell, want);
                }
            }
        }
    }
    return wrong;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    /* Sets of fields sode keeps in its shared memory; 0: the program's own arrays. */
    int sets = argc > 1 && strcmp(argv[1], "--shared") == 0 ? 2 : 0;
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > D0 * D1) {
        if (rank == 0) {
            fprintf(stderr, "tiles: at most %d ranks (one domain each)\n", D0 * D1);
        }
        MPI_Finalize();
        return 1;
    }

    /* Each domain's rank, and this rank's tiles in the order of the last axis. */
    int owners[D0 * D1], coords[2 * D0 * D1], nt = 0;
    for (int p = 0; p < D0 * D1; p++) {
        owners[p] = owner(p, size);
        if (owners[p] == rank) {
            coords[2 * nt] = p / D1;
            coords[2 * nt + 1] = p % D1;
            nt++;
        }
    }
    int dims[2] = {D0, D1}, periodic[2] = {0, 1}, halo[2] = {H, H};
    sode_comm *comm;
    sode_exchange *x;
    CHECK_SODE(sode_comm_create_mpi(MPI_COMM_WORLD, 60.0, &comm));
    CHECK_SODE(sode_exchange_create_tiles(comm, 2, dims, periodic, owners, nt, coords, halo, halo, SODE_BOX, &x));

    if (sets > 0) {
        CHECK_SODE(sode_exchange_set_shared_fields(x, sets));
    }
    /* u[set][field]; the program's own arrays are set 0. */
    double *u[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int f = 0; f < 2; f++) {
        const struct shape *s = &shapes[f];
        int64_t ext[3] = {extent(s, NX), extent(s, NY), nt};
        int64_t first[3] = {s->halo, s->halo, 0}, own[3] = {NX + s->nodes, NY + s->nodes, nt};
        int widths[2] = {s->halo, s->halo};
        if (sets == 0) {
            u[0][f] = malloc((size_t)(ext[0] * ext[1] * ext[2]) * sizeof(double));
            if (u[0][f] == NULL) {
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        CHECK_SODE(sode_exchange_add_field(x, u[0][f], SODE_F64, 3, ext, first, own, widths, widths, SODE_ORDER_FORTRAN));
    }
    /* The nodes on both edges of a tile are its neighbours' too: never sent. */
    int overlap[2] = {1, 1};
    CHECK_SODE(sode_exchange_set_overlap(x, 1, overlap, overlap));
    CHECK_SODE(sode_exchange_commit(x));
    for (int set = 0; set < sets; set++) {
        for (int f = 0; f < 2; f++) {
            CHECK_SODE(sode_exchange_shared_field(x, set, f, (void **)&u[set][f]));
        }
    }

    int wrong = 0;
    for (int it = 0; it < 3; it++) {
        int set = sets > 0 ? it % sets : 0;
        for (int f = 0; f < 2; f++) {
            visit(f, u[set][f], coords, nt, it, 0);
        }
        CHECK_SODE(sets > 0 ? sode_exchange_start_set(x, set) : sode_exchange_start(x));
        CHECK_SODE(sode_exchange_wait(x, 60.0));
        for (int f = 0; f < 2; f++) {
            wrong += visit(f, u[set][f], coords, nt, it, 1);
        }
    }
    int all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s tiles: %d x %d domains (open x periodic) over %d ranks, cells (halo %d) and nodes (halo 1, edges "
               "never sent), %s, three iterations: %d halo cells wrong\n",
               all ? "FAIL" : "ok", D0, D1, size, H, sets > 0 ? "two sets in sode's shared memory" : "the program's arrays",
               all);
    }
    CHECK_SODE(sode_exchange_free(&x));
    CHECK_SODE(sode_comm_free(&comm));
    if (sets == 0) {
        free(u[0][0]);
        free(u[0][1]);
    }
    MPI_Finalize();
    return all != 0;
}
