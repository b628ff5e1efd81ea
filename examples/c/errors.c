/* Bad input to sode's C ABI, each answered with a status and a message
 * naming what was wrong; and a rank that dies during an exchange.
 *
 *   mpirun -n 2 ./errors           every misuse, on both ranks, and a job
 *                                  suspended inside a commit
 *   mpirun -n 3 ./errors late      the last rank reaches a communicator's
 *                                  creation, then a commit, after the
 *                                  others gave it up; the step it completes
 *                                  then must write into no freed memory
 *   SODE_RANK=.. SODE_SIZE=2 SODE_ROOT=.. SODE_JOB_SECRET=.. ./errors kill
 *                                  rank 1 dies after start; rank 0's wait
 *                                  must fail within its timeout
 *   SODE_TRANSPORT=tcp SODE_RANK=.. SODE_SIZE=2 ... ./errors early
 *                                  rank 1 ends early; rank 0's next
 *                                  exchange must fail, not end the process
 *                                  with SIGPIPE
 *   SODE_RANK=.. SODE_SIZE=2 ... ./errors freed
 *                                  rank 1 frees its exchange and lives on
 *                                  for 3 s; rank 0's next exchange must
 *                                  fail at once, naming it
 *   SODE_WAIT_WARN=1 SODE_RANK=.. SODE_SIZE=2 ... ./errors slow
 *                                  rank 1 starts its sixth and seventh
 *                                  exchanges 2.5 s late; rank 0 waits for
 *                                  the sixth without deadline and polls
 *                                  the seventh with sode_exchange_test,
 *                                  warns that each goes on (on stderr,
 *                                  for the caller to check), and finishes
 *   SODE_WAIT_WARN=1 mpirun -n 3 ./errors latecommit [mpi]
 *                                  the last rank reaches a commit 2.5 s
 *                                  late, on a communicator without
 *                                  deadline: the others warn that they go
 *                                  on waiting (on stderr, for the caller
 *                                  to check), rank 0 naming it, and all
 *                                  finish
 *   SODE_WAIT_WARN=1 mpirun -n 3 ./errors latecommit env [SECONDS]
 *                                  the same on a communicator from the
 *                                  environment (met through mpirun's PMIx
 *                                  server, its steps over sode's links),
 *                                  within SECONDS if given (STOP_DIR: see
 *                                  latecommit_mode)
 *   mpirun -n 3 ./errors unfreed   every rank ends with its exchange and
 *                                  communicator alive, as many programs
 *                                  do; the caller checks that the job left
 *                                  nothing in SODE_SHM_DIR
 *   mpirun -n 3 ./errors ended     every rank exchanges until the caller
 *                                  ends the job with a signal (SIGTERM, as
 *                                  a batch system's time limit does), once
 *                                  rank 0 printed "exchanging"; the caller
 *                                  checks that it left nothing
 *   mpirun -n 2 ./errors beside    a program on MPI whose communicators
 *                                  come from the environment (as Rust's
 *                                  World::init), three in turn: under
 *                                  MPICH's mpirun or srun --mpi=pmi2 they
 *                                  meet through the PMI socket MPI's own
 *                                  client speaks on, which must serve
 *                                  each of them and MPI_Finalize after */
#include <mpi.h>
#include <sode_mpi.h>

#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int rank, failures;

/* `got` must be `want`, and the message must contain `needle`. */
static void expect(const char *what, int got, int want, const char *needle) {
    const char *msg = sode_last_error();
    if (got != want || strstr(msg, needle) == NULL) {
        fprintf(stderr, "rank %d: %s: status %d (want %d), message \"%s\" (want \"%s\" in it)\n",
                rank, what, got, want, msg, needle);
        failures++;
    } else if (rank == 0) {
        printf("ok %s: %s\n", what, msg);
    }
}

/* Seconds on a monotonic clock. */
static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static sode_exchange *cart(sode_comm *c, int size) {
    int dims[2] = {1, size}, coords[2] = {0, rank}, periodic[2] = {0, 1}, h[2] = {1, 1};
    sode_exchange *x = NULL;
    int rc = sode_exchange_create_cart(c, 2, dims, coords, periodic, h, h, SODE_BOX, &x);
    if (rc != SODE_OK) {
        fprintf(stderr, "rank %d: create_cart: %s\n", rank, sode_last_error());
        exit(2);
    }
    return x;
}

static double u[6 * 6];
static int32_t w[6 * 6];
static const int64_t EXT[2] = {6, 6}, LO[2] = {1, 1}, OWN[2] = {4, 4};

static int add_u(sode_exchange *x) {
    return sode_exchange_add_field(x, u, SODE_F64, 2, EXT, LO, OWN, NULL, NULL, SODE_ORDER_C);
}

/* A tiled exchange's refusals, each found on this rank before any commit. */
static void tiles_misuse(sode_comm *c, int size) {
    sode_exchange *x = NULL;
    int dims[2] = {2, 2}, periodic[2] = {0, 1}, h[2] = {1, 1};
    int owners[4] = {rank, rank, rank, rank}, mine[4] = {0, 0, 0, 1};
    int twice[4] = {0, 0, 0, 0}, outside[2] = {2, 0};
    expect("a tiled exchange without tiles",
           sode_exchange_create_tiles(c, 2, dims, periodic, owners, 0, mine, h, h, SODE_BOX, &x), SODE_ERR_ARG,
           "no tiles");
    expect("more tiles than domains",
           sode_exchange_create_tiles(c, 2, dims, periodic, owners, 5, mine, h, h, SODE_BOX, &x), SODE_ERR_ARG,
           "ntiles is 5, but the grid has 4 domains");
    expect("a tile outside the grid",
           sode_exchange_create_tiles(c, 2, dims, periodic, owners, 1, outside, h, h, SODE_BOX, &x), SODE_ERR_ARG,
           "lies outside the grid");
    expect("a tile given twice",
           sode_exchange_create_tiles(c, 2, dims, periodic, owners, 2, twice, h, h, SODE_BOX, &x), SODE_ERR_ARG,
           "the tile at [0, 0] is given twice");
    int strange[4] = {(rank + 1) % size, rank, rank, rank};
    if (size > 1) {
        expect("a tile of another rank",
               sode_exchange_create_tiles(c, 2, dims, periodic, strange, 2, mine, h, h, SODE_BOX, &x), SODE_ERR_ARG,
               "not this rank's");
    }
    int beyond[4] = {1 << 20, rank, rank, rank};
    expect("a domain of a rank outside the job",
           sode_exchange_create_tiles(c, 2, dims, periodic, beyond, 1, mine + 2, h, h, SODE_BOX, &x), SODE_ERR_ARG,
           "place 0 of the grid belongs to rank 1048576");
    int huge[2] = {1 << 13, 1 << 12};
    expect("more than 2^24 domains",
           sode_exchange_create_tiles(c, 2, huge, periodic, owners, 1, mine, h, h, SODE_BOX, &x), SODE_ERR_ARG,
           "more than 2^24 domains");
    expect("a tiled exchange", sode_exchange_create_tiles(c, 2, dims, periodic, owners, 2, mine, h, h, SODE_BOX, &x),
           SODE_OK, "");
    expect("a field without a tile axis", add_u(x), SODE_ERR_ARG, "one for the tiles");
    static double t[6 * 6 * 1];
    const int64_t ext[3] = {6, 6, 1}, lo[3] = {1, 1, 0}, own[3] = {4, 4, 1};
    expect("a tile axis too short for two tiles",
           sode_exchange_add_field(x, t, SODE_F64, 3, ext, lo, own, NULL, NULL, SODE_ORDER_FORTRAN), SODE_ERR_ARG,
           "give the field room for every tile");
    expect("free it", sode_exchange_free(&x), SODE_OK, "");
}

