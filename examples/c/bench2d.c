/* A 2-D halo exchange (8 neighbours, periodic; by default one double field,
 * halo 1) through sode and through its two MPI peers, in the same run, for
 * blocks of 16^2 to 1024^2 cells per rank:
 *
 * - sode on the program's own arrays (sode_exchange_start);
 * - sode on fields it keeps in shared memory (sode_exchange_set_shared_fields,
 *   sode_exchange_start_set), from which neighbours on the node read faces
 *   in place;
 * - MPI persistent point-to-point: MPI_Send_init / MPI_Recv_init of
 *   subarrays (of every field at once: a struct of them at their
 *   addresses), MPI_Startall / MPI_Waitall;
 * - the MPI-4 persistent neighbourhood collective: MPI_Neighbor_alltoallw_init
 *   of the same subarrays on a distributed-graph communicator of the 8
 *   neighbours (Open MPI 4.1 has it as MPIX_Neighbor_alltoallw_init in
 *   mpi-ext.h; an MPI without it prints "n/a").
 *
 * A weather or ocean model's fields are 3-D arrays on a 2-D grid of ranks:
 * `levels` cells along a last axis that is not split (contiguous in memory,
 * as a Fortran model's first axis), `fields` arrays exchanged together,
 * `halo` cells deep. With their defaults (1, 1, 1) each field is the 2-D
 * array of one double a cell.
 *
 * Before timing, each contender's exchange is run once on fields whose
 * every cell holds its global index, and every halo cell is checked.
 * Each timed exchange follows a write of every owned cell it sends (see
 * `touch`), and only the exchange, from its start to the end of its wait,
 * is timed, between untimed ones that keep it clear of the collectives
 * around a round (see `margin`). Rounds rotate which contender goes first.
 * Prints a table:
 * microseconds per exchange (the slowest rank's mean over a round), median
 * and minimum of the rounds of each contender, and the best MPI peer's
 * median over each sode's (above 1: sode is faster).
 *
 *   mpirun -n 4 ./bench2d [rounds [divisor [largest block [levels [fields [halo]]]]]]
 *
 * (divisor: fewer iterations per round, for emulated machines; largest
 * block: skip the larger rows.)
 */
#include <mpi.h>
#include <sode_mpi.h>
#if defined(OPEN_MPI)
#include <mpi-ext.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(OMPI_HAVE_MPI_EXT_PCOLLREQ)
#define NEIGHBOR_ALLTOALLW_INIT MPIX_Neighbor_alltoallw_init
#elif MPI_VERSION >= 4
#define NEIGHBOR_ALLTOALLW_INIT MPI_Neighbor_alltoallw_init
#endif

static int rank;

/* The fields' shape (command line): cells along the unsplit last axis,
 * arrays exchanged together, halo width. */
static int levels = 1, nfields = 1, width = 1;

/* Axes of a field: the grid's two, and the levels' when there are several. */
static int axes(void) { return levels > 1 ? 3 : 2; }

/* Cells of one field's array, halo included. */
static size_t field_cells(int n) { return (size_t)(n + 2 * width) * (n + 2 * width) * levels; }

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

/* The 8 directions, in one order every rank and every contender uses. */
static const int DIRECTIONS[8][2] = {{-1, -1}, {-1, 0}, {-1, 1}, {0, -1},
                                     {0, 1},   {1, -1}, {1, 0},  {1, 1}};

/* The rank at `coords` + `o` on the periodic grid. */
static int rank_at(MPI_Comm cart, const int coords[2], const int dims[2], const int o[2]) {
    int c[2], peer;
    for (int a = 0; a < 2; a++) {
        c[a] = (coords[a] + o[a] + dims[a]) % dims[a];
    }
    MPI_Cart_rank(cart, c, &peer);
    return peer;
}

/* The face of one field (C order, `levels` last) sent towards `o` (halo:
 * 0) or the halo filled from `o` (halo: 1), as a subarray. */
static MPI_Datatype subarray(int n, const int o[2], int halo) {
    int sizes[3] = {n + 2 * width, n + 2 * width, levels}, count[3] = {0, 0, levels}, start[3] = {0, 0, 0};
    for (int a = 0; a < 2; a++) {
        count[a] = o[a] == 0 ? n : width;
        if (halo) {
            start[a] = o[a] == -1 ? 0 : o[a] == 1 ? n + width : width;
        } else {
            start[a] = o[a] == 1 ? n : width;
        }
    }
    MPI_Datatype t;
    MPI_Type_create_subarray(axes(), sizes, count, start, MPI_ORDER_C, MPI_DOUBLE, &t);
    return t;
}

