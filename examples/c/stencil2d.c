/* The halo exchange of a 2-D stencil code through sode and through MPI
 * (Isend/Irecv of subarrays), compared cell for cell, bit for bit, and
 * against the values the neighbours own.
 *
 *   mpirun -n 4 ./stencil2d            every configuration for 4 ranks
 *   mpirun -n 4 ./stencil2d --grid 2x2 every configuration on that grid only
 *   ./stencil2d --env PX PY [--rdma] [--subsets] [--global NX NY]
 *                                      without MPI: ranks started by sode-run
 *                                      or SODE_* variables (the two-VM test),
 *                                      on a PX x PY grid (of NX x NY cells,
 *                                      default 13 x 10), checked against
 *                                      the owners' values only; --rdma: RDMA
 *                                      between ranks of one node too;
 *                                      --subsets: starts on some fields
 *                                      (every rank alike)
 *
 * Configurations: process grids 1xN, Nx1 (and 2x2 for 4 ranks), periodic
 * on no, both or one axis, star and box stencils; two fields of different
 * types (double, int32) with unequal halo widths per axis and side; a
 * global grid that does not divide evenly. Halo cells without a neighbour
 * must keep their sentinel. Under mpirun every configuration runs twice:
 * on the program's arrays, and on arrays sode keeps in shared memory
 * (sode_exchange_set_shared_fields, two sets used in turn), which
 * neighbours on the node read faces from straight. On the program's
 * arrays, starts on some of the fields follow (sode_exchange_start_fields:
 * one field, the other on another array, both, none, then every field
 * again): the fields started get their halos, the others keep theirs
 * untouched, and misuse is refused. */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_SODE(call)                                                             \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ != SODE_OK) {                                                        \
            fprintf(stderr, "rank %d: %s failed (%d): %s\n", world_rank, #call, rc_, \
                    sode_last_error());                                              \
            die(2);                                                                  \
        }                                                                            \
    } while (0)

static int world_rank;
/* Whether MPI runs beside sode (else: --env, sode alone, over env_comm). */
static int use_mpi = 1;
static sode_comm *env_comm;
/* --rdma: every neighbour over RDMA, on this node too. */
static int force_rdma = 0;
/* --subsets: starts on some fields without MPI too. */
static int env_subsets = 0;
/* Whether sode keeps the fields (two sets, exchanged in turn). */
static int shared = 0;

