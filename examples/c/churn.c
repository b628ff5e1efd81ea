/* A long run that makes and frees exchanges over and over (a code that
 * regrids, or rebuilds its exchanges after a checkpoint): each round
 * creates an exchange, commits it, runs one exchange whose halo it checks,
 * and frees it. Nothing may accumulate: after a warm-up, every rank's open
 * descriptors, threads, resident memory and sode's entries in /dev/shm
 * must stay where they were.
 *
 *   mpirun -n 4 ./churn [rounds] [cleanup | env]
 *
 * With `cleanup`, something removes the job's directory in /dev/shm while
 * it runs (ci/capi.sh does, as a site's cleanup script would): its entries
 * there are then not compared. With `env`, the communicator comes from the
 * launcher's environment (PMIx or PMI, as Rust's World::init), whose
 * server keeps whatever is put there: the last 100 rounds must take at
 * most three times as long as the 100 after the warm-up. */
#include <mpi.h>
#include <sode_mpi.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 32 /* owned cells per axis */
#define WARM_UP 20

static int rank;

/* Entries of a directory whose names begin with `prefix`, or -1. */
static int entries(const char *path, const char *prefix) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && !strncmp(e->d_name, prefix, strlen(prefix))) n++;
    closedir(d);
    return n;
}

/* A number from /proc/self/status ("Threads:", "VmRSS:"), or -1. */
static long status(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) v = atol(line + strlen(key));
    fclose(f);
    return v;
}

struct usage {
    int fds, shm;
    long threads, rss_kb;
};

static struct usage usage(void) {
    struct usage u = {entries("/proc/self/fd", ""), entries("/dev/shm", "sode"), status("Threads:"),
                      status("VmRSS:")};
    return u;
}

/* One round: a periodic ring of ranks along axis 0, the halo rows checked. */
static int round_trip(sode_comm *sc, int size, double *u, int r) {
    int dims[2] = {size, 1}, coords[2] = {rank, 0}, periodic[2] = {1, 1}, halo[2] = {1, 1};
    int64_t ext[2] = {N + 2, N + 2}, lo[2] = {1, 1}, own[2] = {N, N};
    for (int i = 0; i < (N + 2) * (N + 2); i++) u[i] = -1;
    for (int i = 1; i <= N; i++)
        for (int j = 1; j <= N; j++) u[i * (N + 2) + j] = r * 1000.0 + rank;
    sode_exchange *x = NULL;
    if (sode_exchange_create_cart(sc, 2, dims, coords, periodic, halo, halo, SODE_STAR, &x) ||
        sode_exchange_add_field(x, u, SODE_F64, 2, ext, lo, own, NULL, NULL, SODE_ORDER_C) ||
        sode_exchange_commit(x) || sode_exchange_start(x) || sode_exchange_wait(x, 30) ||
        sode_exchange_free(&x)) {
        fprintf(stderr, "rank %d, round %d: %s\n", rank, r, sode_last_error());
        return 1;
    }
    int below = (rank + size - 1) % size, above = (rank + 1) % size, wrong = 0;
    for (int j = 1; j <= N; j++) {
        wrong += u[j] != r * 1000.0 + below;
        wrong += u[(N + 1) * (N + 2) + j] != r * 1000.0 + above;
    }
    if (wrong) fprintf(stderr, "rank %d, round %d: %d halo cells wrong\n", rank, r, wrong);
    return wrong != 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    if (rounds <= WARM_UP) rounds = WARM_UP + 1;
    int from_env = argc > 2 && strcmp(argv[2], "env") == 0;
    if (from_env && rounds < WARM_UP + 200) rounds = WARM_UP + 200;
    sode_comm *sc = NULL;
    if (from_env ? sode_comm_create_env(60, &sc) : sode_comm_create_mpi(MPI_COMM_WORLD, 60, &sc)) {
        fprintf(stderr, "rank %d: %s\n", rank, sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double *u = malloc(sizeof(double) * (N + 2) * (N + 2));
    struct usage warm = {0, 0, 0, 0};
    int failed = 0;
    double early = 0, late = 0, t0 = 0; /* seconds of the 100 rounds after the warm-up, and of the last 100 */
    for (int r = 1; r <= rounds && !failed; r++) {
        if (r == WARM_UP + 1 || r == rounds - 99) t0 = MPI_Wtime();
        failed = round_trip(sc, size, u, r);
        if (r == WARM_UP + 100) early = MPI_Wtime() - t0;
        if (r == rounds) late = MPI_Wtime() - t0;
        if (r == WARM_UP) {
            MPI_Barrier(MPI_COMM_WORLD);
            warm = usage();
        }
    }
    int slowed = from_env && !failed && late > 3 * early;
    if (slowed)
        fprintf(stderr, "rank %d: the last 100 rounds took %.1f ms, the 100 after the warm-up %.1f ms\n", rank,
                late * 1e3, early * 1e3);
    MPI_Barrier(MPI_COMM_WORLD);
    struct usage end = usage();
    /* Resident memory may move a little with the allocator; a leak of an
     * exchange a round would add far more than 1 MB over the rounds. */
    int cleaned = argc > 2 && strcmp(argv[2], "cleanup") == 0;
    int grew = end.fds != warm.fds || end.threads != warm.threads || (!cleaned && end.shm != warm.shm) ||
               end.rss_kb > warm.rss_kb + 1024;
    if (grew)
        fprintf(stderr,
                "rank %d: after %d rounds: descriptors %d -> %d, threads %ld -> %ld, resident %ld -> %ld kB, "
                "/dev/shm entries %d -> %d\n",
                rank, rounds - WARM_UP, warm.fds, end.fds, warm.threads, end.threads, warm.rss_kb, end.rss_kb,
                warm.shm, end.shm);
    int bad = failed || grew || slowed, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && !any) {
        printf("ok %d ranks, %d exchanges made, run and freed: halos right; descriptors %d, threads %ld, "
               "resident %ld -> %ld kB, /dev/shm entries %d after the first %d and at the end",
               size, rounds, end.fds, end.threads, warm.rss_kb, end.rss_kb, end.shm, WARM_UP);
        if (from_env)
            printf("; from the environment, %.2f ms a round after the warm-up and %.2f ms at the end", early * 10,
                   late * 10);
        printf("\n");
    }
    free(u);
    sode_comm_free(&sc);
    MPI_Finalize();
    return any;
}
