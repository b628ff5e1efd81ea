/* A model's many exchanges, all held at once: a large code commits an
 * exchange for each of its halo patterns (field groups, depths, grids) at
 * start-up and keeps them for the whole run. Each of `count` exchanges has
 * its own array on a 2-D periodic grid of ranks (8 neighbours); all are
 * committed, then each is run once and every halo cell checked. What a
 * held exchange costs must not grow with the exchanges already held:
 *
 * - descriptors: on one node (shared memory) none an exchange once the
 *   first has been made (a peer process is watched through one descriptor
 *   whatever the number of exchanges); over TCP, one stream a neighbouring
 *   rank an exchange;
 * - resident memory: at most 48 kB an exchange plus 40 kB a neighbouring
 *   rank for these small faces (32 doubles; sode's shared-memory rings are
 *   sized to the messages).
 *
 *   mpirun -n 4 ./many [count]
 */
#include <mpi.h>
#include <sode_mpi.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 32 /* owned cells per axis */
#define FIRST 10 /* exchanges held before the measure starts */

static int rank;

static int descriptors(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* Resident kB (VmRSS in /proc/self/status), or -1. */
static long resident_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) v = atol(line + 6);
    fclose(f);
    return v;
}

/* The value of global cell (gi, gj) in exchange k's array. */
static double value(int k, int gi, int gj) { return k * 1e6 + gi * 1e3 + gj; }

/* Exchange k's array: owned cells set, halo cells -1. */
static double *make_array(int k, const int coords[2]) {
    double *u = malloc(sizeof(double) * (N + 2) * (N + 2));
    if (!u) return NULL;
    for (int i = 0; i < N + 2; i++)
        for (int j = 0; j < N + 2; j++) {
            int owned = i >= 1 && i <= N && j >= 1 && j <= N;
            u[i * (N + 2) + j] = owned ? value(k, coords[0] * N + i - 1, coords[1] * N + j - 1) : -1;
        }
    return u;
}

/* Halo cells of exchange k that do not hold their periodic neighbour's value. */
static int wrong_halo(const double *u, int k, const int dims[2], const int coords[2]) {
    int wrong = 0, gn[2] = {dims[0] * N, dims[1] * N};
    for (int i = 0; i < N + 2; i++)
        for (int j = 0; j < N + 2; j++) {
            if (i >= 1 && i <= N && j >= 1 && j <= N) continue;
            int gi = (coords[0] * N + i - 1 + gn[0]) % gn[0], gj = (coords[1] * N + j - 1 + gn[1]) % gn[1];
            wrong += u[i * (N + 2) + j] != value(k, gi, gj);
        }
    return wrong;
}

/* Distinct ranks among the 8 neighbours, this one left out. */
static int neighbouring_ranks(MPI_Comm cart, const int coords[2]) {
    int seen[8], n = 0;
    for (int di = -1; di <= 1; di++)
        for (int dj = -1; dj <= 1; dj++) {
            int c[2] = {coords[0] + di, coords[1] + dj}, r, dup = 0;
            if (!di && !dj) continue;
            MPI_Cart_rank(cart, c, &r);
            for (int s = 0; s < n; s++) dup |= seen[s] == r;
            if (!dup && r != rank) seen[n++] = r;
        }
    return n;
}

static sode_exchange *commit(sode_comm *sc, MPI_Comm cart, double *u) {
    int halo[2] = {1, 1};
    int64_t ext[2] = {N + 2, N + 2}, first[2] = {1, 1}, own[2] = {N, N};
    sode_exchange *x = NULL;
    if (sode_exchange_create_mpi_cart(sc, cart, halo, halo, SODE_BOX, &x) ||
        sode_exchange_add_field(x, u, SODE_F64, 2, ext, first, own, NULL, NULL, SODE_ORDER_C) ||
        sode_exchange_commit(x)) {
        fprintf(stderr, "rank %d: %s\n", rank, sode_last_error());
        sode_exchange_free(&x);
        return NULL;
    }
    return x;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size, dims[2] = {0, 0}, periodic[2] = {1, 1}, coords[2];
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periodic, 0, &cart);
    MPI_Comm_rank(cart, &rank);
    MPI_Cart_coords(cart, rank, 2, coords);
    int count = argc > 1 ? atoi(argv[1]) : 200;
    if (count <= FIRST) count = FIRST + 1;
    const char *transport = getenv("SODE_TRANSPORT");
    int tcp = transport && !strcmp(transport, "tcp");
    sode_comm *sc = NULL;
    if (sode_comm_create_mpi(cart, 60, &sc)) {
        fprintf(stderr, "rank %d: %s\n", rank, sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    sode_exchange **x = calloc((size_t)count, sizeof *x);
    double **u = calloc((size_t)count, sizeof *u);
    int fds_at = 0, failed = !x || !u;
    long kb_at = 0;
    for (int k = 0; k < count && !failed; k++) {
        if (k == FIRST) {
            fds_at = descriptors();
            kb_at = resident_kb();
        }
        u[k] = make_array(k, coords);
        failed = !u[k] || !(x[k] = commit(sc, cart, u[k]));
    }
    int fds = descriptors() - fds_at, peers = neighbouring_ranks(cart, coords), held = count - FIRST;
    double kb = (double)(resident_kb() - kb_at) / held;
    for (int k = 0; k < count && !failed; k++) {
        int wrong = 0;
        if (sode_exchange_start(x[k]) || sode_exchange_wait(x[k], 30)) {
            fprintf(stderr, "rank %d, exchange %d: %s\n", rank, k, sode_last_error());
            failed = 1;
        } else if ((wrong = wrong_halo(u[k], k, dims, coords)) != 0) {
            fprintf(stderr, "rank %d, exchange %d: %d halo cells wrong\n", rank, k, wrong);
            failed = 1;
        }
    }
    /* Shared memory: no descriptor an exchange (2 spare for the MPI's own).
     * TCP: a stream a neighbouring rank. */
    int fds_most = tcp ? peers * held + 2 : 2;
    double kb_most = 48 + 40.0 * peers;
    int grew = !failed && (fds > fds_most || kb > kb_most);
    if (grew)
        fprintf(stderr,
                "rank %d: %d exchanges held after the first %d took %d descriptors (at most %d) and %.1f kB "
                "resident an exchange (at most %.0f, with %d neighbouring ranks)\n",
                rank, held, FIRST, fds, fds_most, kb, kb_most, peers);
    int bad = failed || grew, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !any)
        printf("ok %d ranks, %d exchanges held at once, halos right; after the first %d: %d descriptors, "
               "%.1f kB resident an exchange (%d neighbouring ranks)\n",
               size, count, FIRST, fds, kb, peers);
    for (int k = 0; k < count; k++) {
        if (x && x[k]) sode_exchange_free(&x[k]);
        if (u) free(u[k]);
    }
    free(x);
    free(u);
    sode_comm_free(&sc);
    MPI_Finalize();
    return any;
}
