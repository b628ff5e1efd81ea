/* libsode_mpi: lends sode an MPI communicator's allgather. */
#include "sode_mpi.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What sode holds on to: a duplicate of the program's communicator, the
 * communicator's timeout, and whether a collective step ran out of it (the
 * duplicate then has a step in flight forever and is not used again). */
struct lent {
    MPI_Comm comm;
    double timeout_s;
    int step;
    int broken;
};

/* Tags of the arrival messages; MPI guarantees tags up to 32767. */
enum { ARRIVAL_TAGS = 32000 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The longest stretch between two looks at the clock, naps included, that
 * is taken as this process running (sode_job's STOPPED_GAP). */
static const double STOPPED_GAP_S = 1.0;

/* SODE_WAIT_WARN as sode reads it: the seconds after which a wait says
 * that it goes on (60 unless set), or 0 for never ("off", "0"). A value
 * sode refuses (its exchanges name it) counts as unset here. */
static double wait_warning_s(void) {
    const char *v = getenv("SODE_WAIT_WARN");
    while (v != NULL && (*v == ' ' || *v == '\t')) {
        v++;
    }
    if (v == NULL || *v == '\0') {
        return 60.0;
    }
    if (strncmp(v, "off", 3) == 0 && (v[3] == '\0' || v[3] == ' ')) {
        return 0.0;
    }
    char *end = NULL;
    double s = strtod(v, &end);
    while (end != NULL && (*end == ' ' || *end == '\t')) {
        end++;
    }
    if (end == v || *end != '\0' || !isfinite(s) || s < 0) {
        return 60.0;
    }
    return s;
}

/* On rank 0 of a step: the ranks whose arrival message has not come,
 * as "3, 5" (at most 16 named). */
static void missing_ranks(MPI_Request *arrivals, int size, char *out, size_t cap) {
    int named = 0, missing = 0;
    size_t len = 0;
    out[0] = '\0';
    for (int r = 1; r < size; r++) {
        int done = 0;
        MPI_Test(&arrivals[r], &done, MPI_STATUS_IGNORE);
        if (done) {
            continue;
        }
        missing++;
        if (named < 16 && len < cap) {
            len += (size_t)snprintf(out + len, cap - len, "%s%d", named ? ", " : "", r);
            named++;
        }
    }
    if (missing > named && len < cap) {
        snprintf(out + len, cap - len, " and %d more", missing - named);
    }
}

/* What a long wait in a collective step says, and about which step. */
struct waiting {
    const char *what;      /* "collective step 3", "the creation (...)" */
    const char *who;       /* who it waits for, where rank 0 cannot tell */
    MPI_Request *arrivals; /* on rank 0, the other ranks' arrivals; or NULL */
    int rank, size;
};

/* Says on stderr that the wait `w` has gone on `waited` seconds and goes
 * on, and for whom: on rank 0 of a step, the ranks that have not arrived. */
static void warn_long_wait(const struct waiting *w, double waited) {
    char who[300];
    snprintf(who, sizeof who, "%s", w->who);
    if (w->arrivals != NULL) {
        char missing[256];
        missing_ranks(w->arrivals, w->size, missing, sizeof missing);
        if (missing[0]) {
            snprintf(who, sizeof who, "ranks not arrived yet: %s (of %d)", missing, w->size);
        } else {
            snprintf(who, sizeof who, "every rank arrived, and MPI's collective has not completed");
        }
    }
    fprintf(stderr,
            "sode (rank %d of %d): %s of a communicator has waited %.0f s and goes on waiting: %s "
            "(failed, stopped, or not making the same call, e.g. sode_exchange_commit; "
            "SODE_WAIT_WARN sets when this warns)\n",
            w->rank, w->size, w->what, waited, who);
}

/* Tests `req` until it completes (1) or `deadline` passes (0). Collective
 * steps are rare (creation, commits), so the wait sleeps between tests:
 * 50 us at first, growing to 1 ms. A longer stretch between two looks at
 * the clock is time this process was stopped (a suspended job, SIGSTOP):
 * the deadline moves on by as much, as sode's own waits do. A wait that
 * goes on past SODE_WAIT_WARN says so, as `w` describes, and again each
 * time it has waited twice as long. */
static int complete_by(MPI_Request *req, double deadline, const struct waiting *w) {
    long pause_ns = 50000;
    double looked = now(), waited = 0.0, warn_at = wait_warning_s();
    for (;;) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            return -1;
        }
        if (done) {
            return 1;
        }
        double t = now();
        if (t - looked > STOPPED_GAP_S) {
            deadline += t - looked;
        } else {
            waited += t - looked;
        }
        looked = t;
        if (warn_at > 0 && waited >= warn_at) {
            warn_long_wait(w, waited);
            warn_at *= 2;
        }
        if (t > deadline) {
            return 0;
        }
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 1000000) {
            pause_ns *= 2;
        }
    }
}