static void die(int code) {
    if (use_mpi) {
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    exit(code);
}

/* Halo widths: the exchange's are the widest of its fields'. */
static const int U_LO[2] = {1, 2}, U_HI[2] = {2, 1};
static const int V_LO[2] = {1, 1}, V_HI[2] = {0, 1};
static const double U_SENTINEL = -999.5;
static const int32_t V_SENTINEL = -77;

struct field {
    int lo[2], hi[2];
    int64_t ext[2];
    int elem; /* bytes */
    MPI_Datatype type;
    void *sode, *mpi;
};

struct config {
    int dims[2], periods[2], box;
    int global[2];
};

struct rank_view {
    MPI_Comm cart;
    int coords[2], start[2], own[2];
};

static double u_value(int it, int gi, int gj) { return it * 1e6 + gi * 1e3 + gj + 0.25; }
static int32_t v_value(int it, int gi, int gj) { return it * 1000000 + gi * 1000 + gj + 7; }

static void block(int n, int p, int c, int *start, int *size) {
    int q = n / p, r = n % p;
    *start = c * q + (c < r ? c : r);
    *size = q + (c < r);
}

/* The global cell a local cell stands for, and whether anyone owns it
 * (over a periodic edge, or not at all); sets *outside to the number of
 * axes on which it lies outside the owned box. */
static int global_of(const struct config *cf, const struct rank_view *v, const struct field *f,
                     const int local[2], int g[2], int *outside) {
    *outside = 0;
    for (int a = 0; a < 2; a++) {
        int k = local[a] - f->lo[a];
        g[a] = v->start[a] + k;
        if (k < 0 || k >= v->own[a]) {
            (*outside)++;
        }
        if (g[a] < 0 || g[a] >= cf->global[a]) {
            if (!cf->periods[a]) {
                return 0;
            }
            g[a] = (g[a] + cf->global[a]) % cf->global[a];
        }
    }
    return 1;
}

static void fill(const struct config *cf, const struct rank_view *v, struct field *f, int it,
                 void *data) {
    for (int i = 0; i < f->ext[0]; i++) {
        for (int j = 0; j < f->ext[1]; j++) {
            int local[2] = {i, j}, g[2], outside;
            global_of(cf, v, f, local, g, &outside);
            size_t at = (size_t)i * f->ext[1] + j;
            if (f->elem == 8) {
                ((double *)data)[at] = outside ? U_SENTINEL : u_value(it, g[0], g[1]);
            } else {
                ((int32_t *)data)[at] = outside ? V_SENTINEL : v_value(it, g[0], g[1]);
            }
        }
    }
}

/* Every cell as the exchange must leave it: owned cells unchanged, halo
 * cells the owner's value, or the sentinel where there is no neighbour (or
 * a corner in a star stencil). Returns the halo cells filled. */
static long check_expected(const struct config *cf, const struct rank_view *v,
                           const struct field *f, int it, const void *data, const char *who) {
    long filled = 0;
    for (int i = 0; i < f->ext[0]; i++) {
        for (int j = 0; j < f->ext[1]; j++) {
            int local[2] = {i, j}, g[2], outside;
            int owned = global_of(cf, v, f, local, g, &outside);
            int reached = owned && (outside < 2 || cf->box);
            size_t at = (size_t)i * f->ext[1] + j;
            int ok;
            if (f->elem == 8) {
                double want = reached ? u_value(it, g[0], g[1]) : U_SENTINEL;
                ok = memcmp(&((const double *)data)[at], &want, sizeof want) == 0;
            } else {
                int32_t want = reached ? v_value(it, g[0], g[1]) : V_SENTINEL;
                ok = ((const int32_t *)data)[at] == want;
            }
            if (!ok) {
                fprintf(stderr,
                        "rank %d: %s: %s field, cell (%d, %d) (global %d, %d, outside on %d "
                        "axes) is wrong\n",
                        world_rank, who, f->elem == 8 ? "double" : "int32", i, j, g[0], g[1],
                        outside);
                die(1);
            }
            filled += outside && reached;
        }
    }
    return filled;
}

/* The same exchange through MPI: Isend/Irecv of subarrays per neighbour and
 * field. */
static void mpi_exchange(const struct config *cf, const struct rank_view *v, struct field *fs,
                         int nf) {
    MPI_Request req[2 * 8 * 2];
    MPI_Status statuses[sizeof req / sizeof req[0]]; /* not MPI_STATUSES_IGNORE: GCC 12 warns on MPICH's */
    int n = 0;
    for (int d0 = -1; d0 <= 1; d0++) {
        for (int d1 = -1; d1 <= 1; d1++) {
            int o[2] = {d0, d1};
            int nonzero = (d0 != 0) + (d1 != 0);
            if (nonzero == 0 || (nonzero == 2 && !cf->box)) {
                continue;
            }
            int c[2], peer, exists = 1;
            for (int a = 0; a < 2; a++) {
                c[a] = v->coords[a] + o[a];
                if (c[a] < 0 || c[a] >= cf->dims[a]) {
                    exists &= cf->periods[a];
                    c[a] = (c[a] + cf->dims[a]) % cf->dims[a];
                }
            }
            if (!exists) {
                continue;
            }
            MPI_Cart_rank(v->cart, c, &peer);
            for (int fi = 0; fi < nf; fi++) {
                struct field *f = &fs[fi];
                int ss[2], sn[2], rs[2], rn[2], sizes[2] = {(int)f->ext[0], (int)f->ext[1]};
                for (int a = 0; a < 2; a++) {
                    int lo = f->lo[a], own = v->own[a];
                    ss[a] = o[a] == -1 ? lo : o[a] == 1 ? lo + own - f->lo[a] : lo;
                    sn[a] = o[a] == -1 ? f->hi[a] : o[a] == 1 ? f->lo[a] : own;
                    rs[a] = o[a] == -1 ? 0 : o[a] == 1 ? lo + own : lo;
                    rn[a] = o[a] == -1 ? f->lo[a] : o[a] == 1 ? f->hi[a] : own;
                }
                int send_tag = fi * 100 + (o[0] + 1) * 3 + (o[1] + 1);
                int recv_tag = fi * 100 + (1 - o[0]) * 3 + (1 - o[1]);
                MPI_Datatype t;
                if (sn[0] > 0 && sn[1] > 0) {
                    MPI_Type_create_subarray(2, sizes, sn, ss, MPI_ORDER_C, f->type, &t);
                    MPI_Type_commit(&t);
                    MPI_Isend(f->mpi, 1, t, peer, send_tag, v->cart, &req[n++]);
                    MPI_Type_free(&t);
                }
                if (rn[0] > 0 && rn[1] > 0) {
                    MPI_Type_create_subarray(2, sizes, rn, rs, MPI_ORDER_C, f->type, &t);
                    MPI_Type_commit(&t);
                    MPI_Irecv(f->mpi, 1, t, peer, recv_tag, v->cart, &req[n++]);
                    MPI_Type_free(&t);
                }
            }
        }
    }
    MPI_Waitall(n, req, statuses);
}

static void setup(const struct config *cf, struct rank_view *v, struct field fs[2]) {
    if (use_mpi) {
        MPI_Cart_create(MPI_COMM_WORLD, 2, cf->dims, cf->periods, 1, &v->cart);
        int me;
        MPI_Comm_rank(v->cart, &me);
        MPI_Cart_coords(v->cart, me, 2, v->coords);
    } else {
        /* Row-major, as MPI_Cart_create without reordering. */
        v->coords[0] = world_rank / cf->dims[1];
        v->coords[1] = world_rank % cf->dims[1];
    }
    for (int a = 0; a < 2; a++) {
        block(cf->global[a], cf->dims[a], v->coords[a], &v->start[a], &v->own[a]);
    }
    for (int fi = 0; fi < 2; fi++) {
        struct field *f = &fs[fi];
        memcpy(f->lo, fi == 0 ? U_LO : V_LO, sizeof f->lo);
        memcpy(f->hi, fi == 0 ? U_HI : V_HI, sizeof f->hi);
        f->elem = fi == 0 ? 8 : 4;
        f->type = fi == 0 ? MPI_DOUBLE : MPI_INT32_T;
        for (int a = 0; a < 2; a++) {
            f->ext[a] = f->lo[a] + v->own[a] + f->hi[a];
        }
        size_t bytes = (size_t)f->ext[0] * f->ext[1] * f->elem;
        f->sode = malloc(bytes);
        f->mpi = malloc(bytes);
    }
}

static sode_exchange *sode_setup(const struct config *cf, struct rank_view *v, struct field fs[2],
                                 sode_comm **comm) {
    int lo[2] = {1, 2}, hi[2] = {2, 1}; /* the widest of the fields' */
    int shape = cf->box ? SODE_BOX : SODE_STAR;
    sode_exchange *x;
    if (use_mpi) {
        CHECK_SODE(sode_comm_create_mpi(v->cart, 60.0, comm));
        CHECK_SODE(sode_exchange_create_mpi_cart(*comm, v->cart, lo, hi, shape, &x));
    } else {
        *comm = NULL;
        CHECK_SODE(sode_exchange_create_cart(env_comm, 2, cf->dims, v->coords, cf->periods, lo, hi,
                                             shape, &x));
        if (force_rdma) {
            CHECK_SODE(sode_exchange_set_transport(x, SODE_TRANSPORT_RDMA));
        }
    }
    if (shared) {
        CHECK_SODE(sode_exchange_set_shared_fields(x, 2));
    }
    for (int fi = 0; fi < 2; fi++) {
        struct field *f = &fs[fi];
        int64_t owned_lo[2] = {f->lo[0], f->lo[1]}, own[2] = {v->own[0], v->own[1]};
        CHECK_SODE(sode_exchange_add_field(x, shared ? NULL : f->sode,
                                           fi == 0 ? SODE_F64 : SODE_I32, 2, f->ext, owned_lo, own,
                                           f->lo, f->hi, SODE_ORDER_C));
    }
    CHECK_SODE(sode_exchange_commit(x));
    return x;
}

/* How many sides of the exchange's messages travel in place (read from or
 * written into the fields by the device), and over how many links (a line
 * each), from sode_exchange_describe. */
static void count_in_place(sode_exchange *x, int *sends, int *recvs, int *links) {
    char text[8192];
    size_t needed = 0;
    CHECK_SODE(sode_exchange_describe(x, text, sizeof text, &needed));
    if (needed > sizeof text) {
        fprintf(stderr, "rank %d: the description needs %zu bytes\n", world_rank, needed);
        die(2);
    }
    *sends = *recvs = *links = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        *links += 1;
        for (char *side = strchr(line, ';'); side; side = strchr(side + 1, ';')) {
            char *end = strchr(side + 1, ';');
            size_t n = end ? (size_t)(end - side) : strlen(side);
            char part[256];
            snprintf(part, sizeof part, "%.*s", (int)n, side);
            if (strstr(part, "in place")) {
                *(strstr(part, "sends") ? sends : recvs) += 1;
            }
        }
    }
}

