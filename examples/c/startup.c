/* What sode adds to a job's start: with `sode`, the program creates a
 * communicator and commits one exchange (one double field of 64^2 cells,
 * halo 1, 8 neighbours, periodic), then frees them; without, it only
 * starts and ends MPI. `ci/startup.sh` times both under mpirun.
 *
 *   mpirun -n 4 ./startup [sode]
 *
 * With `sode`, rank 0 prints the slowest rank's time from communicator
 * creation to commit. */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdio.h>
#include <string.h>

static double u[66 * 66];

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc > 1 && strcmp(argv[1], "sode") == 0) {
        int size, dims[2] = {0, 0}, periods[2] = {1, 1}, h[2] = {1, 1};
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Dims_create(size, 2, dims);
        MPI_Comm cart;
        MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
        int64_t ext[2] = {66, 66}, lo[2] = {1, 1}, own[2] = {64, 64};
        sode_comm *sc = NULL;
        sode_exchange *x = NULL;
        double t0 = MPI_Wtime();
        int rc = sode_comm_create_mpi(cart, 60.0, &sc);
        rc = rc ? rc : sode_exchange_create_mpi_cart(sc, cart, h, h, SODE_BOX, &x);
        rc = rc ? rc : sode_exchange_add_field(x, u, SODE_F64, 2, ext, lo, own, NULL, NULL, SODE_ORDER_C);
        rc = rc ? rc : sode_exchange_commit(x);
        double ms = (MPI_Wtime() - t0) * 1e3, slowest;
        if (rc != SODE_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, sode_last_error());
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        MPI_Reduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("startup: communicator and commit %.1f ms (slowest rank)\n", slowest);
        }
        sode_exchange_free(&x);
        sode_comm_free(&sc);
        MPI_Comm_free(&cart);
    }
    MPI_Finalize();
    return 0;
}