/* One collective step: an MPI_Iallgather, completed within the
 * communicator's timeout. Every rank first tells rank 0 that it arrived,
 * so that a step that times out names, on rank 0, the ranks that never
 * came (failed, stopped, or not making the same call). */
static int allgather(const void *mine, void *all, size_t bytes, void *ctx) {
    struct lent *l = ctx;
    char text[512];
    if (l->broken) {
        return sode_report_error(SODE_ERR_BOOTSTRAP,
                                 "an earlier collective step on this communicator timed out: make "
                                 "a new communicator");
    }
    if (bytes > INT_MAX) {
        return sode_report_error(SODE_ERR_BOOTSTRAP, "a block larger than MPI's int count");
    }
    int rank = 0, size = 0, tag = l->step++ % ARRIVAL_TAGS;
    MPI_Comm_rank(l->comm, &rank);
    MPI_Comm_size(l->comm, &size);
    if (size > 0 && bytes > SIZE_MAX / (size_t)size) {
        return sode_report_error(SODE_ERR_BOOTSTRAP, "the blocks of every rank exceed the address space");
    }
    double deadline = isfinite(l->timeout_s) && l->timeout_s > 0 ? now() + l->timeout_s : INFINITY;
    static const char arrived = 1;
    char *sink = NULL;
    /* MPI owns a step's buffers until the step completes, and one given up
     * at its deadline completes whenever the ranks it waited for arrive
     * (a late rank, later): its buffers are its own, not the caller's,
     * and are left to it then, as its requests are. */
    size_t all_bytes = bytes * (size_t)size;
    char *send = malloc(bytes ? bytes : 1), *recv = malloc(all_bytes ? all_bytes : 1);
    MPI_Request *arrivals = calloc((size_t)size, sizeof *arrivals);
    if (send == NULL || recv == NULL || arrivals == NULL ||
        (rank == 0 && (sink = calloc((size_t)size, 1)) == NULL)) {
        free(send);
        free(recv);
        free(arrivals);
        return sode_report_error(SODE_ERR_BOOTSTRAP, "out of memory");
    }
    if (bytes > 0) {
        memcpy(send, mine, bytes);
    }
    for (int r = 0; r < size; r++) {
        arrivals[r] = MPI_REQUEST_NULL;
    }
    if (rank == 0) {
        for (int r = 1; r < size; r++) {
            MPI_Irecv(&sink[r], 1, MPI_CHAR, r, tag, l->comm, &arrivals[r]);
        }
    } else {
        MPI_Isend(&arrived, 1, MPI_CHAR, 0, tag, l->comm, &arrivals[0]);
    }
    MPI_Request req;
    int rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, l->comm, &req);
    char what[64];
    snprintf(what, sizeof what, "collective step %d", l->step);
    struct waiting w = {what, "this rank arrived; rank 0 names the ranks that have not",
                        rank == 0 ? arrivals : NULL, rank, size};
    int done = rc == MPI_SUCCESS ? complete_by(&req, deadline, &w) : -1;
    if (done == 1) {
        if (all_bytes > 0) {
            memcpy(all, recv, all_bytes);
        }
        free(send);
        free(recv);
        /* Everyone contributed, so every arrival was sent: these complete.
         * One wait each: GCC reads MPICH's MPI_STATUSES_IGNORE, a sentinel
         * pointer, as an array of size 0 and warns on MPI_Waitall. */
        for (int r = 0; r < size; r++) {
            MPI_Wait(&arrivals[r], MPI_STATUS_IGNORE);
        }
        free(arrivals);
        free(sink);
        return 0;
    }
    /* The step stays in flight (MPI cannot cancel a collective): the
     * communicator is not used again, its requests and buffers left to it
     * (send, recv, arrivals, sink: not freed). */
    l->broken = 1;
    if (done < 0) {
        snprintf(text, sizeof text, "MPI_Iallgather failed (MPI error %d)", rc);
    } else if (rank == 0) {
        char who[256];
        missing_ranks(arrivals, size, who, sizeof who);
        snprintf(text, sizeof text,
                 "a collective step did not complete within the communicator's timeout (%g s): "
                 "rank %s of %d never arrived (failed, stopped, or not making the same call, "
                 "e.g. sode_exchange_commit)",
                 l->timeout_s, who[0] ? who : "(none: the collective itself is stuck)", size);
    } else {
        snprintf(text, sizeof text,
                 "a collective step did not complete within the communicator's timeout (%g s): "
                 "this rank arrived; rank 0's message names the ranks that did not",
                 l->timeout_s);
    }
    return sode_report_error(SODE_ERR_BOOTSTRAP, text);
}