/* The faces of every field of `u` towards (or from) `o`, as one committed
 * datatype: a field's subarray on its buffer *buf (one field), else a
 * struct of every field's at their addresses on MPI_BOTTOM. */
static MPI_Datatype region(double **u, int n, const int o[2], int halo, void **buf) {
    MPI_Datatype t = subarray(n, o, halo);
    if (nfields == 1) {
        *buf = u[0];
    } else {
        MPI_Datatype one = t;
        int lengths[nfields];
        MPI_Aint at[nfields];
        MPI_Datatype types[nfields];
        for (int f = 0; f < nfields; f++) {
            lengths[f] = 1;
            MPI_Get_address(u[f], &at[f]);
            types[f] = one;
        }
        MPI_Type_create_struct(nfields, lengths, at, types, &t);
        MPI_Type_free(&one);
        *buf = MPI_BOTTOM;
    }
    MPI_Type_commit(&t);
    return t;
}

/* The persistent point-to-point exchange of `u`: 16 requests. */
static int persistent_requests(MPI_Comm cart, double **u, int n, MPI_Request *req) {
    int k = 0, coords[2], dims[2], periods[2];
    MPI_Cart_get(cart, 2, dims, periods, coords);
    for (int d = 0; d < 8; d++) {
        const int *o = DIRECTIONS[d];
        int peer = rank_at(cart, coords, dims, o);
        int back[2] = {-o[0], -o[1]};
        void *sbuf, *rbuf;
        MPI_Datatype st = region(u, n, o, 0, &sbuf), rt = region(u, n, o, 1, &rbuf);
        int tag = (o[0] + 1) * 3 + (o[1] + 1), back_tag = (back[0] + 1) * 3 + (back[1] + 1);
        MPI_Send_init(sbuf, 1, st, peer, tag, cart, &req[k++]);
        MPI_Recv_init(rbuf, 1, rt, peer, back_tag, cart, &req[k++]);
        MPI_Type_free(&st);
        MPI_Type_free(&rt);
    }
    return k;
}

#ifdef NEIGHBOR_ALLTOALLW_INIT
/* The persistent neighbourhood collective of `u` on a distributed graph of
 * the 8 neighbours: the i-th send goes towards DIRECTIONS[i], the i-th
 * receive comes from the opposite side, so that where one rank is a
 * neighbour several times (small grids) the k-th message from it matches
 * its k-th send. Returns 1 and sets *req, *graph and the 8 types of
 * `send` and `recv`, which the caller frees after the request: Open MPI
 * 4.1's persistent neighbourhood collectives read them at every start. */
static int neighbour_request(MPI_Comm cart, double **u, int n, MPI_Comm *graph, MPI_Request *req,
                             MPI_Datatype *send, MPI_Datatype *recv) {
    int coords[2], dims[2], periods[2], sources[8], destinations[8], counts[8];
    MPI_Aint displs[8];
    void *buf = NULL;
    MPI_Cart_get(cart, 2, dims, periods, coords);
    for (int i = 0; i < 8; i++) {
        const int *o = DIRECTIONS[i];
        int back[2] = {-o[0], -o[1]};
        destinations[i] = rank_at(cart, coords, dims, o);
        sources[i] = rank_at(cart, coords, dims, back);
        send[i] = region(u, n, o, 0, &buf);
        recv[i] = region(u, n, back, 1, &buf);
        counts[i] = 1;
        displs[i] = 0;
    }
    /* Weights of 1 rather than MPI_UNWEIGHTED, a sentinel pointer GCC 12
     * reads as an array of size 0. */
    MPI_Dist_graph_create_adjacent(cart, 8, sources, counts, 8, destinations, counts,
                                   MPI_INFO_NULL, 0, graph);
    NEIGHBOR_ALLTOALLW_INIT(buf, counts, displs, send, buf, counts, displs, recv, *graph,
                            MPI_INFO_NULL, req);
    return 1;
}
#endif

/* GCC 12 reads MPICH's MPI_STATUSES_IGNORE ((MPI_Status *)1) as an array
 * of size 0; MPI is run without statuses, as a code would run it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
/* One contender: sode's exchange (on the caller's arrays, or on fields
 * sode keeps), or MPI's persistent requests. */
