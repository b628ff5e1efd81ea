/* One-way latency of an MPI ping-pong between ranks 0 and 1 (half the
 * round trip), for the same-run comparison with sode's shared-memory
 * paths (ci/shm-latency.sh). Prints one line:
 *   mpi <bytes> mean_us median_us
 * over `rounds` rounds of `iters` round trips each.
 *
 *   mpirun -n 2 pingpong [bytes [iters [rounds]]]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* `n` round trips of `bytes` between ranks 0 and 1. */
static void round_trips(char *buf, int bytes, int n, int rank) {
    int peer = 1 - rank;
    for (int i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Send(buf, bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
        }
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int bytes = argc > 1 ? atoi(argv[1]) : 8;
    int iters = argc > 2 ? atoi(argv[2]) : 10000;
    int rounds = argc > 3 ? atoi(argv[3]) : 7;
    if (bytes < 1 || iters < 1 || rounds < 1 || rounds > 100) {
        if (rank == 0) fprintf(stderr, "usage: pingpong [bytes>0 [iters>0 [rounds 1-100]]]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = calloc((size_t)bytes, 1);
    if (buf == NULL) {
        fprintf(stderr, "pingpong: no memory for %d bytes\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double one_way[100], sum = 0;
    for (int r = 0; r < rounds; r++) {
        round_trips(buf, bytes, iters / 10 + 1, rank); /* warm-up */
        double t = MPI_Wtime();
        round_trips(buf, bytes, iters, rank);
        one_way[r] = (MPI_Wtime() - t) / iters / 2 * 1e6;
        sum += one_way[r];
    }
    if (rank == 0) {
        qsort(one_way, (size_t)rounds, sizeof one_way[0], cmp);
        printf("mpi %d %.3f %.3f\n", bytes, sum / rounds, one_way[rounds / 2]);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
