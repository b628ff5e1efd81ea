! A failure without `ierr` ends the whole MPI job through MPI_Abort, as
! MPI's default error handler does, so no rank is left waiting for one
! that stopped. Rank 1 waits on an exchange it never committed (a misuse,
! and no ierr to take the status); rank 0 waits in a barrier it would
! otherwise never leave. ci/capi.sh expects the job to end at once, with
! sode's message and MPI's abort.
!
!   mpirun -n 2 ./fatal
program fatal
  use, intrinsic :: iso_fortran_env, only: output_unit
  use mpi
  use sode
  implicit none
  integer :: ierr, rank, cart
  type(sode_comm) :: sc
  type(sode_exchange) :: x

  call mpi_init(ierr)
  call mpi_cart_create(MPI_COMM_WORLD, 2, [2, 1], [.true., .false.], .false., cart, ierr)
  call mpi_comm_rank(cart, rank, ierr)
  call sode_comm_create_mpi(cart, sc)
  call sode_exchange_create_mpi_cart(sc, cart, [1, 1], [1, 1], SODE_BOX, x)
  if (rank == 1) then
     write (output_unit, '(a)') 'rank 1: waiting on an exchange never committed, without ierr'
     flush (output_unit)
     call sode_wait(x)
     write (output_unit, '(a)') 'rank 1: still running after a fatal error'
  else
     call mpi_barrier(cart, ierr)
     write (output_unit, '(a)') 'rank 0: left the barrier'
  end if
  call mpi_finalize(ierr)
end program fatal
