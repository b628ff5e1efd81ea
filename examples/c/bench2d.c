/* A 2-D halo exchange (one double field, halo 1, 8 neighbours, periodic)
 * through sode and through its two MPI peers, in the same run, for blocks
 * of 16^2 to 1024^2 cells per rank:
 *
 * - MPI persistent point-to-point: MPI_Send_init / MPI_Recv_init of
 *   subarrays, MPI_Startall / MPI_Waitall;
 * - the MPI-4 persistent neighbourhood collective: MPI_Neighbor_alltoallw_init
 *   of the same subarrays on a distributed-graph communicator of the 8
 *   neighbours (Open MPI 4.1 has it as MPIX_Neighbor_alltoallw_init in
 *   mpi-ext.h; an MPI without it prints "n/a").
 *
 * Before timing, each contender's exchange is run once on a field whose
 * every cell holds its global index, and every halo cell is checked.
 * Rounds rotate which contender goes first. Prints a table: microseconds per
 * exchange (the slowest rank's mean over a round), median and minimum of
 * the rounds, and the best peer's median over sode's (above 1: sode is
 * faster).
 *
 *   mpirun -n 4 ./bench2d [rounds [divisor [largest block]]]
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

/* The face of `u` (n + 2 squared, C order) sent towards `o` (halo: 0) or
 * the halo filled from `o` (halo: 1), as a committed subarray. */
static MPI_Datatype region(int n, const int o[2], int halo) {
    int sizes[2] = {n + 2, n + 2}, count[2], start[2];
    for (int a = 0; a < 2; a++) {
        count[a] = o[a] == 0 ? n : 1;
        if (halo) {
            start[a] = o[a] == -1 ? 0 : o[a] == 1 ? n + 1 : 1;
        } else {
            start[a] = o[a] == 1 ? n : 1;
        }
    }
    MPI_Datatype t;
    MPI_Type_create_subarray(2, sizes, count, start, MPI_ORDER_C, MPI_DOUBLE, &t);
    MPI_Type_commit(&t);
    return t;
}

