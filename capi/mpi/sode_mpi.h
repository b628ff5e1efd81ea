/* libsode_mpi: sode over an MPI communicator. A small C library built with
 * the MPI it is used with (Open MPI, MPICH, ...), so that libsode itself
 * links no MPI. */
#ifndef SODE_MPI_H
#define SODE_MPI_H

#include <mpi.h>
#include "sode.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A sode communicator whose ranks are `comm`'s ranks (so MPI_Cart_create's
 * reordering carries over). sode duplicates `comm` and uses the duplicate's
 * MPI_Iallgather to meet the other ranks; its later collective steps (each
 * commit) travel sode's own links. Free the sode communicator and its
 * exchanges before MPI_Finalize. Collective over `comm`. Every collective
 * step (this call, each commit) completes within `timeout_s` (INFINITY: no
 * deadline; SODE_TIMEOUT_DEFAULT: SODE_TIMEOUT's) or fails with
 * SODE_ERR_BOOTSTRAP naming the ranks that did not take it: in this call,
 * rank 0's message names the ranks that never arrived (after the
 * duplication, which names none), and the communicator is then unusable. Time in which this process is stopped
 * (a suspended job, a debugger) does not count. A step that goes on for
 * SODE_WAIT_WARN seconds (60 unless set; "off" for never) says so on
 * stderr, rank 0 naming the ranks not arrived yet, and again each time it
 * has waited twice as long; it goes on waiting.
 * A rank whose own `out` or `timeout_s` is wrong still takes part, only to
 * make the call fail on every rank: it returns its status, and the others
 * the same status with "sode_comm_create_mpi failed on rank R: " and its
 * message.
 * # Statuses
 * SODE_ERR_NULL (`out`) and SODE_ERR_ARG for a timeout neither positive nor
 * SODE_TIMEOUT_DEFAULT, on every rank when a rank's is wrong; SODE_ERR_ARG
 * for MPI_COMM_NULL (which a split gives a rank it leaves out) and an
 * intercommunicator; SODE_ERR_BOOTSTRAP before MPI_Init, when
 * duplicating `comm` (MPI_Comm_idup, the call's first collective step)
 * fails or does not complete within `timeout_s` (a rank of `comm` that
 * does not call: the duplicate is then left to MPI), or as
 * `sode_comm_create_allgather` returns it. */
int sode_comm_create_mpi(MPI_Comm comm, double timeout_s, sode_comm **out);

/* The same for Fortran: `comm` is an `integer` handle (`comm%MPI_VAL` with
 * mpi_f08).
 * # Statuses
 * As `sode_comm_create_mpi`. */
int sode_comm_create_mpi_f(MPI_Fint comm, double timeout_s, sode_comm **out);

/* A Cartesian exchange from an MPI Cartesian communicator (MPI_Cart_create):
 * its dimensions, periodicity and this rank's coordinates. `sode` must have
 * been made from `cart` (or a communicator with the same ranks).
 * # Statuses
 * SODE_ERR_ARG when `cart` is MPI_COMM_NULL or has no Cartesian topology,
 * or this process's rank in it differs from its rank in `sode`; otherwise as
 * `sode_exchange_create_cart`. */
int sode_exchange_create_mpi_cart(sode_comm *sode, MPI_Comm cart, const int *halo_lo,
                                  const int *halo_hi, int shape, sode_exchange **out);

/* The same for Fortran.
 * # Statuses
 * As `sode_exchange_create_mpi_cart`. */
int sode_exchange_create_mpi_cart_f(sode_comm *sode, MPI_Fint cart, const int *halo_lo,
                                    const int *halo_hi, int shape, sode_exchange **out);

/* Ends the whole MPI job after a fatal sode error: MPI_Abort on
 * MPI_COMM_WORLD with `code` (the Fortran module gives sode's status) while
 * MPI runs, else exit(code). The Fortran
 * module calls it when a routine without `ierr` fails, as MPI's default
 * error handler would, so the other ranks are not left waiting. */
void sode_mpi_abort(int code);

#ifdef __cplusplus
}
#endif

#endif /* SODE_MPI_H */