static void release(void *ctx) {
    struct lent *l = ctx;
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* A broken duplicate has a step in flight: freeing it would wait. */
    if (!finalized && !l->broken) {
        MPI_Comm_free(&l->comm);
    }
    free(l);
}

/* The creation over the allgather names itself in its messages
 * ("sode_comm_create_allgather failed on rank 1: ..."); the program called
 * sode_comm_create_mpi, so that is the name it reads. */
static int as_create_mpi(int rc) {
    static const char lent[] = "sode_comm_create_allgather";
    const char *m = sode_last_error();
    size_t skip = sizeof lent - 1;
    if (rc == SODE_OK || m == NULL || strncmp(m, lent, skip) != 0) {
        return rc;
    }
    size_t n = sizeof "sode_comm_create_mpi" + strlen(m + skip);
    char *text = malloc(n);
    if (text == NULL) {
        return rc; /* the message as it is, rather than none */
    }
    snprintf(text, n, "sode_comm_create_mpi%s", m + skip);
    rc = sode_report_error(rc, text);
    free(text);
    return rc;
}

int sode_comm_create_mpi(MPI_Comm comm, double timeout_s, sode_comm **out) {
    int initialized = 0, rank = 0, size = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        return sode_report_error(SODE_ERR_BOOTSTRAP,
                                 "sode_comm_create_mpi: MPI is not initialized: call MPI_Init first");
    }
    if (comm == MPI_COMM_NULL) {
        /* MPI's own error handler would end the job on it. */
        return sode_report_error(SODE_ERR_ARG,
                                 "sode_comm_create_mpi: the communicator is MPI_COMM_NULL (as "
                                 "MPI_Comm_split gives a rank it leaves out): create a sode communicator "
                                 "only on the ranks of an MPI communicator");
    }
    int inter = 0;
    if (MPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && inter) {
        /* Its allgather would bring the other group's records. */
        return sode_report_error(SODE_ERR_ARG,
                                 "sode_comm_create_mpi: the communicator is an intercommunicator: make "
                                 "the sode communicator from an intracommunicator (one group's, or both "
                                 "groups merged by MPI_Intercomm_merge)");
    }
    /* Arguments wrong on this rank alone: it still takes part in the
     * creation, only to make it fail on every rank (the others would
     * otherwise wait for it, without a deadline by default). */
    char refusal[256] = "";
    int refused = SODE_OK;
    if (out == NULL) {
        refused = SODE_ERR_NULL;
        snprintf(refusal, sizeof refusal, "sode_comm_create_mpi: `out` is a null pointer");
    } else if (!(timeout_s > 0) && timeout_s != SODE_TIMEOUT_DEFAULT) {
        refused = SODE_ERR_ARG;
        snprintf(refusal, sizeof refusal,
                 "sode_comm_create_mpi: a timeout of %g s: give a positive number of seconds, "
                 "INFINITY for no deadline, or SODE_TIMEOUT_DEFAULT for the job's (SODE_TIMEOUT)",
                 timeout_s);
    }
    if (refused != SODE_OK) {
        timeout_s = SODE_TIMEOUT_DEFAULT;
    }
    struct lent *l = malloc(sizeof *l);
    if (l == NULL) {
        return sode_report_error(SODE_ERR_BOOTSTRAP, "sode_comm_create_mpi: out of memory");
    }
    l->timeout_s = timeout_s;
    if (timeout_s < 0) { /* SODE_TIMEOUT_DEFAULT: the job's, else none */
        const char *job = getenv("SODE_TIMEOUT");
        l->timeout_s = job ? strtod(job, NULL) : INFINITY;
    }
    l->step = 0;
    l->broken = 0;
    /* The duplication is the call's first collective step: bounded by the
     * timeout like the others, so a rank that never calls (failed, stopped,
     * or in another call) fails this one rather than hanging it. */
    double deadline = isfinite(l->timeout_s) && l->timeout_s > 0 ? now() + l->timeout_s : INFINITY;
    MPI_Request req;
    int rc = MPI_Comm_idup(comm, &l->comm, &req);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    struct waiting w = {"the creation (MPI_Comm_idup)",
                        "a rank of it has not called sode_comm_create_mpi", NULL, rank, size};
    int done = rc == MPI_SUCCESS ? complete_by(&req, deadline, &w) : -1;
    if (done == 0) {
        /* MPI cannot cancel it: `l` stays MPI's, to write the duplicate
         * into when the missing ranks arrive. */
        char text[512];
        snprintf(text, sizeof text,
                 "sode_comm_create_mpi: duplicating the communicator (MPI_Comm_idup) did not "
                 "complete within the timeout (%g s): a rank of it has not called "
                 "sode_comm_create_mpi (failed, stopped, late, or in another call)",
                 l->timeout_s);
        return sode_report_error(SODE_ERR_BOOTSTRAP, text);
    }
    if (done < 0) {
        free(l);
        char text[MPI_MAX_ERROR_STRING + 64], why[MPI_MAX_ERROR_STRING];
        int len = 0;
        snprintf(why, sizeof why, "MPI_Test failed");
        if (rc != MPI_SUCCESS) {
            MPI_Error_string(rc, why, &len);
        }
        snprintf(text, sizeof text, "sode_comm_create_mpi: duplicating the communicator failed: %s", why);
        return sode_report_error(SODE_ERR_BOOTSTRAP, text);
    }
    /* Errors come back as codes on the duplicate: sode reports them. */
    MPI_Comm_set_errhandler(l->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(l->comm, &rank);
    MPI_Comm_size(l->comm, &size);
    if (refused != SODE_OK) {
        return sode_comm_refuse_allgather(rank, size, allgather, l, release, timeout_s, refused,
                                          refusal);
    }
    return as_create_mpi(sode_comm_create_allgather(rank, size, allgather, l, release, timeout_s, out));
}