static void misuse(sode_comm *c, int size) {
    sode_exchange *x = NULL;
    int dims[2] = {1, size}, coords[2] = {0, rank}, periodic[2] = {0, 1}, h[2] = {1, 1}, wide[2] = {2, 1};
    expect("a null communicator", sode_exchange_create_cart(NULL, 2, dims, coords, periodic, h, h, SODE_BOX, &x),
           SODE_ERR_NULL, "`comm` is a null pointer");
    expect("a null array", sode_exchange_create_cart(c, 2, NULL, coords, periodic, h, h, SODE_BOX, &x),
           SODE_ERR_NULL, "`dims`");
    int d4[4] = {1, size, 1, 1}, c4[4] = {0, rank, 0, 0}, p4[4] = {0}, h4[4] = {1, 1, 1, 1};
    expect("4-D", sode_exchange_create_cart(c, 4, d4, c4, p4, h4, h4, SODE_BOX, &x), SODE_ERR_ARG,
           "ndims is 4");
    expect("an unknown shape", sode_exchange_create_cart(c, 2, dims, coords, periodic, h, h, 7, &x),
           SODE_ERR_ARG, "shape 7");
    setenv("SODE_TRANSPORT", "carrier-pigeon", 1);
    expect("an unknown SODE_TRANSPORT", sode_exchange_create_cart(c, 2, dims, coords, periodic, h, h, SODE_BOX, &x),
           SODE_ERR_ARG, "SODE_TRANSPORT: unknown transport \"carrier-pigeon\" (auto, shm, rdma, tcp)");
    unsetenv("SODE_TRANSPORT");
    x = cart(c, size);
    expect("a null field", sode_exchange_add_field(x, NULL, SODE_F64, 2, EXT, LO, OWN, NULL, NULL, SODE_ORDER_C),
           SODE_ERR_NULL, "`base`");
    expect("an unknown element type", sode_exchange_add_field(x, u, 9, 2, EXT, LO, OWN, NULL, NULL, SODE_ORDER_C),
           SODE_ERR_ARG, "element type 9");
    expect("a halo wider than the exchange's",
           sode_exchange_add_field(x, u, SODE_F64, 2, EXT, LO, OWN, wide, NULL, SODE_ORDER_C), SODE_ERR_ARG,
           "wider than the exchange's");
    int64_t big[2] = {4, 6};
    expect("an owned box outside the array",
           sode_exchange_add_field(x, u, SODE_F64, 2, big, LO, OWN, NULL, NULL, SODE_ORDER_C), SODE_ERR_ARG,
           "run past its 4 cells");
    expect("start before commit", sode_exchange_start(x), SODE_ERR_STATE, "not committed");
    expect("an unknown transport", sode_exchange_set_transport(x, 9), SODE_ERR_ARG, "transport 9");
    expect("shared memory only", sode_exchange_set_transport(x, SODE_TRANSPORT_SHM), SODE_OK, "");
    expect("an unknown zero-copy mode", sode_exchange_set_zero_copy(x, 5), SODE_ERR_ARG, "mode 5");
    expect("an overlap for no field", sode_exchange_set_overlap(x, 0, NULL, NULL), SODE_ERR_ARG,
           "the exchange has 0 fields");
    expect("a memory kind for no field", sode_exchange_set_memory_kind(x, 0, SODE_MEMORY_HOST), SODE_ERR_ARG,
           "the exchange has 0 fields");
    expect("describe before commit", sode_exchange_describe(x, NULL, 0, NULL), SODE_ERR_STATE,
           "not committed");
    sode_exchange *empty = cart(c, size);
    expect("commit without fields", sode_exchange_commit(empty), SODE_ERR_ARG, "no field was added");
    expect("free it", sode_exchange_free(&empty), SODE_OK, "");
    expect("add a field", add_u(x), SODE_OK, "");
    int minus[2] = {-1, 0};
    expect("a negative overlap", sode_exchange_set_overlap(x, 0, minus, NULL), SODE_ERR_ARG,
           "overlap_lo[0] is -1");
    expect("host memory", sode_exchange_set_memory_kind(x, 0, SODE_MEMORY_HOST), SODE_OK, "");
    expect("an unknown memory kind", sode_exchange_set_memory_kind(x, 0, 3), SODE_ERR_ARG,
           "memory kind 3: SODE_MEMORY_HOST (0) is the one kind");
    expect("a negative field", sode_exchange_set_memory_kind(x, -1, SODE_MEMORY_HOST), SODE_ERR_ARG,
           "field -1");
    static double u_stage[6 * 6];
    void *stage[1] = {u_stage}, *own_array[1] = {u}, *no_array[1] = {NULL};
    expect("lend arrays for another field count", sode_exchange_lend_arrays(x, 2, stage), SODE_ERR_ARG,
           "nfields is 2, but 1 fields were added");
    expect("lend no array list", sode_exchange_lend_arrays(x, 1, NULL), SODE_ERR_NULL, "`arrays`");
    expect("lend a NULL array", sode_exchange_lend_arrays(x, 1, no_array), SODE_ERR_NULL, "`arrays`");
    expect("lend the field's own array", sode_exchange_lend_arrays(x, 1, own_array), SODE_ERR_ARG,
           "added or lent already");
    expect("lend a stage's array", sode_exchange_lend_arrays(x, 1, stage), SODE_OK, "");
    expect("lend it twice", sode_exchange_lend_arrays(x, 1, stage), SODE_ERR_ARG, "added or lent already");
    expect("commit", sode_exchange_commit(x), SODE_OK, "");
    expect("commit twice", sode_exchange_commit(x), SODE_ERR_STATE, "already committed");
    expect("lend after commit", sode_exchange_lend_arrays(x, 1, stage), SODE_ERR_STATE,
           "before sode_exchange_commit");
    expect("a field after commit", add_u(x), SODE_ERR_STATE, "before sode_exchange_commit");
    expect("a transport after commit", sode_exchange_set_transport(x, SODE_TRANSPORT_AUTO), SODE_ERR_STATE,
           "before sode_exchange_commit");
    expect("a zero-copy mode after commit", sode_exchange_set_zero_copy(x, SODE_ZERO_COPY_NEVER),
           SODE_ERR_STATE, "before sode_exchange_commit");
    int one[2] = {1, 1}, count = 0;
    expect("an overlap after commit", sode_exchange_set_overlap(x, 0, one, one), SODE_ERR_STATE,
           "before sode_exchange_commit");
    expect("a memory kind after commit", sode_exchange_set_memory_kind(x, 0, SODE_MEMORY_HOST), SODE_ERR_STATE,
           "before sode_exchange_commit");
    expect("count the fields", sode_exchange_field_count(x, &count), SODE_OK, "");
    expect("count into nothing", sode_exchange_field_count(x, NULL), SODE_ERR_NULL, "`count`");
    if (count != 1) {
        fprintf(stderr, "rank %d: sode_exchange_field_count gave %d, not 1\n", rank, count);
        failures++;
    }
    size_t needed = 0;
    expect("describe into no buffer", sode_exchange_describe(x, NULL, 64, &needed), SODE_ERR_NULL,
           "`buf`");
    char text[16];
    expect("describe into a short buffer", sode_exchange_describe(x, text, sizeof text, &needed),
           SODE_OK, "");
    if (strlen(text) != sizeof text - 1 || needed <= sizeof text || strstr(text, "rank") != text) {
        fprintf(stderr, "rank %d: a short description is cut at %zu bytes of %zu: '%s'\n", rank,
                strlen(text), needed, text);
        failures++;
    }
    expect("wait without start", sode_exchange_wait(x, 5.0), SODE_ERR_STATE, "start");
    static double u2[6 * 6];
    void *arrays[2] = {u2, NULL};
    expect("arrays for another field count", sode_exchange_start_arrays(x, 2, arrays), SODE_ERR_ARG,
           "2 arrays given for an exchange of 1 fields");
    expect("a negative field count", sode_exchange_start_arrays(x, -1, arrays), SODE_ERR_ARG, "nfields is -1");
    expect("no array list", sode_exchange_start_arrays(x, 1, NULL), SODE_ERR_NULL, "`arrays`");
    expect("start on another array", sode_exchange_start_arrays(x, 1, arrays), SODE_OK, "");
    expect("start twice", sode_exchange_start_arrays(x, 1, arrays), SODE_ERR_STATE, "in flight");
    expect("wait for it", sode_exchange_wait(x, 10.0), SODE_OK, "");
    expect("start", sode_exchange_start(x), SODE_OK, "");
    expect("start twice", sode_exchange_start(x), SODE_ERR_STATE, "in flight");
    expect("free while in flight", sode_exchange_free(&x), SODE_ERR_STATE, "in flight");
    expect("a negative timeout", sode_exchange_wait(x, -2.0), SODE_ERR_ARG, "timeout of -2");
    expect("a NaN timeout", sode_exchange_wait(x, NAN), SODE_ERR_ARG, "timeout of NaN");
    expect("a zero timeout", sode_exchange_wait(x, 0.0), SODE_ERR_ARG, "INFINITY for no deadline");
    expect("wait without deadline", sode_exchange_wait(x, INFINITY), SODE_OK, "");
    expect("start again", sode_exchange_start(x), SODE_OK, "");
    expect("wait as long as the job's default", sode_exchange_wait(x, SODE_TIMEOUT_DEFAULT), SODE_OK, "");
    int done = 7;
    expect("test without start", sode_exchange_test(x, &done), SODE_ERR_STATE, "start");
    expect("free", sode_exchange_free(&x), SODE_OK, "");
    if (x != NULL) {
        fprintf(stderr, "rank %d: free left the handle set\n", rank);
        failures++;
    }
    expect("free NULL", sode_exchange_free(&x), SODE_OK, "");
}

