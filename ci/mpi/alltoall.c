/* MPI_Alltoall timed for ci/alltoall.sh, beside sode's persistent
 * all-to-all (examples/alltoall_bench): per block size, `rounds` rounds of
 * `iters` all-to-alls, each round timed on the slowest rank. Prints one
 * line per size:
 *   mpi <bytes per pair> median_us min_us
 *
 *   mpirun -n N alltoall [iters [rounds]] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    int rounds = argc > 2 ? atoi(argv[2]) : 7;
    if (iters < 1 || rounds < 1 || rounds > 100) {
        if (rank == 0) fprintf(stderr, "usage: alltoall [iters>0 [rounds 1-100]]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int sizes[] = {8, 1024, 65536, 1048576};
    for (int s = 0; s < 4; s++) {
        int bytes = sizes[s];
        char *out = malloc((size_t)bytes * size), *in = malloc((size_t)bytes * size);
        if (!out || !in) MPI_Abort(MPI_COMM_WORLD, 3);
        for (size_t i = 0; i < (size_t)bytes * size; i++) out[i] = (char)(i * 7 + rank);
        double t[100];
        int n = bytes >= 1048576 ? (iters + 9) / 10 : iters;
        MPI_Alltoall(out, bytes, MPI_BYTE, in, bytes, MPI_BYTE, MPI_COMM_WORLD);
        for (int r = 0; r < rounds; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < n; i++)
                MPI_Alltoall(out, bytes, MPI_BYTE, in, bytes, MPI_BYTE, MPI_COMM_WORLD);
            double mine = (MPI_Wtime() - t0) / n * 1e6, slowest;
            MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            t[r] = slowest;
        }
        for (int p = 0; p < size; p++) {
            for (int i = 0; i < bytes; i++) {
                char want = (char)(((size_t)rank * bytes + i) * 7 + p);
                if (in[(size_t)p * bytes + i] != want) {
                    fprintf(stderr, "rank %d: byte %d from rank %d is wrong\n", rank, i, p);
                    MPI_Abort(MPI_COMM_WORLD, 4);
                }
            }
        }
        if (rank == 0) {
            qsort(t, rounds, sizeof t[0], cmp);
            printf("mpi %d %.2f %.2f\n", bytes, t[rounds / 2], t[0]);
        }
        free(out);
        free(in);
    }
    MPI_Finalize();
    return 0;
}