/* Fails unless `data` holds what fill() writes for iteration `it`: a
 * field no start carried keeps its halo as it was. */
static void check_untouched(const struct config *cf, const struct rank_view *v, struct field *f,
                            int it, const void *data, const char *who) {
    size_t bytes = (size_t)f->ext[0] * f->ext[1] * f->elem;
    fill(cf, v, f, it, f->mpi);
    if (memcmp(data, f->mpi, bytes) != 0) {
        fprintf(stderr, "rank %d: %s: the %s field, left out, changed\n", world_rank, who,
                f->elem == 8 ? "double" : "int32");
        die(1);
    }
}

/* Fills both fields for iteration `it` (field 0 into `u`), starts the
 * fields `list` names, waits. */
static void start_some(const struct config *cf, const struct rank_view *v, struct field fs[2],
                       sode_exchange *x, int it, int n, const int *list, void *u, void **arrays) {
    fill(cf, v, &fs[0], it, u);
    fill(cf, v, &fs[1], it, fs[1].sode);
    CHECK_SODE(sode_exchange_start_fields(x, n, list, arrays));
    CHECK_SODE(sode_exchange_wait(x, 60.0));
}

/* Starts on some of the fields, iterations 4 to 8; returns the halo cells
 * filled. */
static long run_subsets(const struct config *cf, const struct rank_view *v, struct field fs[2],
                        sode_exchange *x) {
    long filled = 0;
    const int just_v[1] = {1}, just_u[1] = {0}, both[2] = {1, 0}, twice[2] = {0, 0}, beyond[1] = {2};
    start_some(cf, v, fs, x, 4, 1, just_v, fs[0].sode, NULL);
    filled += check_expected(cf, v, &fs[1], 4, fs[1].sode, "int32 field alone");
    check_untouched(cf, v, &fs[0], 4, fs[0].sode, "int32 field alone");

    size_t u_bytes = (size_t)fs[0].ext[0] * fs[0].ext[1] * fs[0].elem;
    void *stage = malloc(u_bytes);
    if (!stage) {
        die(1);
    }
    fill(cf, v, &fs[0], 5, fs[0].sode);
    void *arrays[1] = {stage};
    start_some(cf, v, fs, x, 5, 1, just_u, stage, arrays);
    filled += check_expected(cf, v, &fs[0], 5, stage, "double field alone, on another array");
    check_untouched(cf, v, &fs[0], 5, fs[0].sode, "double field alone, on another array");
    check_untouched(cf, v, &fs[1], 5, fs[1].sode, "double field alone, on another array");
    free(stage);

    start_some(cf, v, fs, x, 6, 2, both, fs[0].sode, NULL);
    for (int fi = 0; fi < 2; fi++) {
        filled += check_expected(cf, v, &fs[fi], 6, fi ? fs[1].sode : fs[0].sode, "both, listed");
    }
    start_some(cf, v, fs, x, 7, 0, NULL, fs[0].sode, NULL);
    check_untouched(cf, v, &fs[0], 7, fs[0].sode, "none");
    check_untouched(cf, v, &fs[1], 7, fs[1].sode, "none");
    if (sode_exchange_start_fields(x, 2, twice, NULL) != SODE_ERR_ARG
        || sode_exchange_start_fields(x, 1, beyond, NULL) != SODE_ERR_ARG
        || !strstr(sode_last_error(), "numbered 0..1")) {
        fprintf(stderr, "rank %d: a field listed twice or beyond the exchange's was not refused (%s)\n",
                world_rank, sode_last_error());
        die(1);
    }
    for (int fi = 0; fi < 2; fi++) {
        fill(cf, v, &fs[fi], 8, fs[fi].sode);
    }
    CHECK_SODE(sode_exchange_start(x));
    CHECK_SODE(sode_exchange_wait(x, 60.0));
    for (int fi = 0; fi < 2; fi++) {
        filled += check_expected(cf, v, &fs[fi], 8, fs[fi].sode, "every field again");
    }
    return filled;
}