int sode_comm_create_mpi_f(MPI_Fint comm, double timeout_s, sode_comm **out) {
    return sode_comm_create_mpi(MPI_Comm_f2c(comm), timeout_s, out);
}

int sode_exchange_create_mpi_cart(sode_comm *sode, MPI_Comm cart, const int *halo_lo,
                                  const int *halo_hi, int shape, sode_exchange **out) {
    int ndims = 0, status = MPI_UNDEFINED;
    if (cart == MPI_COMM_NULL) {
        /* MPI's own error handler would end the job on it. */
        return sode_report_error(SODE_ERR_ARG,
                                 "sode_exchange_create_mpi_cart: the communicator is MPI_COMM_NULL (as "
                                 "MPI_Cart_create gives a rank outside its grid): make the exchange only "
                                 "on the ranks of the Cartesian communicator");
    }
    if (MPI_Topo_test(cart, &status) != MPI_SUCCESS || status != MPI_CART) {
        return sode_report_error(SODE_ERR_ARG,
                                 "sode_exchange_create_mpi_cart: the communicator has no Cartesian "
                                 "topology: make it with MPI_Cart_create");
    }
    MPI_Cartdim_get(cart, &ndims);
    if (ndims < 1 || ndims > 3) {
        /* sode names the problem. */
        return sode_exchange_create_cart(sode, ndims, NULL, NULL, NULL, halo_lo, halo_hi, shape, out);
    }
    int dims[3], periods[3], coords[3], cart_rank = 0, sode_rank = 0;
    MPI_Cart_get(cart, ndims, dims, periods, coords);
    MPI_Comm_rank(cart, &cart_rank);
    int rc = sode_comm_rank(sode, &sode_rank);
    if (rc != SODE_OK) {
        return rc;
    }
    if (cart_rank != sode_rank) {
        char text[256];
        snprintf(text, sizeof text,
                 "sode_exchange_create_mpi_cart: this process is rank %d of the Cartesian "
                 "communicator but rank %d of the sode communicator: make the sode communicator "
                 "from the Cartesian one (sode_comm_create_mpi(cart, ...))",
                 cart_rank, sode_rank);
        return sode_report_error(SODE_ERR_ARG, text);
    }
    return sode_exchange_create_cart(sode, ndims, dims, coords, periods, halo_lo, halo_hi, shape, out);
}

int sode_exchange_create_mpi_cart_f(sode_comm *sode, MPI_Fint cart, const int *halo_lo,
                                    const int *halo_hi, int shape, sode_exchange **out) {
    return sode_exchange_create_mpi_cart(sode, MPI_Comm_f2c(cart), halo_lo, halo_hi, shape, out);
}

void sode_mpi_abort(int code) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    exit(code);
}
