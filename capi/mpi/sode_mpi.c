/* libsode_mpi: lends sode an MPI communicator's allgather. */
#include "sode_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

/* What sode holds on to: a duplicate of the program's communicator. */
struct lent {
    MPI_Comm comm;
};

static int allgather(const void *mine, void *all, size_t bytes, void *ctx) {
    struct lent *l = ctx;
    if (bytes > INT_MAX) {
        return -1;
    }
    return MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, l->comm);
}

static void release(void *ctx) {
    struct lent *l = ctx;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        MPI_Comm_free(&l->comm);
    }
    free(l);
}

int sode_comm_create_mpi(MPI_Comm comm, double timeout_s, sode_comm **out) {
    int initialized = 0, rank = 0, size = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        return sode_report_error(SODE_ERR_BOOTSTRAP,
                                 "sode_comm_create_mpi: MPI is not initialized: call MPI_Init first");
    }
    if (out == NULL) {
        return sode_report_error(SODE_ERR_NULL, "sode_comm_create_mpi: `out` is a null pointer");
    }
    struct lent *l = malloc(sizeof *l);
    if (l == NULL) {
        return sode_report_error(SODE_ERR_BOOTSTRAP, "sode_comm_create_mpi: out of memory");
    }
    /* Errors come back as codes on the duplicate: sode reports them. */
    int rc = MPI_Comm_dup(comm, &l->comm);
    if (rc != MPI_SUCCESS) {
        free(l);
        char text[MPI_MAX_ERROR_STRING + 64], why[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, why, &len);
        snprintf(text, sizeof text, "sode_comm_create_mpi: MPI_Comm_dup failed: %s", why);
        return sode_report_error(SODE_ERR_BOOTSTRAP, text);
    }
    MPI_Comm_set_errhandler(l->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(l->comm, &rank);
    MPI_Comm_size(l->comm, &size);
    return sode_comm_create_allgather(rank, size, allgather, l, release, timeout_s, out);
}

int sode_comm_create_mpi_f(MPI_Fint comm, double timeout_s, sode_comm **out) {
    return sode_comm_create_mpi(MPI_Comm_f2c(comm), timeout_s, out);
}

int sode_exchange_create_mpi_cart(sode_comm *sode, MPI_Comm cart, const int *halo_lo,
                                  const int *halo_hi, int shape, sode_exchange **out) {
    int ndims = 0, status = MPI_UNDEFINED;
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
