/* A staggered grid: a cell-centred field and a vertex (node) field in one
 * exchange, the nodes on each block's edges owned by both ranks beside it
 * (sode_exchange_set_overlap) and never sent.
 *
 *   mpirun -n 4 ./staggered
 *
 * A 2-D grid of NR x NC cells, not periodic along axis 0, periodic along
 * axis 1, split unevenly. A rank owning cells [r0, r1) x [c0, c1) owns
 * nodes r0..r1 x c0..c1: the first and last node of each axis it shares
 * with the neighbour on that side, which computes them too. Halos are two
 * cells or nodes deep, corners included.
 *
 * Each rank writes the global value of every owned cell and node, but its
 * own mark on the nodes of its box's edges (as if both owners computed
 * them differently). After one exchange:
 * - every halo cell holds its global value;
 * - every halo node holds what its owner beside holds: the global value,
 *   or that owner's mark where the node lies on the owner's edge;
 * - every node of this rank's edges still holds this rank's mark (nothing
 *   was written over it);
 * - this rank sent exactly the bytes of the halo cells and nodes its
 *   neighbours fill, the shared nodes excluded (sode_exchange_stats). */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NR 23
#define NC 30
#define H 2

static int rank;

#define CHECK_SODE(call)                                                                        \
    do {                                                                                        \
        int rc_ = (call);                                                                       \
        if (rc_ != SODE_OK) {                                                                   \
            fprintf(stderr, "rank %d: %s failed (%d): %s\n", rank, #call, rc_, sode_last_error()); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                       \
        }                                                                                       \
    } while (0)

/* One rank's block: its cells [lo, lo + n) per axis. */
struct block {
    int lo[2], n[2];
};

static void split(int cells, int parts, int c, int *lo, int *n) {
    int q = cells / parts, r = cells % parts;
    *lo = c * q + (c < r ? c : r);
    *n = q + (c < r);
}

static struct block block_of(const int dims[2], const int coords[2]) {
    struct block b;
    split(NR, dims[0], coords[0], &b.lo[0], &b.n[0]);
    split(NC, dims[1], coords[1], &b.lo[1], &b.n[1]);
    return b;
}

static double cell_value(int i, int j) { return 1e6 + i * 1000.0 + ((j % NC) + NC) % NC; }
static double node_value(int i, int j) { return 2e6 + i * 1000.0 + ((j % NC) + NC) % NC; }
static double mark(int r) { return -1.0 - r; }

/* Whether global node (i, j) lies on an edge of block b (its first or
 * last node along an axis; along the periodic axis, modulo NC). */
static int on_edge(const struct block *b, int i, int j) {
    int jj = ((j - b->lo[1]) % NC + NC) % NC;
    return i == b->lo[0] || i == b->lo[0] + b->n[0] || jj == 0 || jj == b->n[1];
}

/* The node value rank `r` with block `b` holds for global node (i, j). */
static double held(int r, const struct block *b, int i, int j) {
    return on_edge(b, i, j) ? mark(r) : node_value(i, j);
}

/* The side of [lo, lo + n) index k lies on: -1 below, 0 inside, 1 above. */
static int side(int k, int lo, int n) { return k < lo ? -1 : k >= lo + n ? 1 : 0; }

static int check(MPI_Comm cart, const int dims[2], const int coords[2], const struct block *me,
                 const double *cells, const double *nodes) {
    int wrong = 0;
    int64_t ce[2] = {me->n[0] + 2 * H, me->n[1] + 2 * H};
    int64_t ne[2] = {me->n[0] + 1 + 2 * H, me->n[1] + 1 + 2 * H};
    for (int a = 0; a < ne[0]; a++) {
        for (int b = 0; b < ne[1]; b++) {
            int i = me->lo[0] - H + a, j = me->lo[1] - H + b; /* global node */
            int o[2] = {side(a, H, me->n[0] + 1), side(b, H, me->n[1] + 1)};
            int c[2] = {coords[0] + o[0], coords[1] + o[1]};
            if (c[0] < 0 || c[0] >= dims[0]) {
                continue; /* outside the non-periodic axis: nobody fills it */
            }
            c[1] = (c[1] + dims[1]) % dims[1];
            int owner;
            MPI_Cart_rank(cart, c, &owner);
            struct block ob = block_of(dims, c);
            double want = o[0] == 0 && o[1] == 0 ? held(rank, me, i, j) : held(owner, &ob, i, j);
            double got = nodes[a * ne[1] + b];
            if (got != want) {
                if (wrong++ < 5) {
                    fprintf(stderr, "rank %d: node (%d, %d) holds %.0f, expected %.0f (from rank %d)\n", rank, i, j,
                            got, want, owner);
                }
            }
        }
    }
    for (int a = 0; a < ce[0]; a++) {
        for (int b = 0; b < ce[1]; b++) {
            int i = me->lo[0] - H + a, j = me->lo[1] - H + b;
            if (i < 0 || i >= NR) {
                continue;
            }
            if (cells[a * ce[1] + b] != cell_value(i, j)) {
                if (wrong++ < 10) {
                    fprintf(stderr, "rank %d: cell (%d, %d) holds %.0f, expected %.0f\n", rank, i, j,
                            cells[a * ce[1] + b], cell_value(i, j));
                }
            }
        }
    }
    return wrong;
}

/* The bytes this rank sends in one exchange: to each neighbour (other
 * than itself), the cells and nodes that fill its halo, shared nodes
 * excluded: along an axis where the neighbour is beside it, H of each. */
static uint64_t bytes_to_send(MPI_Comm cart, const int dims[2], const int coords[2], const struct block *me) {
    uint64_t bytes = 0;
    for (int o0 = -1; o0 <= 1; o0++) {
        for (int o1 = -1; o1 <= 1; o1++) {
            int c[2] = {coords[0] + o0, (coords[1] + o1 + dims[1]) % dims[1]};
            if ((o0 == 0 && o1 == 0) || c[0] < 0 || c[0] >= dims[0]) {
                continue;
            }
            int peer;
            MPI_Cart_rank(cart, c, &peer);
            if (peer == rank) {
                continue;
            }
            uint64_t cell_count = (uint64_t)(o0 ? H : me->n[0]) * (o1 ? H : me->n[1]);
            uint64_t node_count = (uint64_t)(o0 ? H : me->n[0] + 1) * (o1 ? H : me->n[1] + 1);
            bytes += (cell_count + node_count) * sizeof(double);
        }
    }
    return bytes;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size, dims[2] = {0, 0}, periods[2] = {0, 1}, coords[2];
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 2, coords);
    struct block me = block_of(dims, coords);

    int64_t ce[2] = {me.n[0] + 2 * H, me.n[1] + 2 * H}, ne[2] = {me.n[0] + 1 + 2 * H, me.n[1] + 1 + 2 * H};
    double *cells = calloc((size_t)(ce[0] * ce[1]), sizeof(double));
    double *nodes = calloc((size_t)(ne[0] * ne[1]), sizeof(double));
    if (!cells || !nodes) {
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int a = H; a < H + me.n[0]; a++) {
        for (int b = H; b < H + me.n[1]; b++) {
            cells[a * ce[1] + b] = cell_value(me.lo[0] - H + a, me.lo[1] - H + b);
        }
    }
    for (int a = H; a <= H + me.n[0]; a++) {
        for (int b = H; b <= H + me.n[1]; b++) {
            nodes[a * ne[1] + b] = held(rank, &me, me.lo[0] - H + a, me.lo[1] - H + b);
        }
    }

    sode_comm *sc;
    sode_exchange *x;
    int halo[2] = {H, H}, one[2] = {1, 1};
    int64_t lo[2] = {H, H}, cell_own[2] = {me.n[0], me.n[1]}, node_own[2] = {me.n[0] + 1, me.n[1] + 1};
    CHECK_SODE(sode_comm_create_mpi(cart, 60.0, &sc));
    CHECK_SODE(sode_exchange_create_mpi_cart(sc, cart, halo, halo, SODE_BOX, &x));
    CHECK_SODE(sode_exchange_add_field(x, cells, SODE_F64, 2, ce, lo, cell_own, NULL, NULL, SODE_ORDER_C));
    CHECK_SODE(sode_exchange_add_field(x, nodes, SODE_F64, 2, ne, lo, node_own, NULL, NULL, SODE_ORDER_C));
    CHECK_SODE(sode_exchange_set_overlap(x, 1, one, one));
    CHECK_SODE(sode_exchange_commit(x));
    CHECK_SODE(sode_exchange_start(x));
    CHECK_SODE(sode_exchange_wait(x, SODE_TIMEOUT_DEFAULT));

    int wrong = check(cart, dims, coords, &me, cells, nodes);
    sode_stats s;
    CHECK_SODE(sode_exchange_stats(x, &s));
    uint64_t want = bytes_to_send(cart, dims, coords, &me);
    if (s.bytes_sent != want) {
        fprintf(stderr, "rank %d: sent %llu bytes, the halos need %llu\n", rank, (unsigned long long)s.bytes_sent,
                (unsigned long long)want);
        wrong++;
    }
    /* An overlap that leaves too few owned nodes to fill a halo, and one
     * for a field that was not added, are refused with a message. */
    sode_exchange *bad;
    int wide[2] = {me.n[0], 1};
    CHECK_SODE(sode_exchange_create_mpi_cart(sc, cart, halo, halo, SODE_BOX, &bad));
    CHECK_SODE(sode_exchange_add_field(bad, nodes, SODE_F64, 2, ne, lo, node_own, NULL, NULL, SODE_ORDER_C));
    wrong += sode_exchange_set_overlap(bad, 0, wide, one) != SODE_ERR_ARG;
    wrong += sode_exchange_set_overlap(bad, 1, one, one) != SODE_ERR_ARG;
    CHECK_SODE(sode_exchange_free(&bad));

    int all;
    MPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, cart);
    if (rank == 0) {
        printf("%s grid %dx%d (periodic along axis 1), cells and nodes, halo %d: %d wrong; %llu bytes sent by rank 0\n",
               all ? "FAIL" : "ok", dims[0], dims[1], H, all, (unsigned long long)s.bytes_sent);
    }
    CHECK_SODE(sode_exchange_free(&x));
    CHECK_SODE(sode_comm_free(&sc));
    free(cells);
    free(nodes);
    MPI_Comm_free(&cart);
    MPI_Finalize();
    return all ? 1 : 0;
}