/* The fields sode keeps: each call in its place, and every misuse named. */
static void shared_fields(sode_comm *c, int size) {
    sode_exchange *x = cart(c, size);
    expect("a field on the program's array", add_u(x), SODE_OK, "");
    expect("shared fields after a field", sode_exchange_set_shared_fields(x, 2), SODE_ERR_STATE,
           "before adding any");
    expect("commit", sode_exchange_commit(x), SODE_OK, "");
    void *p = NULL;
    expect("a shared field of an exchange that keeps none", sode_exchange_shared_field(x, 0, 0, &p),
           SODE_ERR_STATE, "keeps no fields");
    expect("start_set on an exchange that keeps none", sode_exchange_start_set(x, 0), SODE_ERR_STATE,
           "keeps no fields");
    sode_exchange_free(&x);
    x = cart(c, size);
    expect("no sets", sode_exchange_set_shared_fields(x, 0), SODE_ERR_ARG, "0 sets");
    expect("two sets", sode_exchange_set_shared_fields(x, 2), SODE_OK, "");
    expect("a field with a base when sode keeps them", add_u(x), SODE_ERR_ARG, "pass NULL as base");
    expect("a field sode keeps",
           sode_exchange_add_field(x, NULL, SODE_F64, 2, EXT, LO, OWN, NULL, NULL, SODE_ORDER_C), SODE_OK,
           "");
    expect("a shared field before commit", sode_exchange_shared_field(x, 0, 0, &p), SODE_ERR_STATE,
           "not committed");
    expect("commit", sode_exchange_commit(x), SODE_OK, "");
    expect("set 2 of 2", sode_exchange_shared_field(x, 2, 0, &p), SODE_ERR_ARG, "keeps 2 sets of 1 fields");
    expect("field 1 of 1", sode_exchange_shared_field(x, 0, 1, &p), SODE_ERR_ARG, "keeps 2 sets of 1 fields");
    expect("into no pointer", sode_exchange_shared_field(x, 0, 0, NULL), SODE_ERR_NULL, "`array`");
    expect("set 1, field 0", sode_exchange_shared_field(x, 1, 0, &p), SODE_OK, "");
    if (p == NULL) {
        fprintf(stderr, "rank %d: no address for a shared field\n", rank);
        failures++;
    }
    expect("start instead of start_set", sode_exchange_start(x), SODE_ERR_STATE, "sode_exchange_start_set");
    expect("a negative set", sode_exchange_start_set(x, -1), SODE_ERR_ARG, "set -1");
    expect("set 5 of 2", sode_exchange_start_set(x, 5), SODE_ERR_ARG, "set 5: the exchange keeps 2 sets");
    expect("start set 1", sode_exchange_start_set(x, 1), SODE_OK, "");
    expect("start set 0 while in flight", sode_exchange_start_set(x, 0), SODE_ERR_STATE, "in flight");
    expect("wait", sode_exchange_wait(x, 10.0), SODE_OK, "");
    expect("free", sode_exchange_free(&x), SODE_OK, "");
}