struct contender {
    const char *name;
    sode_exchange *x;
    /* Whether sode keeps the fields (sode_exchange_set_shared_fields). */
    int shared;
    MPI_Request req[16];
    int nreq;
    /* Its fields' arrays. */
    double **u;
    double *samples;
    /* Datatypes the requests use, freed after them. */
    MPI_Datatype types[16];
    int ntypes;
};

static void exchange_once(struct contender *c) {
    if (c->x) {
        check(c->shared ? sode_exchange_start_set(c->x, 0) : sode_exchange_start(c->x), "start");
        check(sode_exchange_wait(c->x, 60.0), "wait");
    } else {
        MPI_Startall(c->nreq, c->req);
        MPI_Waitall(c->nreq, c->req, MPI_STATUSES_IGNORE);
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Writes every owned cell that is sent (the `width` rows and columns at
 * each edge), as a code's step computes them before it exchanges: each
 * exchange then moves data just written by its sender, not data its
 * receiver may still hold in cache from the exchange before (which favours
 * a receiver that reads the sender's memory itself). */
static void touch(struct contender *c, int n) {
    size_t side = n + 2 * width;
    for (int f = 0; f < nfields; f++) {
        for (int i = width; i < n + width; i++) {
            int edge = i < 2 * width || i >= n;
            for (int j = width; j < n + width; j = !edge && j == 2 * width - 1 ? n : j + 1) {
                double *cell = &c->u[f][((size_t)i * side + j) * levels];
                for (int k = 0; k < levels; k++) {
                    cell[k] += 1.0;
                }
            }
        }
    }
}

/* Exchanges each rank runs untimed before and after a round's timed ones:
 * the grid's diameter in neighbour steps (set in main). A rank leaves the
 * barrier, and reaches the allreduce after its loop, at its own time; an
 * MPI that polls without yielding in them (MPICH) then holds a core that a
 * rank still exchanging needs, for a scheduler slice, when ranks share
 * cores. A rank finishes its k-th exchange only once every neighbour has
 * started it, so `margin` exchanges on either side keep every rank's timed
 * exchanges clear of every other rank's collectives. */
static int margin = 1;

/* Microseconds per exchange (from its start to the end of its wait; each
 * after a `touch`) on the slowest rank, over `iters`. */
static double timed(struct contender *c, int n, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < margin; i++) {
        touch(c, n);
        exchange_once(c);
    }
    double spent = 0.0;
    for (int i = 0; i < iters; i++) {
        touch(c, n);
        double t = MPI_Wtime();
        exchange_once(c);
        spent += MPI_Wtime() - t;
    }
    for (int i = 0; i < margin; i++) {
        touch(c, n);
        exchange_once(c);
    }
    double us = spent * 1e6 / iters, slowest;
    MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* What cell (gi, gj) of the global grid holds at `level` of `field`. */
static double global_value(long gi, long gj, const int size[2], int level, int field) {
    return (((double)gi * size[1] + gj) * levels + level) * nfields + field;
}

/* Fills the owned cells with their global index and the halo with -1,
 * exchanges once and checks every halo cell; aborts on a wrong one. */
static void verify(MPI_Comm cart, struct contender *c, int n) {
    int coords[2], dims[2], periods[2], size[2], side = n + 2 * width;
    MPI_Cart_get(cart, 2, dims, periods, coords);
    size[0] = dims[0] * n;
    size[1] = dims[1] * n;
    for (int f = 0; f < nfields; f++) {
        for (int i = 0; i < side; i++) {
            for (int j = 0; j < side; j++) {
                int owned = i >= width && i < n + width && j >= width && j < n + width;
                long gi = (long)coords[0] * n + i - width, gj = (long)coords[1] * n + j - width;
                for (int k = 0; k < levels; k++) {
                    c->u[f][((size_t)i * side + j) * levels + k] = owned ? global_value(gi, gj, size, k, f) : -1.0;
                }
            }
        }
    }
    exchange_once(c);
    long wrong = 0, first = -1;
    for (int f = 0; f < nfields; f++) {
        for (int i = 0; i < side; i++) {
            for (int j = 0; j < side; j++) {
                long gi = ((long)coords[0] * n + i - width + size[0]) % size[0];
                long gj = ((long)coords[1] * n + j - width + size[1]) % size[1];
                for (int k = 0; k < levels; k++) {
                    if (c->u[f][((size_t)i * side + j) * levels + k] != global_value(gi, gj, size, k, f)) {
                        first = wrong++ == 0 ? (long)i * side + j : first;
                    }
                }
            }
        }
    }
    long all;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (all != 0) {
        if (wrong) {
            fprintf(stderr, "rank %d: %s, block %d: %ld halo cells wrong, the first at (%ld, %ld)\n",
                    rank, c->name, n, wrong, first / side, first % side);
        }
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

/* The median and the minimum of `c`'s rounds, for the table. */
static void cells(const struct contender *c, int rounds, double *median, double *min) {
    qsort(c->samples, rounds, sizeof *c->samples, cmp);
    *median = c->samples[rounds / 2];
    *min = c->samples[0];
}

/* The contenders, in the table's order: sode's two first, then MPI's. */
enum { SODE, SODE_SHARED, PERSISTENT, NEIGHBOURHOOD, CONTENDERS };

static void print_row(struct contender *c, int count, int n, int rounds) {
    double median[CONTENDERS], min[CONTENDERS], best = 0.0;
    for (int i = 0; i < count; i++) {
        cells(&c[i], rounds, &median[i], &min[i]);
        if (i >= PERSISTENT && (best == 0.0 || median[i] < best)) {
            best = median[i];
        }
    }
    if (rank != 0) {
        return;
    }
    size_t sent = (size_t)nfields * levels * (4 * (size_t)n * width + 4 * (size_t)width * width) * sizeof(double);
    printf("| %d x %d | %zu |", n, n, sent);
    for (int i = 0; i < CONTENDERS; i++) {
        if (i < count) {
            printf(" %.1f | %.1f |", median[i], min[i]);
        } else {
            printf(" n/a | n/a |");
        }
    }
    printf(" %.2f | %.2f |\n", best / median[SODE], best / median[SODE_SHARED]);
}

/* Commits sode's exchange of `c`'s fields (or of fields sode keeps, set
 * into c->u, when c->shared). */
static void sode_contender(sode_comm *sc, MPI_Comm cart, struct contender *c, int n) {
    int h[2] = {width, width};
    int64_t ext[3] = {n + 2 * width, n + 2 * width, levels}, lo[3] = {width, width, 0}, own[3] = {n, n, levels};
    check(sode_exchange_create_mpi_cart(sc, cart, h, h, SODE_BOX, &c->x), "create");
    if (c->shared) {
        check(sode_exchange_set_shared_fields(c->x, 1), "shared fields");
    }
    for (int f = 0; f < nfields; f++) {
        check(sode_exchange_add_field(c->x, c->shared ? NULL : c->u[f], SODE_F64, axes(), ext, lo, own, NULL, NULL,
                                      SODE_ORDER_C),
              "field");
    }
    check(sode_exchange_commit(c->x), "commit");
    for (int f = 0; c->shared && f < nfields; f++) {
        void *array;
        check(sode_exchange_shared_field(c->x, 0, f, &array), "shared field");
        c->u[f] = array;
    }
}

static void row(MPI_Comm cart, int n, int rounds, int divisor) {
    struct contender c[CONTENDERS] = {{.name = "sode"},
                                      {.name = "sode, shared fields", .shared = 1},
                                      {.name = "MPI persistent"},
                                      {.name = "MPI neighbourhood collective"}};
    int count = NEIGHBOURHOOD;
    MPI_Comm graph = MPI_COMM_NULL;
    for (int i = 0; i < CONTENDERS; i++) {
        c[i].u = calloc(nfields, sizeof(double *));
        for (int f = 0; f < nfields && !c[i].shared; f++) {
            c[i].u[f] = calloc(field_cells(n), sizeof(double));
            if (!c[i].u[f]) {
                fprintf(stderr, "rank %d: block %d: out of memory for the fields\n", rank, n);
                MPI_Abort(MPI_COMM_WORLD, 4);
            }
        }
        c[i].samples = calloc(rounds, sizeof(double));
    }
    sode_comm *sc;
    check(sode_comm_create_mpi(cart, 60.0, &sc), "comm");
    sode_contender(sc, cart, &c[SODE], n);
    sode_contender(sc, cart, &c[SODE_SHARED], n);
    c[PERSISTENT].nreq = persistent_requests(cart, c[PERSISTENT].u, n, c[PERSISTENT].req);
#ifdef NEIGHBOR_ALLTOALLW_INIT
    struct contender *nb = &c[NEIGHBOURHOOD];
    nb->nreq = neighbour_request(cart, nb->u, n, &graph, nb->req, nb->types, nb->types + 8);
    nb->ntypes = 16;
    count = CONTENDERS;
#endif
    /* Fewer iterations where each moves more (levels, fields, width):
     * a round moves about 50 MB, in at least 10 exchanges. */
    double sent = (double)nfields * levels * (4.0 * n * width + 4.0 * width * width) * sizeof(double);
    int iters = n <= 64 ? 2000 : n <= 256 ? 300 : 30;
    if (iters > 5e7 / sent) {
        iters = 5e7 / sent > 10 ? (int)(5e7 / sent) : 10;
    }
    iters /= divisor;
    if (iters < 10) {
        iters = 10;
    }
    for (int i = 0; i < count; i++) {
        verify(cart, &c[i], n);
        timed(&c[i], n, iters / 10);
    }
    /* Each round rotates which contender goes first. */
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < count; k++) {
            struct contender *next = &c[(r + k) % count];
            next->samples[r] = timed(next, n, iters);
        }
    }
    print_row(c, count, n, rounds);
    for (int i = 0; i < CONTENDERS; i++) {
        for (int q = 0; q < c[i].nreq; q++) {
            MPI_Request_free(&c[i].req[q]);
        }
        for (int q = 0; q < c[i].ntypes; q++) {
            MPI_Type_free(&c[i].types[q]);
        }
        for (int f = 0; f < nfields && !c[i].shared; f++) {
            free(c[i].u[f]);
        }
        free(c[i].u);
        free(c[i].samples);
    }
    if (graph != MPI_COMM_NULL) {
        MPI_Comm_free(&graph);
    }
    sode_exchange_free(&c[SODE].x);
    sode_exchange_free(&c[SODE_SHARED].x);
    sode_comm_free(&sc);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size, dims[2] = {0, 0}, periods[2] = {1, 1}, rounds = argc > 1 ? atoi(argv[1]) : 7;
    int divisor = argc > 2 ? atoi(argv[2]) : 1, largest = argc > 3 ? atoi(argv[3]) : 1024;
    levels = argc > 4 ? atoi(argv[4]) : 1;
    nfields = argc > 5 ? atoi(argv[5]) : 1;
    width = argc > 6 ? atoi(argv[6]) : 1;
    if (divisor < 1) {
        divisor = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rounds < 1) {
        rounds = 7;
    }
    if (levels < 1 || nfields < 1 || width < 1 || levels > 1000 || nfields > 64 || width > 8) {
        if (rank == 0) {
            fprintf(stderr, "bench2d: levels (1..1000), fields (1..64) and halo (1..8) must be positive and at most those\n");
        }
        MPI_Finalize();
        return 2;
    }
    MPI_Dims_create(size, 2, dims);
    /* Periodic, with corners: no rank is more than half a side away. */
    margin = (dims[0] > dims[1] ? dims[0] : dims[1]) / 2;
    margin = margin < 1 ? 1 : margin;
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    if (rank == 0) {
        int len;
        char library[MPI_MAX_LIBRARY_VERSION_STRING];
        MPI_Get_library_version(library, &len);
        library[strcspn(library, ",\n")] = '\0';
        for (char *t = library; *t; t++) {
            *t = *t == '\t' ? ' ' : *t;
        }
        char shape[128];
        if (levels == 1 && nfields == 1) {
            snprintf(shape, sizeof shape, "one double field");
        } else {
            snprintf(shape, sizeof shape, "%d double field%s of %d level%s", nfields, nfields > 1 ? "s" : "",
                     levels, levels > 1 ? "s" : "");
        }
        printf("%s; %d ranks on a %d x %d periodic grid, 8 neighbours, %s, halo %d; "
               "us per exchange (slowest rank); rounds: %d, rotating; every contender's halo checked\n\n",
               library, size, dims[0], dims[1], shape, width, rounds);
        printf("| block per rank | bytes sent per rank | sode median | sode min | sode shared median "
               "| sode shared min | persistent median | persistent min | neighbourhood median "
               "| neighbourhood min | best peer / sode | best peer / sode shared |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    int sizes[4] = {16, 64, 256, 1024};
    for (int i = 0; i < 4 && sizes[i] <= largest; i++) {
        row(cart, sizes[i], rounds, divisor);
    }
    MPI_Comm_free(&cart);
    MPI_Finalize();
    return 0;
}
