/* Coupled components: the ranks split into two components, as a coupled
 * climate model's atmosphere and ocean do (MPI_Comm_split, or an MPMD
 * launch's MPI_COMM_WORLD split by program), and each component exchanges
 * halos over a sode communicator made from its own sub-communicator: two
 * exchanges on it (two field groups, as a model exchanges its dynamics
 * and its tracers), started and waited for in a different order on
 * alternate ranks. A third sode communicator, over MPI_COMM_WORLD,
 * exchanges a ring across both components, as a coupler would. All three
 * live at once, and each iteration has a rank's three exchanges in
 * flight together.
 *
 *   mpirun -n 4 ./coupled       (1 rank: a single component)
 *
 * Component c's grid is (13 + 4c) x (9 + c) cells, periodic, split over
 * its own ranks; halo 1 with corners. Every halo cell must hold its
 * owner's value after each of three iterations, in the component's grid
 * and in the ring; the two components' values differ, so a message that
 * crossed into the other component's exchange is caught. A rank that a
 * split leaves out holds MPI_COMM_NULL: sode refuses it with a status and
 * a message, where MPI's own handler would end the job; and it refuses an
 * intercommunicator between the components. */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 5 /* cells a rank owns in the ring */
#define WAIT_S 60.0 /* a wait's deadline: a stalled exchange names what it waits for */

static int wrank;