static void reorder(sode_comm *c, int size) {
    int dims[2] = {size, 1}, periodic[2] = {0, 0}, block[2] = {8, 8}, coords[2] = {-1, -1};
    sode_comm *r = NULL;
    expect("a reordered communicator",
           sode_comm_reorder_cart(c, 2, dims, periodic, block, 1, SODE_STAR, 8, coords, &r), SODE_OK, "");
    int rr = -1;
    sode_comm_rank(r, &rr);
    /* One node: launch order is kept, and the coordinates are the rank's. */
    if (rr != rank || coords[0] != rank || coords[1] != 0) {
        fprintf(stderr, "rank %d: reordered to rank %d at (%d, %d) on one node\n", rank, rr, coords[0], coords[1]);
        failures++;
    }
    sode_exchange *x = cart(r, size);
    expect("an exchange on the reordered communicator", add_u(x) || sode_exchange_commit(x) ||
           sode_exchange_start(x) || sode_exchange_wait(x, 10.0), SODE_OK, "");
    sode_exchange_free(&x);
    expect("free the reordered communicator", sode_comm_free(&r), SODE_OK, "");
    int wrong[2] = {size + 1, 1};
    expect("a grid of the wrong size",
           sode_comm_reorder_cart(c, 2, wrong, periodic, block, 1, SODE_STAR, 8, coords, &r), SODE_ERR_ARG,
           "gave no decomposition of this job's");
    int other[2] = {8, rank == 0 ? 8 : 16};
    expect("different grids on different ranks",
           sode_comm_reorder_cart(c, 2, dims, periodic, other, 1, SODE_STAR, 8, coords, &r), SODE_ERR_ARG,
           "another decomposition");
    expect("a null coords on one rank fails every rank",
           sode_comm_reorder_cart(c, 2, dims, periodic, block, 1, SODE_STAR, 8, rank == 1 ? NULL : coords, &r),
           rank == 1 ? SODE_ERR_NULL : SODE_ERR_ARG, rank == 1 ? "`coords`" : "ranks [1] gave no decomposition");
    expect("one rank's bad argument fails every rank",
           sode_comm_reorder_cart(c, rank == 1 ? 4 : 2, dims, periodic, block, 1, SODE_STAR, 8, coords, &r),
           SODE_ERR_ARG, rank == 1 ? "ndims is 4" : "ranks [1] gave no decomposition");
}

/* Rank 1 cannot make its shared memory (SODE_SHM_DIR names no directory).
 * It fails at once and tells the job, so its neighbours stop waiting for
 * its segment: every rank's commit fails within seconds, not at the
 * communicator's timeout (30 s), naming rank 1 and its reason; and the
 * ranks stay in step, so the communicator's next exchange commits and
 * brings each halo its neighbour's cells. */
static void setup_fails_on_one(sode_comm *c, int size) {
    const char *dir = "/nonexistent/sode-errors";
    if (rank == 1) {
        setenv("SODE_SHM_DIR", dir, 1);
    }
    sode_exchange *x = cart(c, size);
    expect("add a field", add_u(x), SODE_OK, "");
    double t0 = seconds_now();
    int rc = sode_exchange_commit(x);
    double took = seconds_now() - t0;
    expect("a rank that cannot make its shared memory fails every rank's commit", rc, SODE_ERR_CHANNEL,
           "/nonexistent/sode-errors does not exist");
    if (rank != 1) {
        expect("... naming that rank", rc, SODE_ERR_CHANNEL, "sode_exchange_commit failed on rank 1: ");
    }
    if (took > 5.0) {
        fprintf(stderr, "rank %d: the commit failed after %.1f s, its neighbour's failure known at once\n", rank, took);
        failures++;
    }
    expect("free", sode_exchange_free(&x), SODE_OK, "");
    if (rank == 1) {
        unsetenv("SODE_SHM_DIR");
    }
    for (int i = 0; i < 36; i++) {
        u[i] = rank + 1;
    }
    x = cart(c, size);
    expect("the next exchange commits and runs",
           add_u(x) || sode_exchange_commit(x) || sode_exchange_start(x) || sode_exchange_wait(x, 10.0), SODE_OK,
           "");
    double below = (double)((rank + size - 1) % size + 1), above = (double)((rank + 1) % size + 1);
    if (u[1 * 6 + 0] != below || u[1 * 6 + 5] != above) {
        fprintf(stderr, "rank %d: halo cells %g and %g, want %g and %g\n", rank, u[6], u[11], below, above);
        failures++;
    }
    expect("free", sode_exchange_free(&x), SODE_OK, "");
}

static void mismatch(sode_comm *c, int size) {
    /* Rank 0 adds a double field, the others an int32 one. */
    sode_exchange *x = cart(c, size);
    int rc = rank == 0 ? add_u(x)
                       : sode_exchange_add_field(x, w, SODE_I32, 2, EXT, LO, OWN, NULL, NULL, SODE_ORDER_C);
    expect("add a field", rc, SODE_OK, "");
    expect("different fields on different ranks", sode_exchange_commit(x), SODE_ERR_MISMATCH,
           "different fields");
    expect("start after a failed commit", sode_exchange_start(x), SODE_ERR_STATE, "commit failed");
    expect("free after a failed commit", sode_exchange_free(&x), SODE_OK, "");
    /* Rank 0 asks for shared memory only, the others for the default. */
    x = cart(c, size);
    expect("add a field", add_u(x), SODE_OK, "");
    if (rank == 0) {
        expect("shared memory only", sode_exchange_set_transport(x, SODE_TRANSPORT_SHM), SODE_OK, "");
    }
    expect("different transports on different ranks", sode_exchange_commit(x), SODE_ERR_MISMATCH,
           "different transports");
    expect("free", sode_exchange_free(&x), SODE_OK, "");
    /* Rank 1 adds no field: its commit fails there alone, every rank's
     * fails naming it, and the ranks stay in step for the next one. */
    x = cart(c, size);
    if (rank != 1) {
        expect("add a field", add_u(x), SODE_OK, "");
    }
    expect("a rank that added no field fails every rank's commit", sode_exchange_commit(x), SODE_ERR_ARG,
           rank == 1 ? "sode_exchange_commit: no field was added"
                     : "sode_exchange_commit failed on rank 1: sode_exchange_commit: no field was added");
    expect("free", sode_exchange_free(&x), SODE_OK, "");
    /* Rank 0 commits a Cartesian exchange where the others commit one of
     * boxes (as a code that makes an exchange on some ranks only): each
     * names the other kind, and the ranks stay in step. */
    if (rank == 0) {
        x = cart(c, size);
    } else {
        const int64_t from[2] = {1, 1}, into[2] = {0, 1}, one[2] = {1, 1};
        expect("an exchange of boxes", sode_exchange_create(c, 2, &x), SODE_OK, "");
        expect("a box", sode_exchange_add_send(x, (rank + 1) % size, 1, from, one), SODE_OK, "");
        expect("a box", sode_exchange_add_recv(x, (rank + size - 1) % size, 1, into, one), SODE_OK, "");
    }
    expect("add a field", add_u(x), SODE_OK, "");
    expect("another kind of exchange on rank 0", sode_exchange_commit(x), SODE_ERR_MISMATCH,
           rank == 0 ? "rank 1 commits an exchange of boxes (sode_exchange_create) where this rank commits a "
                       "Cartesian exchange"
                     : "rank 0 commits a Cartesian exchange (sode_exchange_create_cart) where this rank commits "
                       "an exchange of boxes");
    expect("free", sode_exchange_free(&x), SODE_OK, "");
    x = cart(c, size);
    expect("the exchange after it commits and runs",
           add_u(x) || sode_exchange_commit(x) || sode_exchange_start(x) || sode_exchange_wait(x, 10.0), SODE_OK,
           "");
    expect("free", sode_exchange_free(&x), SODE_OK, "");
}