/* Whether the starts on some fields run: always under MPI; without it,
 * under --subsets, given to every rank alike. Where faces travel in place
 * over RDMA, such a start packs them through sode's buffers. */
static int subsets_run(void) { return use_mpi || env_subsets; }

static void teardown(struct rank_view *v, struct field fs[2], sode_exchange **x, sode_comm **c) {
    CHECK_SODE(sode_exchange_free(x));
    CHECK_SODE(sode_comm_free(c));
    for (int fi = 0; fi < 2; fi++) {
        free(fs[fi].sode);
        free(fs[fi].mpi);
    }
    if (use_mpi) {
        MPI_Comm_free(&v->cart);
    }
}

static void run(const struct config *cf) {
    struct rank_view v;
    struct field fs[2];
    sode_comm *comm;
    setup(cf, &v, fs);
    sode_exchange *x = sode_setup(cf, &v, fs, &comm);
    long filled = 0, cells = 0;
    for (int it = 1; it <= 3; it++) {
        /* The arrays sode exchanges this iteration: the program's, or set
         * it % 2 of those sode keeps. */
        void *data[2] = {fs[0].sode, fs[1].sode};
        if (shared) {
            for (int fi = 0; fi < 2; fi++) {
                CHECK_SODE(sode_exchange_shared_field(x, it % 2, fi, &data[fi]));
            }
        }
        for (int fi = 0; fi < 2; fi++) {
            fill(cf, &v, &fs[fi], it, data[fi]);
            fill(cf, &v, &fs[fi], it, fs[fi].mpi);
        }
        if (shared) {
            CHECK_SODE(sode_exchange_start_set(x, it % 2));
        } else {
            CHECK_SODE(sode_exchange_start(x));
        }
        CHECK_SODE(sode_exchange_wait(x, 60.0));
        if (use_mpi) {
            mpi_exchange(cf, &v, fs, 2);
        }
        for (int fi = 0; fi < 2; fi++) {
            struct field *f = &fs[fi];
            size_t bytes = (size_t)f->ext[0] * f->ext[1] * f->elem;
            if (use_mpi && memcmp(data[fi], f->mpi, bytes) != 0) {
                fprintf(stderr, "rank %d: sode and MPI differ in field %d\n", world_rank, fi);
                die(1);
            }
            filled += check_expected(cf, &v, f, it, data[fi], "sode");
            cells += f->ext[0] * f->ext[1];
        }
    }
    int subsets = !shared && subsets_run();
    if (subsets) {
        filled += run_subsets(cf, &v, fs, x);
    }
    if (!use_mpi) {
        int sends, recvs, links;
        count_in_place(x, &sends, &recvs, &links);
        printf("ok rank %d grid %dx%d periodic %d%d %s: %ld cells equal to the owners' values, bit "
               "for bit, %ld halo cells filled%s; in place: %d sends, %d receives; %d links\n",
               world_rank, cf->dims[0], cf->dims[1], cf->periods[0], cf->periods[1],
               cf->box ? "box" : "star", cells, filled,
               subsets ? ", starts on some fields checked" : "", sends, recvs, links);
        teardown(&v, fs, &x, &comm);
        return;
    }
    long total_filled = 0, total_cells = 0;
    MPI_Reduce(&filled, &total_filled, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&cells, &total_cells, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (world_rank == 0) {
        printf("ok grid %dx%d periodic %d%d %s%s: %ld cells equal to MPI's, bit for bit, %ld "
               "halo cells filled%s\n",
               cf->dims[0], cf->dims[1], cf->periods[0], cf->periods[1], cf->box ? "box" : "star",
               shared ? ", fields in sode's shared memory" : "", total_cells, total_filled,
               subsets ? "; starts on some fields checked" : "");
    }
    teardown(&v, fs, &x, &comm);
}

/* --env PX PY: sode alone, every periodicity and shape on one grid. */
static int env_main(int argc, char **argv) {
    use_mpi = 0;
    int px = argc > 3 ? atoi(argv[2]) : 0, py = argc > 3 ? atoi(argv[3]) : 0;
    int global[2] = {13, 10}, bad = px < 1 || py < 1;
    for (int a = 4; a < argc && !bad; a++) {
        if (strcmp(argv[a], "--rdma") == 0) {
            force_rdma = 1;
        } else if (strcmp(argv[a], "--subsets") == 0) {
            env_subsets = 1;
        } else if (strcmp(argv[a], "--global") == 0 && a + 2 < argc) {
            global[0] = atoi(argv[a + 1]);
            global[1] = atoi(argv[a + 2]);
            a += 2;
            bad = global[0] < 2 * px || global[1] < 2 * py;
        } else {
            bad = 1;
        }
    }
    if (bad) {
        fprintf(stderr, "usage: stencil2d --env PX PY [--rdma] [--subsets] [--global NX NY] (at least "
                        "2 cells per rank and axis)\n");
        return 2;
    }
    CHECK_SODE(sode_comm_create_env(60.0, &env_comm));
    CHECK_SODE(sode_comm_rank(env_comm, &world_rank));
    int periods[3][2] = {{0, 0}, {1, 1}, {1, 0}};
    for (int p = 0; p < 3; p++) {
        for (int box = 0; box <= 1; box++) {
            struct config cf = {{px, py}, {periods[p][0], periods[p][1]}, box, {global[0], global[1]}};
            run(&cf);
        }
    }
    CHECK_SODE(sode_comm_free(&env_comm));
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--env") == 0) {
        return env_main(argc, argv);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (sode_abi_version() != SODE_ABI_VERSION) {
        fprintf(stderr, "built against sode ABI %d, running with %d\n", SODE_ABI_VERSION,
                sode_abi_version());
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    int grids[3][2] = {{1, size}, {size, 1}, {2, 2}};
    int ngrids = size == 4 ? 3 : size == 1 ? 1 : 2;
    if (argc > 2 && strcmp(argv[1], "--grid") == 0) {
        if (sscanf(argv[2], "%dx%d", &grids[0][0], &grids[0][1]) != 2
            || grids[0][0] * grids[0][1] != size) {
            if (world_rank == 0) {
                fprintf(stderr, "stencil2d: --grid %s: give PXxPY with PX * PY = %d ranks\n", argv[2], size);
            }
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        ngrids = 1;
    }
    int periods[3][2] = {{0, 0}, {1, 1}, {1, 0}};
    for (shared = 0; shared <= 1; shared++) {
        for (int g = 0; g < ngrids; g++) {
            for (int p = 0; p < 3; p++) {
                for (int box = 0; box <= 1; box++) {
                    struct config cf = {{grids[g][0], grids[g][1]},
                                        {periods[p][0], periods[p][1]},
                                        box,
                                        {13, 10}};
                    run(&cf);
                }
            }
        }
    }
    MPI_Finalize();
    return 0;
}
