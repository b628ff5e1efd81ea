! sode for codes on mpi_f08: `use sode_f08` in place of `use sode`. It is
! the sode module, whose calls that take an MPI communicator also take a
! type(MPI_Comm):
!
!   use mpi_f08
!   use sode_f08
!   call sode_comm_create_mpi(MPI_COMM_WORLD, sc)
!   call sode_exchange_create_mpi_cart(sc, cart, [1, 1], [1, 1], SODE_BOX, x)
!
! Built and installed beside sode.mod when the MPI has the mpi_f08 module.
module sode_f08
  use, intrinsic :: iso_fortran_env, only: real64
  use mpi_f08, only: MPI_Comm
  use sode, base_comm_create_mpi => sode_comm_create_mpi, &
       base_exchange_create_mpi_cart => sode_exchange_create_mpi_cart
  implicit none
  private :: base_comm_create_mpi, base_exchange_create_mpi_cart
  private :: comm_create_mpi_int, comm_create_mpi_f08
  private :: create_mpi_cart_int, create_mpi_cart_f08

  !> A sode communicator from an MPI communicator: an integer handle, as
  !> with `use sode`, or a type(MPI_Comm).
  interface sode_comm_create_mpi
     module procedure comm_create_mpi_int, comm_create_mpi_f08
  end interface sode_comm_create_mpi

  !> An exchange on an MPI Cartesian communicator: an integer handle, as
  !> with `use sode`, or a type(MPI_Comm).
  interface sode_exchange_create_mpi_cart
     module procedure create_mpi_cart_int, create_mpi_cart_f08
  end interface sode_exchange_create_mpi_cart

contains

  subroutine comm_create_mpi_int(comm, sc, ierr, timeout)
    integer, intent(in) :: comm
    type(sode_comm), intent(out) :: sc
    integer, intent(out), optional :: ierr
    real(real64), intent(in), optional :: timeout
    call base_comm_create_mpi(comm, sc, ierr, timeout)
  end subroutine comm_create_mpi_int

  subroutine comm_create_mpi_f08(comm, sc, ierr, timeout)
    type(MPI_Comm), intent(in) :: comm
    type(sode_comm), intent(out) :: sc
    integer, intent(out), optional :: ierr
    real(real64), intent(in), optional :: timeout
    call base_comm_create_mpi(comm%MPI_VAL, sc, ierr, timeout)
  end subroutine comm_create_mpi_f08

  subroutine create_mpi_cart_int(sc, cart, halo_lo, halo_hi, shape, x, ierr)
    type(sode_comm), intent(in) :: sc
    integer, intent(in) :: cart, halo_lo(:), halo_hi(:), shape
    type(sode_exchange), intent(out) :: x
    integer, intent(out), optional :: ierr
    call base_exchange_create_mpi_cart(sc, cart, halo_lo, halo_hi, shape, x, ierr)
  end subroutine create_mpi_cart_int

  subroutine create_mpi_cart_f08(sc, cart, halo_lo, halo_hi, shape, x, ierr)
    type(sode_comm), intent(in) :: sc
    type(MPI_Comm), intent(in) :: cart
    integer, intent(in) :: halo_lo(:), halo_hi(:), shape
    type(sode_exchange), intent(out) :: x
    integer, intent(out), optional :: ierr
    call base_exchange_create_mpi_cart(sc, cart%MPI_VAL, halo_lo, halo_hi, shape, x, ierr)
  end subroutine create_mpi_cart_f08

end module sode_f08