/* The last rank never commits (it frees its communicator): the others'
 * commit fails within the communicator's timeout, each message naming it
 * (rank 0's: its link to it closed; the others': it did not take the
 * step), and nothing hangs. */
static void absent(int size) {
    sode_comm *c = NULL;
    expect("a communicator with a 2 s timeout", sode_comm_create_mpi(MPI_COMM_WORLD, 2.0, &c), SODE_OK, "");
    sode_exchange *x = cart(c, size);
    expect("a field", add_u(x), SODE_OK, "");
    if (rank != size - 1) {
        char who[64];
        snprintf(who, sizeof who, "rank %d", size - 1);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int rc = sode_exchange_commit(x);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double waited = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        expect("a commit a rank never makes", rc, SODE_ERR_BOOTSTRAP, who);
        if (waited > 10.0) {
            fprintf(stderr, "rank %d: the commit took %.1f s with a 2 s timeout\n", rank, waited);
            failures++;
        }
    }
    expect("free the exchange", sode_exchange_free(&x), SODE_OK, "");
    expect("free the communicator", sode_comm_free(&c), SODE_OK, "");
    /* The last rank would reach the next communicator's creation a timeout
     * before the others, and that creation is bounded by it too. */
    MPI_Barrier(MPI_COMM_WORLD);
}

/* The whole job stopped (SIGSTOP, as `scontrol suspend` does) for 4 s
 * inside a commit, on a communicator whose timeout is 2 s: the commit
 * completes, since time in which the ranks did not run does not count
 * against it. The last rank stops the others once they wait for it in the
 * commit, then itself; a child it forked continues them all. */
static void suspended(int size) {
    sode_comm *c = NULL;
    expect("a communicator with a 2 s timeout, to be suspended", sode_comm_create_mpi(MPI_COMM_WORLD, 2.0, &c),
           SODE_OK, "");
    int pid = (int)getpid();
    int *pids = calloc((size_t)size, sizeof *pids);
    if (pids == NULL) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        exit(2);
    }
    MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
    sode_exchange *x = cart(c, size);
    expect("a field", add_u(x), SODE_OK, "");
    if (rank == size - 1) {
        struct timespec settle = {0, 500000000};
        nanosleep(&settle, NULL);
        pid_t helper = fork();
        if (helper == 0) {
            struct timespec pause = {4, 0};
            nanosleep(&pause, NULL);
            for (int r = 0; r < size; r++) {
                kill(pids[r], SIGCONT);
            }
            _exit(0);
        }
        if (helper < 0) {
            fprintf(stderr, "rank %d: fork failed: the job is not suspended\n", rank);
            failures++;
        } else {
            for (int r = 0; r < size - 1; r++) {
                kill(pids[r], SIGSTOP);
            }
            raise(SIGSTOP);
            waitpid(helper, NULL, 0);
        }
    }
    expect("a commit suspended for 4 s, its communicator's timeout 2 s", sode_exchange_commit(x), SODE_OK, "");
    expect("free the exchange", sode_exchange_free(&x), SODE_OK, "");
    expect("free the communicator", sode_comm_free(&c), SODE_OK, "");
    free(pids);
}

/* The last rank creates its communicator 3 s after the others, whose
 * timeout is 1 s: the creation's first collective step (duplicating the
 * MPI communicator) must give up at the deadline on every rank rather than
 * wait for it, and the late rank's then finds no one in the next step. */