#define CHECK_SODE(call)                                                                         \
    do {                                                                                         \
        int rc_ = (call);                                                                        \
        if (rc_ != SODE_OK) {                                                                    \
            fprintf(stderr, "rank %d: %s failed (%d): %s\n", wrank, #call, rc_, sode_last_error()); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                        \
        }                                                                                        \
    } while (0)

static double value(int comp, int it, int i, int j) { return comp * 1e6 + it * 1e5 + i * 1000.0 + j; }

static int wrap(int k, int n) { return ((k % n) + n) % n; }

static void split(int cells, int parts, int c, int *lo, int *n) {
    int q = cells / parts, r = cells % parts;
    *lo = c * q + (c < r ? c : r);
    *n = q + (c < r);
}

/* One component's part of this rank: its grid, block and array. */
struct part {
    int comp, global[2], lo[2], n[2];
    int64_t ext[2];
    double *u;
};

static void fill(struct part *p, int it) {
    for (int a = 0; a < p->ext[0]; a++) {
        for (int b = 0; b < p->ext[1]; b++) {
            int inside = a >= 1 && a <= p->n[0] && b >= 1 && b <= p->n[1];
            p->u[a * p->ext[1] + b] = inside ? value(p->comp, it, p->lo[0] + a - 1, p->lo[1] + b - 1) : -1.0;
        }
    }
}

static int wrong_cells(const struct part *p, int it) {
    int wrong = 0;
    for (int a = 0; a < p->ext[0]; a++) {
        for (int b = 0; b < p->ext[1]; b++) {
            int i = wrap(p->lo[0] + a - 1, p->global[0]), j = wrap(p->lo[1] + b - 1, p->global[1]);
            double got = p->u[a * p->ext[1] + b], want = value(p->comp, it, i, j);
            if (got != want && wrong++ < 5) {
                fprintf(stderr, "rank %d (component %d): cell (%d, %d) holds %.0f, not %.0f\n", wrank, p->comp, i,
                        j, got, want);
            }
        }
    }
    return wrong;
}

/* What a rank outside every component (MPI_Comm_split with MPI_UNDEFINED)
 * would hand sode: MPI_COMM_NULL, refused by both calls that take an MPI
 * communicator; and an intercommunicator between the two components
 * (whose allgather would bring the other one's records), refused too. */
static void refuses_what_is_no_group(sode_comm *sc, MPI_Comm sub, int comp, int wsize) {
    MPI_Comm none;
    MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, wrank, &none);
    sode_comm *c = NULL;
    sode_exchange *x = NULL;
    int h[2] = {1, 1};
    int comm_rc = sode_comm_create_mpi(none, 60.0, &c);
    int comm_named = comm_rc == SODE_ERR_ARG && strstr(sode_last_error(), "MPI_COMM_NULL") != NULL;
    int cart_rc = sode_exchange_create_mpi_cart(sc, none, h, h, SODE_BOX, &x);
    int cart_named = cart_rc == SODE_ERR_ARG && strstr(sode_last_error(), "MPI_COMM_NULL") != NULL;
    if (!comm_named || !cart_named || c != NULL || x != NULL) {
        fprintf(stderr, "rank %d: MPI_COMM_NULL gave %d and %d, not SODE_ERR_ARG naming it: %s\n", wrank, comm_rc,
                cart_rc, sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (wsize < 2) {
        return;
    }
    /* The other component's first rank, in MPI_COMM_WORLD. */
    MPI_Comm inter;
    MPI_Intercomm_create(sub, 0, MPI_COMM_WORLD, comp == 0 ? (wsize + 1) / 2 : 0, 7, &inter);
    int inter_rc = sode_comm_create_mpi(inter, 60.0, &c);
    if (inter_rc != SODE_ERR_ARG || strstr(sode_last_error(), "intercommunicator") == NULL || c != NULL) {
        fprintf(stderr, "rank %d: an intercommunicator gave %d, not SODE_ERR_ARG naming it: %s\n", wrank, inter_rc,
                sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm_free(&inter);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int wsize;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);

    /* The component: the first half of the ranks, or the rest. */
    struct part p = {.comp = wrank < (wsize + 1) / 2 ? 0 : 1};
    MPI_Comm sub, cart;
    MPI_Comm_split(MPI_COMM_WORLD, p.comp, wrank, &sub);
    int size, rank, dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2];
    MPI_Comm_size(sub, &size);
    MPI_Dims_create(size, 2, dims);
    MPI_Cart_create(sub, 2, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 2, coords);
    p.global[0] = 13 + 4 * p.comp;
    p.global[1] = 9 + p.comp;
    for (int a = 0; a < 2; a++) {
        split(p.global[a], dims[a], coords[a], &p.lo[a], &p.n[a]);
        p.ext[a] = p.n[a] + 2;
    }
    p.u = malloc((size_t)(p.ext[0] * p.ext[1]) * sizeof(double));
    /* The second field group: the same grid, values of a third kind. */
    struct part q = p;
    q.comp = p.comp + 3;
    q.u = malloc((size_t)(q.ext[0] * q.ext[1]) * sizeof(double));

    /* The coupler's ring over every rank. */
    MPI_Comm ring;
    int periodic = 1;
    MPI_Cart_create(MPI_COMM_WORLD, 1, &wsize, &periodic, 0, &ring);
    int ring_rank;
    MPI_Comm_rank(ring, &ring_rank);
    struct part r = {.comp = 2, .global = {wsize * RING, 1}, .lo = {ring_rank * RING, 0}, .n = {RING, 1}};
    r.ext[0] = RING + 2;
    r.ext[1] = 1;
    double ring_cells[RING + 2];
    r.u = ring_cells;
    if (p.u == NULL || q.u == NULL) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    sode_comm *sc, *sw;
    sode_exchange *x, *x2, *y;
    int h[2] = {1, 1};
    int64_t first[2] = {1, 1}, own[2] = {p.n[0], p.n[1]};
    CHECK_SODE(sode_comm_create_mpi(cart, 60.0, &sc));
    CHECK_SODE(sode_comm_create_mpi(ring, 60.0, &sw));
    CHECK_SODE(sode_exchange_create_mpi_cart(sc, cart, h, h, SODE_BOX, &x));
    refuses_what_is_no_group(sc, sub, p.comp, wsize);
    CHECK_SODE(sode_exchange_add_field(x, p.u, SODE_F64, 2, p.ext, first, own, NULL, NULL, SODE_ORDER_C));
    CHECK_SODE(sode_exchange_create_mpi_cart(sc, cart, h, h, SODE_BOX, &x2));
    CHECK_SODE(sode_exchange_add_field(x2, q.u, SODE_F64, 2, q.ext, first, own, NULL, NULL, SODE_ORDER_C));
    CHECK_SODE(sode_exchange_create_mpi_cart(sw, ring, h, h, SODE_STAR, &y));
    int64_t ring_ext[1] = {RING + 2}, ring_first[1] = {1}, ring_own[1] = {RING};
    CHECK_SODE(sode_exchange_add_field(y, ring_cells, SODE_F64, 1, ring_ext, ring_first, ring_own, NULL, NULL,
                                       SODE_ORDER_C));
    CHECK_SODE(sode_exchange_commit(x));
    CHECK_SODE(sode_exchange_commit(x2));
    CHECK_SODE(sode_exchange_commit(y));
    /* Odd ranks start and wait for the two field groups the other way round. */
    sode_exchange *first_x = rank % 2 ? x2 : x, *second_x = rank % 2 ? x : x2;

    int wrong = 0;
    for (int it = 0; it < 3; it++) {
        fill(&p, it);
        fill(&q, it);
        /* The ring's cells are r's with a second axis of 1. */
        for (int a = 0; a < RING + 2; a++) {
            ring_cells[a] = a >= 1 && a <= RING ? value(r.comp, it, r.lo[0] + a - 1, 0) : -1.0;
        }
        CHECK_SODE(sode_exchange_start(first_x));
        CHECK_SODE(sode_exchange_start(y));
        CHECK_SODE(sode_exchange_start(second_x));
        CHECK_SODE(sode_exchange_wait(y, WAIT_S));
        CHECK_SODE(sode_exchange_wait(second_x, WAIT_S));
        CHECK_SODE(sode_exchange_wait(first_x, WAIT_S));
        wrong += wrong_cells(&p, it) + wrong_cells(&q, it) + wrong_cells(&r, it);
    }

    int all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (wrank == 0 && wsize > 1) {
        printf("%s coupled: components of %d and %d ranks (grids 13x9 and 17x10), two field groups each, and a "
               "ring over all %d, three exchanges each, a rank's three in flight at once: %d halo cells wrong\n",
               all ? "FAIL" : "ok", (wsize + 1) / 2, wsize / 2, wsize, all);
    } else if (wrank == 0) {
        printf("%s coupled: one component of 1 rank (grid 13x9), two field groups, and a ring of 1, three "
               "exchanges each, all in flight at once: %d halo cells wrong\n",
               all ? "FAIL" : "ok", all);
    }
    CHECK_SODE(sode_exchange_free(&x));
    CHECK_SODE(sode_exchange_free(&x2));
    CHECK_SODE(sode_exchange_free(&y));
    CHECK_SODE(sode_comm_free(&sc));
    CHECK_SODE(sode_comm_free(&sw));
    free(p.u);
    free(q.u);
    MPI_Comm_free(&ring);
    MPI_Comm_free(&cart);
    MPI_Comm_free(&sub);
    MPI_Finalize();
    return all != 0;
}