/* The persistent point-to-point exchange of `u`: 16 requests. */
static int persistent_requests(MPI_Comm cart, double *u, int n, MPI_Request *req) {
    int k = 0, coords[2], dims[2], periods[2];
    MPI_Cart_get(cart, 2, dims, periods, coords);
    for (int d = 0; d < 8; d++) {
        const int *o = DIRECTIONS[d];
        int peer = rank_at(cart, coords, dims, o);
        int back[2] = {-o[0], -o[1]};
        MPI_Datatype st = region(n, o, 0), rt = region(n, o, 1);
        int tag = (o[0] + 1) * 3 + (o[1] + 1), back_tag = (back[0] + 1) * 3 + (back[1] + 1);
        MPI_Send_init(u, 1, st, peer, tag, cart, &req[k++]);
        MPI_Recv_init(u, 1, rt, peer, back_tag, cart, &req[k++]);
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
static int neighbour_request(MPI_Comm cart, double *u, int n, MPI_Comm *graph, MPI_Request *req,
                             MPI_Datatype *send, MPI_Datatype *recv) {
    int coords[2], dims[2], periods[2], sources[8], destinations[8], counts[8];
    MPI_Aint displs[8];
    MPI_Cart_get(cart, 2, dims, periods, coords);
    for (int i = 0; i < 8; i++) {
        const int *o = DIRECTIONS[i];
        int back[2] = {-o[0], -o[1]};
        destinations[i] = rank_at(cart, coords, dims, o);
        sources[i] = rank_at(cart, coords, dims, back);
        send[i] = region(n, o, 0);
        recv[i] = region(n, back, 1);
        counts[i] = 1;
        displs[i] = 0;
    }
    /* Weights of 1 rather than MPI_UNWEIGHTED, a sentinel pointer GCC 12
     * reads as an array of size 0. */
    MPI_Dist_graph_create_adjacent(cart, 8, sources, counts, 8, destinations, counts,
                                   MPI_INFO_NULL, 0, graph);
    NEIGHBOR_ALLTOALLW_INIT(u, counts, displs, send, u, counts, displs, recv, *graph,
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
/* One contender: sode's exchange, or MPI's persistent requests. */
struct contender {
    const char *name;
    sode_exchange *x;
    MPI_Request req[16];
    int nreq;
    double *u;
    double *samples;
    /* Datatypes the requests use, freed after them. */
    MPI_Datatype types[16];
    int ntypes;
};

static void exchange_once(struct contender *c) {
    if (c->x) {
        check(sode_exchange_start(c->x), "start");
        check(sode_exchange_wait(c->x, 60.0), "wait");
    } else {
        MPI_Startall(c->nreq, c->req);
        MPI_Waitall(c->nreq, c->req, MPI_STATUSES_IGNORE);
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Microseconds per exchange on the slowest rank, over `iters`. */
static double timed(struct contender *c, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        exchange_once(c);
    }
    double us = (MPI_Wtime() - t) * 1e6 / iters, slowest;
    MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* Fills the owned cells with their global index and the halo with -1,
 * exchanges once and checks every halo cell; aborts on a wrong one. */
static void verify(MPI_Comm cart, struct contender *c, int n) {
    int coords[2], dims[2], periods[2], size[2];
    MPI_Cart_get(cart, 2, dims, periods, coords);
    size[0] = dims[0] * n;
    size[1] = dims[1] * n;
    for (int i = 0; i < n + 2; i++) {
        for (int j = 0; j < n + 2; j++) {
            int owned = i >= 1 && i <= n && j >= 1 && j <= n;
            c->u[i * (n + 2) + j] = owned ? (double)(coords[0] * n + i - 1) * size[1] + coords[1] * n + j - 1 : -1.0;
        }
    }
    exchange_once(c);
    long wrong = 0, first = -1;
    for (int i = 0; i < n + 2; i++) {
        for (int j = 0; j < n + 2; j++) {
            int gi = (coords[0] * n + i - 1 + size[0]) % size[0];
            int gj = (coords[1] * n + j - 1 + size[1]) % size[1];
            if (c->u[i * (n + 2) + j] != (double)gi * size[1] + gj) {
                first = wrong++ == 0 ? (long)i * (n + 2) + j : first;
            }
        }
    }
    long all;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (all != 0) {
        if (wrong) {
            fprintf(stderr, "rank %d: %s, block %d: %ld halo cells wrong, the first at (%ld, %ld)\n",
                    rank, c->name, n, wrong, first / (n + 2), first % (n + 2));
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

static void print_row(struct contender *c, int count, int n, int rounds) {
    double median[3], min[3], best = 0.0;
    for (int i = 0; i < count; i++) {
        cells(&c[i], rounds, &median[i], &min[i]);
        if (i > 0 && (best == 0.0 || median[i] < best)) {
            best = median[i];
        }
    }
    if (rank != 0) {
        return;
    }
    printf("| %d x %d | %zu | %.1f | %.1f | %.1f | %.1f |", n, n, (size_t)(4 * n + 4) * sizeof(double),
           median[0], min[0], median[1], min[1]);
    if (count > 2) {
        printf(" %.1f | %.1f |", median[2], min[2]);
    } else {
        printf(" n/a | n/a |");
    }
    printf(" %.2f |\n", best / median[0]);
}

static void row(MPI_Comm cart, int n, int rounds, int divisor) {
    size_t cells_per_rank = (size_t)(n + 2) * (n + 2);
    struct contender c[3] = {{.name = "sode"}, {.name = "MPI persistent"}, {.name = "MPI neighbourhood collective"}};
    int count = 2;
    MPI_Comm graph = MPI_COMM_NULL;
    for (int i = 0; i < 3; i++) {
        c[i].u = calloc(cells_per_rank, sizeof(double));
        c[i].samples = calloc(rounds, sizeof(double));
    }
    sode_comm *sc;
    int h[2] = {1, 1};
    int64_t ext[2] = {n + 2, n + 2}, lo[2] = {1, 1}, own[2] = {n, n};
    check(sode_comm_create_mpi(cart, 60.0, &sc), "comm");
    check(sode_exchange_create_mpi_cart(sc, cart, h, h, SODE_BOX, &c[0].x), "create");
    check(sode_exchange_add_field(c[0].x, c[0].u, SODE_F64, 2, ext, lo, own, NULL, NULL, SODE_ORDER_C), "field");
    check(sode_exchange_commit(c[0].x), "commit");
    c[1].nreq = persistent_requests(cart, c[1].u, n, c[1].req);
#ifdef NEIGHBOR_ALLTOALLW_INIT
    c[2].nreq = neighbour_request(cart, c[2].u, n, &graph, c[2].req, c[2].types, c[2].types + 8);
    c[2].ntypes = 16;
    count = 3;
#endif
    int iters = (n <= 64 ? 2000 : n <= 256 ? 300 : 30) / divisor;
    if (iters < 10) {
        iters = 10;
    }
    for (int i = 0; i < count; i++) {
        verify(cart, &c[i], n);
        timed(&c[i], iters / 10);
    }
    /* Each round rotates which contender goes first. */
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < count; k++) {
            struct contender *next = &c[(r + k) % count];
            next->samples[r] = timed(next, iters);
        }
    }
    print_row(c, count, n, rounds);
    for (int i = 0; i < 3; i++) {
        for (int q = 0; q < c[i].nreq; q++) {
            MPI_Request_free(&c[i].req[q]);
        }
        for (int q = 0; q < c[i].ntypes; q++) {
            MPI_Type_free(&c[i].types[q]);
        }
        free(c[i].u);
        free(c[i].samples);
    }
    if (graph != MPI_COMM_NULL) {
        MPI_Comm_free(&graph);
    }
    sode_exchange_free(&c[0].x);
    sode_comm_free(&sc);
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
        int len;
        char library[MPI_MAX_LIBRARY_VERSION_STRING];
        MPI_Get_library_version(library, &len);
        library[strcspn(library, ",\n")] = '\0';
        for (char *t = library; *t; t++) {
            *t = *t == '\t' ? ' ' : *t;
        }
        printf("%s; %d ranks on a %d x %d periodic grid, 8 neighbours, one double field, halo 1; "
               "us per exchange (slowest rank); rounds: %d, rotating; every contender's halo checked\n\n",
               library, size, dims[0], dims[1], rounds);
        printf("| block per rank | bytes sent per rank | sode median | sode min | persistent median "
               "| persistent min | neighbourhood median | neighbourhood min | best peer / sode |\n"
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    int sizes[4] = {16, 64, 256, 1024};
    for (int i = 0; i < 4 && sizes[i] <= largest; i++) {
        row(cart, sizes[i], rounds, divisor);
    }
    MPI_Comm_free(&cart);
    MPI_Finalize();
    return 0;
}