static void late_creation(int size) {
    if (rank == size - 1) {
        struct timespec late = {3, 0};
        nanosleep(&late, NULL);
    }
    sode_comm *c = NULL;
    double t0 = seconds_now();
    expect("a communicator the last rank creates 3 s late, with a 1 s timeout",
           sode_comm_create_mpi(MPI_COMM_WORLD, 1.0, &c), SODE_ERR_BOOTSTRAP,
           rank == size - 1 ? "within the communicator's timeout" : "(MPI_Comm_idup) did not complete within the timeout (1 s)");
    double took = seconds_now() - t0;
    if (took > 2.5) {
        fprintf(stderr, "rank %d: a creation with a 1 s timeout took %.1f s\n", rank, took);
        failures++;
    }
    if (c != NULL) {
        sode_comm_free(&c);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* `late` mode: after a creation the last rank reaches late (its MPI step
 * left in flight, `late_creation`), the last rank reaches a commit 3 s
 * after the others, whose communicator's timeout is 1 s. The commit's
 * steps travel sode's own links: the others give the step up at their
 * deadline, and every rank, the late one too when it comes, is told that
 * the last rank did not take it; the program goes on with MPI. Run under
 * AddressSanitizer (ci/capi.sh preloads it): a write into freed memory
 * (the creation's step completing late) ends the job. */
static int late_mode(int size) {
    late_creation(size);
    sode_comm *c = NULL;
    expect("a communicator with a 1 s timeout", sode_comm_create_mpi(MPI_COMM_WORLD, 1.0, &c), SODE_OK, "");
    sode_exchange *x = cart(c, size);
    expect("a field", add_u(x), SODE_OK, "");
    if (rank == size - 1) {
        struct timespec late = {3, 0};
        nanosleep(&late, NULL);
    }
    char missed[96];
    snprintf(missed, sizeof missed, "rank %d did not take a collective step within 1.0 s", size - 1);
    expect("a commit the last rank reaches late", sode_exchange_commit(x), SODE_ERR_BOOTSTRAP, missed);
    expect("free the exchange", sode_exchange_free(&x), SODE_OK, "");
    expect("free the communicator", sode_comm_free(&c), SODE_OK, "");
    /* The program goes on, allocating as programs do: MPI progresses the
     * step left in flight while the freed memory is handed out again. */
    for (int k = 0; k < 100; k++) {
        void *blocks[32];
        for (int i = 0; i < 32; i++) {
            size_t n = 8 + 8 * (size_t)i;
            blocks[i] = malloc(n);
            if (blocks[i] != NULL) {
                memset(blocks[i], k, n);
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < 32; i++) {
            free(blocks[i]);
        }
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0) {
        printf(all ? "FAILED: %d steps not answered as expected\n"
                   : "ok a rank 3 s late: every commit gave up at 1 s, and the step it completed later "
                     "wrote only into buffers left to it\n",
               all);
    }
    return all != 0;
}

/* Two ranks started by hand: a communicator from the environment and a
 * committed exchange over it; the process ends with status 2 if either
 * fails. */
static sode_exchange *env_exchange(sode_comm **c) {
    if (sode_comm_create_env(30.0, c) != SODE_OK) {
        fprintf(stderr, "create_env: %s\n", sode_last_error());
        exit(2);
    }
    sode_comm_rank(*c, &rank);
    sode_exchange *x = cart(*c, 2);
    if (add_u(x) != SODE_OK || sode_exchange_commit(x) != SODE_OK) {
        fprintf(stderr, "rank %d: setup: %s\n", rank, sode_last_error());
        exit(2);
    }
    return x;
}

static int kill_mode(void) {
    sode_comm *c;
    sode_exchange *x = env_exchange(&c);
    for (int it = 0; it < 5; it++) {
        sode_exchange_start(x);
        sode_exchange_wait(x, 10.0);
    }
    if (rank == 1) {
        raise(SIGKILL);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sode_exchange_start(x);
    int rc = SODE_OK;
    for (int it = 0; it < 1000 && rc == SODE_OK; it++) {
        rc = sode_exchange_wait(x, 8.0);
        if (rc == SODE_OK) {
            rc = sode_exchange_start(x);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (rc == SODE_OK || waited > 9.0) {
        fprintf(stderr, "rank 0: the dead peer was not reported within 8 s (status %d after %.1f s)\n", rc, waited);
        return 1;
    }
    printf("ok a killed peer: status %d after %.2f s: %s\n", rc, waited, sode_last_error());
    sode_exchange_free(&x);
    sode_comm_free(&c);
    return 0;
}

/* Rank 1 ends after 20 exchanges (returns from main, as a rank whose loop
 * has a bug may: it has finished, not died); rank 0 starts one more. Over
 * TCP, faces of half a MiB need more than one send after rank 1's end
 * reset the connection: a C program keeps SIGPIPE's default action, so the
 * call must fail with a status and a message rather than end the
 * process. */
static int early_mode(void) {
    enum { N = 1024, H = 64 };
    sode_comm *c;
    if (sode_comm_create_env(30.0, &c) != SODE_OK) {
        fprintf(stderr, "create_env: %s\n", sode_last_error());
        return 2;
    }
    sode_comm_rank(c, &rank);
    int dims[2] = {1, 2}, coords[2] = {0, rank}, periodic[2] = {1, 1}, h[2] = {H, H};
    const int64_t ext[2] = {N + 2 * H, N + 2 * H}, lo[2] = {H, H}, own[2] = {N, N};
    double *big = calloc((size_t)ext[0] * (size_t)ext[1], sizeof *big);
    sode_exchange *x = NULL;
    if (!big || sode_exchange_create_cart(c, 2, dims, coords, periodic, h, h, SODE_BOX, &x) != SODE_OK ||
        sode_exchange_add_field(x, big, SODE_F64, 2, ext, lo, own, NULL, NULL, SODE_ORDER_C) != SODE_OK ||
        sode_exchange_commit(x) != SODE_OK) {
        fprintf(stderr, "rank %d: setup: %s\n", rank, sode_last_error());
        return 2;
    }
    for (int it = 0; it < 20; it++) {
        if (sode_exchange_start(x) != SODE_OK || sode_exchange_wait(x, 10.0) != SODE_OK) {
            fprintf(stderr, "rank %d: exchange %d: %s\n", rank, it, sode_last_error());
            return 2;
        }
    }
    if (rank == 1) {
        return 0;
    }
    struct timespec settle = {0, 100 * 1000 * 1000}; /* rank 1's end reaches this rank first */
    nanosleep(&settle, NULL);
    int rc = sode_exchange_start(x);
    if (rc == SODE_OK) {
        rc = sode_exchange_wait(x, 10.0);
    }
    if (rc == SODE_OK) {
        fprintf(stderr, "rank 0: an exchange with a rank that had ended succeeded\n");
        return 1;
    }
    printf("ok a neighbour that ended: status %d: %s\n", rc, sode_last_error());
    sode_exchange_free(&x);
    sode_comm_free(&c);
    free(big);
    return 0;
}

/* Rank 1 frees its exchange after 5 exchanges (a control-flow bug, or
 * a rank regridding alone) and lives on for 3 s; rank 0 starts a sixth and
 * waits without deadline: it must be told at once that rank 1 freed its
 * side, on every channel, not wait for rank 1's process to end. */
/* `errors refused`, two ranks started by hand (SODE_ROOT): rank 1 passes
 * a null out pointer to sode_comm_create_env; both must fail at once with
 * SODE_ERR_NULL, rank 0 naming rank 1. */
static int refused_mode(void) {
    sode_comm *c = NULL;
    const char *r = getenv("SODE_RANK");
    rank = r ? atoi(r) : 0;
    double t0 = seconds_now();
    int rc = sode_comm_create_env(30.0, rank == 1 ? NULL : &c);
    expect("a null out pointer on rank 1 alone", rc, SODE_ERR_NULL,
           rank == 1 ? "sode_comm_create_env: `comm` is a null pointer"
                     : "sode_comm_create_env failed on rank 1: sode_comm_create_env: `comm` is a null "
                       "pointer");
    double took = seconds_now() - t0;
    if (took > 10.0 || c != NULL) {
        fprintf(stderr, "rank %d: the creation refused on rank 1 took %.1f s, communicator %p\n", rank, took,
                (void *)c);
        failures++;
    }
    printf("rank %d: %s\n", rank, failures ? "FAILED" : "ok");
    return failures != 0;
}

/* `mpirun -n 1 errors settings : -n 1 env SODE_WAIT=bogus errors settings`:
 * a setting wrong on rank 1 alone fails the creation on both ranks at once
 * (rank 0 naming rank 1 and the setting), not on rank 1 alone while rank 0
 * waits for it in a later step. */
static int settings_mode(void) {
    sode_comm *c = NULL;
    double t0 = seconds_now();
    int rc = sode_comm_create_mpi(MPI_COMM_WORLD, 30.0, &c);
    expect("a setting wrong on rank 1 alone", rc, SODE_ERR_BOOTSTRAP,
           rank == 1 ? "invalid setting SODE_" : "failed on rank 1: invalid setting SODE_");
    double took = seconds_now() - t0;
    if (took > 10.0 || c != NULL) {
        fprintf(stderr, "rank %d: the creation took %.1f s, communicator %p\n", rank, took, (void *)c);
        failures++;
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return all != 0;
}

static int freed_mode(void) {
    sode_comm *c;
    sode_exchange *x = env_exchange(&c);
    for (int it = 0; it < 5; it++) {
        if (sode_exchange_start(x) != SODE_OK || sode_exchange_wait(x, 10.0) != SODE_OK) {
            fprintf(stderr, "rank %d: exchange %d: %s\n", rank, it, sode_last_error());
            return 2;
        }
    }
    if (rank == 1) {
        sode_exchange_free(&x);
        struct timespec live_on = {3, 0};
        nanosleep(&live_on, NULL);
        sode_comm_free(&c);
        return 0;
    }
    double t0 = seconds_now();
    int rc = sode_exchange_start(x);
    if (rc == SODE_OK) {
        rc = sode_exchange_wait(x, INFINITY);
    }
    double took = seconds_now() - t0;
    if (rc != SODE_ERR_CHANNEL || took > 1.5) {
        fprintf(stderr, "rank 0: status %d after %.2f s (want %d within 1.5 s): %s\n", rc, took,
                SODE_ERR_CHANNEL, sode_last_error());
        return 1;
    }
    printf("ok a neighbour that freed its exchange, told in %.3f s: %s\n", took, sode_last_error());
    sode_exchange_free(&x);
    sode_comm_free(&c);
    return 0;
}

/* Rank 0 completes an exchange by polling sode_exchange_test between
 * 10 ms of its own work, as a code that overlaps its interior does. */
static int poll_until_done(sode_exchange *x) {
    int done = 0, rc = SODE_OK;
    struct timespec work = {0, 10 * 1000 * 1000};
    while (rc == SODE_OK && !done) {
        rc = sode_exchange_test(x, &done);
        if (rc == SODE_OK && !done) nanosleep(&work, NULL);
    }
    return rc;
}

/* Rank 1 starts its sixth and seventh exchanges 2.5 s late; rank 0 waits
 * for the sixth without deadline and polls the seventh with
 * sode_exchange_test, and must finish once they come (the warnings that
 * it goes on waiting, with SODE_WAIT_WARN=1, are for the caller to read). */
static int slow_mode(void) {
    sode_comm *c;
    sode_exchange *x = env_exchange(&c);
    for (int it = 0; it < 7; it++) {
        if (rank == 1 && it >= 5) {
            struct timespec late = {2, 500 * 1000 * 1000};
            nanosleep(&late, NULL);
        }
        int rc = sode_exchange_start(x);
        if (rc == SODE_OK) rc = rank == 0 && it == 6 ? poll_until_done(x) : sode_exchange_wait(x, INFINITY);
        if (rc != SODE_OK) {
            fprintf(stderr, "rank %d: exchange %d: %s\n", rank, it, sode_last_error());
            return 1;
        }
    }
    sode_exchange_free(&x);
    sode_comm_free(&c);
    return 0;
}

/* A commit the last rank reaches 2.5 s late, waited for without deadline
 * (or within `timeout` seconds): every rank must still commit and
 * exchange. With STOP_DIR set, each rank writes its process id to
 * STOP_DIR/rankR.pid as it goes to the commit (the last rank before it
 * sleeps), for a script that stops the whole job there. */
static int latecommit_mode(int size, int from_env, double timeout) {
    sode_comm *c = NULL;
    int made = from_env ? sode_comm_create_env(timeout, &c) : sode_comm_create_mpi(MPI_COMM_WORLD, timeout, &c);
    expect("a communicator", made, SODE_OK, "");
    sode_exchange *x = cart(c, size);
    expect("a field", add_u(x), SODE_OK, "");
    const char *stop_dir = getenv("STOP_DIR");
    if (stop_dir != NULL) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank%d.pid.tmp", stop_dir, rank);
        FILE *f = fopen(path, "w");
        if (f != NULL) {
            fprintf(f, "%ld\n", (long)getpid());
            fclose(f);
            char done[4096];
            snprintf(done, sizeof done, "%s/rank%d.pid", stop_dir, rank);
            rename(path, done);
        }
    }
    if (rank == size - 1) {
        struct timespec late = {2, 500000000};
        nanosleep(&late, NULL);
    }
    expect("a commit the last rank reaches 2.5 s late", sode_exchange_commit(x), SODE_OK, "");
    expect("an exchange", sode_exchange_start(x), SODE_OK, "");
    expect("its wait", sode_exchange_wait(x, 10.0), SODE_OK, "");
    expect("free the exchange", sode_exchange_free(&x), SODE_OK, "");
    expect("free the communicator", sode_comm_free(&c), SODE_OK, "");
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return all != 0;
}

/* Three communicators from the environment in turn, beside MPI: each
 * exchange's halo must be its neighbour's, and MPI must still work, up
 * to MPI_Finalize, after sode let go of the launcher's socket. */
static int beside_mode(int size) {
    enum { N = 6 };
    double u[(N + 2) * (N + 2)];
    int dims[2] = {size, 1}, coords[2] = {rank, 0}, periodic[2] = {1, 1}, halo[2] = {1, 1};
    int64_t ext[2] = {N + 2, N + 2}, lo[2] = {1, 1}, own[2] = {N, N};
    for (int round = 0; round < 3 && failures == 0; round++) {
        sode_comm *c = NULL;
        sode_exchange *x = NULL;
        for (int i = 0; i < (N + 2) * (N + 2); i++) {
            u[i] = rank * 100 + round;
        }
        if (sode_comm_create_env(30.0, &c) != SODE_OK
            || sode_exchange_create_cart(c, 2, dims, coords, periodic, halo, halo, SODE_BOX, &x) != SODE_OK
            || sode_exchange_add_field(x, u, SODE_F64, 2, ext, lo, own, NULL, NULL, SODE_ORDER_C) != SODE_OK
            || sode_exchange_commit(x) != SODE_OK || sode_exchange_start(x) != SODE_OK
            || sode_exchange_wait(x, 30.0) != SODE_OK) {
            fprintf(stderr, "rank %d: communicator %d from the environment: %s\n", rank, round, sode_last_error());
            failures++;
        } else if (u[1] != ((rank + size - 1) % size) * 100 + round) {
            fprintf(stderr, "rank %d: communicator %d: halo %g\n", rank, round, u[1]);
            failures++;
        }
        sode_exchange_free(&x);
        sode_comm_free(&c);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0 && all == 0) {
        printf("ok three communicators from the environment beside MPI, each halo its neighbour's, then MPI_Finalize\n");
    }
    return all != 0;
}

/* Exchanges 10 times (`ended`: until a signal ends the job, 60 s at
 * most), then ends without freeing the exchange or the communicator: the
 * job must still leave no directory of its own behind. */
static int unfreed_mode(int size, int until_ended) {
    sode_comm *c = NULL;
    if (sode_comm_create_mpi(MPI_COMM_WORLD, 30.0, &c) != SODE_OK) {
        fprintf(stderr, "rank %d: create_mpi: %s\n", rank, sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    sode_exchange *x = cart(c, size);
    if (add_u(x) != SODE_OK || sode_exchange_commit(x) != SODE_OK) {
        fprintf(stderr, "rank %d: setup: %s\n", rank, sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double until = MPI_Wtime() + 60.0;
    for (long it = 0; it < 10 || (until_ended && MPI_Wtime() < until); it++) {
        if (sode_exchange_start(x) != SODE_OK || sode_exchange_wait(x, 10.0) != SODE_OK) {
            fprintf(stderr, "rank %d: exchange %ld: %s\n", rank, it, sode_last_error());
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (until_ended && rank == 0 && it == 10) {
            printf("exchanging\n");
            fflush(stdout);
        }
    }
    if (until_ended) {
        fprintf(stderr, "rank %d: no signal ended the job within 60 s\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Finalize();
    return 0;
}

/* The version and status names a program can print. */
static void diagnostics(void) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", SODE_VERSION_MAJOR, SODE_VERSION_MINOR, SODE_VERSION_PATCH);
    if (strcmp(sode_version(), want) != 0) {
        fprintf(stderr, "rank %d: sode_version() is \"%s\", the header says %s\n", rank, sode_version(), want);
        failures++;
    }
    const int statuses[] = {SODE_OK, SODE_ERR_NULL, SODE_ERR_ARG, SODE_ERR_STATE, SODE_ERR_TIMEOUT,
                            SODE_ERR_BOOTSTRAP, SODE_ERR_MISMATCH, SODE_ERR_CHANNEL, SODE_ERR_INTERNAL};
    const char *names[] = {"SODE_OK: ", "SODE_ERR_NULL: ", "SODE_ERR_ARG: ", "SODE_ERR_STATE: ",
                           "SODE_ERR_TIMEOUT: ", "SODE_ERR_BOOTSTRAP: ", "SODE_ERR_MISMATCH: ",
                           "SODE_ERR_CHANNEL: ", "SODE_ERR_INTERNAL: "};
    for (int i = 0; i < 9; i++) {
        if (strncmp(sode_strerror(statuses[i]), names[i], strlen(names[i])) != 0) {
            fprintf(stderr, "rank %d: sode_strerror(%d) is \"%s\"\n", rank, statuses[i], sode_strerror(statuses[i]));
            failures++;
        }
    }
    if (strcmp(sode_strerror(-1), "not a sode status code") != 0) {
        fprintf(stderr, "rank %d: sode_strerror(-1) is \"%s\"\n", rank, sode_strerror(-1));
        failures++;
    }
    if (rank == 0) {
        printf("ok sode %s; %s\n", sode_version(), sode_strerror(SODE_ERR_TIMEOUT));
    }
}

/* A creation whose arguments are wrong on rank 1 alone fails on every rank
 * at once with rank 1's status, the others naming it, rather than leave
 * them waiting for it (for the whole 30 s timeout, or forever without). */
static void one_rank_wrong(void) {
    sode_comm *c = NULL;
    double t0 = seconds_now();
    int rc = sode_comm_create_mpi(MPI_COMM_WORLD, 30.0, rank == 1 ? NULL : &c);
    expect("a null out pointer on rank 1 alone", rc, SODE_ERR_NULL,
           rank == 1 ? "sode_comm_create_mpi: `out` is a null pointer"
                     : "sode_comm_create_mpi failed on rank 1: sode_comm_create_mpi: `out` is a null pointer");
    rc = sode_comm_create_mpi(MPI_COMM_WORLD, rank == 1 ? -5.0 : 30.0, &c);
    expect("a negative timeout on rank 1 alone", rc, SODE_ERR_ARG,
           rank == 1 ? "sode_comm_create_mpi: a timeout of -5 s"
                     : "sode_comm_create_mpi failed on rank 1: sode_comm_create_mpi: a timeout of -5 s");
    double took = seconds_now() - t0;
    if (took > 10.0 || c != NULL) {
        fprintf(stderr, "rank %d: the creations refused on rank 1 took %.1f s, communicator %p\n", rank,
                took, (void *)c);
        failures++;
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "kill") == 0) {
        return kill_mode();
    }
    if (argc > 1 && strcmp(argv[1], "early") == 0) {
        return early_mode();
    }
    if (argc > 1 && strcmp(argv[1], "refused") == 0) {
        return refused_mode();
    }
    if (argc > 1 && strcmp(argv[1], "freed") == 0) {
        return freed_mode();
    }
    if (argc > 1 && strcmp(argv[1], "slow") == 0) {
        return slow_mode();
    }
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && strcmp(argv[1], "late") == 0) {
        return late_mode(size);
    }
    if (argc > 1 && strcmp(argv[1], "settings") == 0) {
        return settings_mode();
    }
    if (argc > 1 && strcmp(argv[1], "beside") == 0) {
        return beside_mode(size);
    }
    if (argc > 1 && strcmp(argv[1], "latecommit") == 0) {
        return latecommit_mode(size, argc > 2 && strcmp(argv[2], "env") == 0, argc > 3 ? atof(argv[3]) : INFINITY);
    }
    if (argc > 1 && (strcmp(argv[1], "unfreed") == 0 || strcmp(argv[1], "ended") == 0)) {
        return unfreed_mode(size, strcmp(argv[1], "ended") == 0);
    }
    if (size < 2) {
        /* The disagreements need two ranks to disagree. */
        if (rank == 0) {
            fprintf(stderr, "errors: run it with at least 2 ranks (mpirun -n 2 ./errors)\n");
        }
        MPI_Finalize();
        return 2;
    }
    diagnostics();
    sode_comm *c = NULL;
    expect("a null out pointer", sode_comm_create_mpi(MPI_COMM_WORLD, 30.0, NULL), SODE_ERR_NULL, "`out`");
    expect("a zero timeout", sode_comm_create_mpi(MPI_COMM_WORLD, 0.0, &c), SODE_ERR_ARG, "timeout of 0");
    one_rank_wrong();
    expect("a communicator", sode_comm_create_mpi(MPI_COMM_WORLD, 30.0, &c), SODE_OK, "");
    misuse(c, size);
    tiles_misuse(c, size);
    shared_fields(c, size);
    mismatch(c, size);
    setup_fails_on_one(c, size);
    reorder(c, size);
    expect("free the communicator", sode_comm_free(&c), SODE_OK, "");
    absent(size);
    suspended(size);
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0) {
        printf(all ? "FAILED: %d misuses not answered as expected\n" : "ok every misuse named\n", all);
    }
    return all != 0;
}
