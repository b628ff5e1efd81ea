! A Runge-Kutta code's halo exchange from Fortran: three stage arrays
! through one committed exchange (sode_start_arrays), checked bit for bit
! against the same integration of the whole grid in one process.
!
!   mpirun -n 4 ./rk2d
!
! The heat equation u_t = L(u) (a 9-point Laplacian, so corners count) on
! a periodic 2-D grid that does not divide evenly among the ranks,
! integrated by the three-stage strong-stability-preserving scheme:
!   s1 = u + dt L(u)
!   s2 = 3/4 u + 1/4 (s1 + dt L(s1))
!   u  = 1/3 u + 2/3 (s2 + dt L(s2))
! Each L needs the halo of its own stage array: the exchange is committed
! once, on u with s1 and s2 lent (sode_lend_arrays), and started on u, s1
! and s2 in turn, each given as sode_array(a), which sode checks against
! the field: an array of another kind or shape, or not contiguous, is
! refused before anything starts.
program rk2d
  use, intrinsic :: iso_fortran_env, only: real32, real64, int64, error_unit, output_unit
  use mpi_f08
  use sode_f08
  implicit none

  integer, parameter :: NX = 50, NY = 37, STEPS = 20
  real(real64), parameter :: DT = 0.05d0
  type(MPI_Comm) :: cart
  type(sode_comm) :: sc
  type(sode_exchange) :: x
  integer :: nranks, me, ierr, dims(2), coords(2), start(2), own(2), i, j, step, wrong, total
  integer(int64) :: staged
  real(real64), allocatable, target :: u(:, :), s1(:, :), s2(:, :)
  real(real64), allocatable :: lu(:, :), g(:, :), g1(:, :), g2(:, :), gl(:, :)
  real(real64), allocatable, target :: wider(:, :)
  real(real32), allocatable, target :: single(:, :)
  real(real64), pointer :: nothing(:, :) => null()

  call mpi_init(ierr)
  call mpi_comm_size(MPI_COMM_WORLD, nranks, ierr)
  dims = 0
  call mpi_dims_create(nranks, 2, dims, ierr)
  call mpi_cart_create(MPI_COMM_WORLD, 2, dims, [.true., .true.], .false., cart, ierr)
  call mpi_comm_rank(cart, me, ierr)
  call mpi_cart_coords(cart, me, 2, coords, ierr)
  call block(NX, dims(1), coords(1), start(1), own(1))
  call block(NY, dims(2), coords(2), start(2), own(2))

  allocate (u(0:own(1) + 1, 0:own(2) + 1))
  allocate (s1, s2, lu, mold=u)
  u = 0
  lu = 0
  do j = 1, own(2)
     do i = 1, own(1)
        u(i, j) = initial(start(1) + i, start(2) + j)
     end do
  end do

  call sode_comm_create_mpi(cart, sc)
  call sode_exchange_create_mpi_cart(sc, cart, [1, 1], [1, 1], SODE_BOX, x)
  call sode_add_field(x, u, first=[1, 1], last=own)
  ! The stage arrays lent too: over RDMA their faces then travel in place
  ! as u's do (a start on an array not lent goes through sode's buffers).
  call sode_lend_arrays(x, [sode_array(s1)])
  call sode_lend_arrays(x, [sode_array(s2)])
  call sode_commit(x)
  ! A misuse is told in the module's names, not the C library's.
  call sode_add_field(x, s1, first=[1, 1], last=own, ierr=ierr)
  if (ierr /= SODE_ERR_STATE .or. index(sode_last_error(), 'before sode_commit') == 0 &
       .or. index(sode_last_error(), 'sode_exchange') /= 0) then
     write (error_unit, '(2a)') 'rk2d: a field after commit gave: ', sode_last_error()
     call mpi_abort(MPI_COMM_WORLD, 1, ierr)
  end if
  ! Arrays unlike the field are refused before sode touches them, naming
  ! the field and what differs; nothing starts.
  allocate (single(0:own(1) + 1, 0:own(2) + 1), wider(0:own(1) + 2, 0:own(2) + 1))
  call refused('a real32 array', 'field 1 holds real64, the array given holds real32', [sode_array(single)])
  call refused('a wider array', 'field 1, dimension 1: the array given has', [sode_array(wider)])
  call refused('a strided section', 'the array given for field 1 is not contiguous', [sode_array(s1(::2, :))])
  call refused('a pointer not associated', 'an entry of the list is not an array: a POINTER not associated', &
       [sode_array(nothing)])
  call sode_start_fields(x, [2], [sode_array(s1)], ierr)
  call expect(ierr, 'a field that does not exist', 'there is no field 2 (fields added: 1)')
  call sode_lend_arrays(x, [sode_array(single)], ierr)
  call expect(ierr, 'lending a real32 array', 'sode_lend_arrays: field 1 holds real64')

  do step = 1, STEPS
     call halo(u)
     call laplacian(u, lu, own)
     s1 = u + DT * lu
     call halo(s1)
     call laplacian(s1, lu, own)
     s2 = 0.75d0 * u + 0.25d0 * (s1 + DT * lu)
     call halo(s2)
     call laplacian(s2, lu, own)
     u = u / 3 + 2 * (s2 + DT * lu) / 3
  end do

  ! The same integration of the whole grid, its periodic halo copied.
  allocate (g(0:NX + 1, 0:NY + 1))
  allocate (g1, g2, gl, mold=g)
  g = 0
  gl = 0
  do j = 1, NY
     do i = 1, NX
        g(i, j) = initial(i, j)
     end do
  end do
  do step = 1, STEPS
     call wrap(g)
     call laplacian(g, gl, [NX, NY])
     g1 = g + DT * gl
     call wrap(g1)
     call laplacian(g1, gl, [NX, NY])
     g2 = 0.75d0 * g + 0.25d0 * (g1 + DT * gl)
     call wrap(g2)
     call laplacian(g2, gl, [NX, NY])
     g = g / 3 + 2 * (g2 + DT * gl) / 3
  end do

  wrong = 0
  do j = 1, own(2)
     do i = 1, own(1)
        if (u(i, j) /= g(start(1) + i, start(2) + j)) wrong = wrong + 1
     end do
  end do
  call mpi_allreduce(wrong, total, 1, MPI_INTEGER, MPI_SUM, cart, ierr)
  if (total /= 0) then
     if (me == 0) write (error_unit, '(a, i0, a)') 'rk2d: ', total, ' cells differ from the one-process solve'
     call mpi_abort(MPI_COMM_WORLD, 1, ierr)
  end if
  ! Every stage lent: no start went through sode's buffers.
  call sode_get_staged_starts(x, staged)
  if (staged /= 0) then
     write (error_unit, '(a, i0, a)') 'rk2d: ', staged, ' starts on lent stage arrays went through sode''s buffers'
     call mpi_abort(MPI_COMM_WORLD, 1, ierr)
  end if
  if (me == 0) write (output_unit, '(a, i0, a, i0, a, i0, a)') 'ok grid ', dims(1), 'x', dims(2), &
       ': ', STEPS, ' SSP-RK3 steps, u, s1 and s2 through one exchange, every cell equal to one process''s'
  call sode_exchange_free(x)
  call sode_comm_free(sc)
  call mpi_comm_free(cart, ierr)
  call mpi_finalize(ierr)

contains

  !> Fills the halo of `a` (u or a stage array) through the one exchange.
  subroutine halo(a)
    real(real64), intent(inout), target :: a(:, :)
    call sode_start_arrays(x, [sode_array(a)])
    call sode_wait(x)
  end subroutine halo

  !> sode_start_arrays on `arrays` must fail with SODE_ERR_ARG and say `why`.
  subroutine refused(what, why, arrays)
    character(len=*), intent(in) :: what, why
    type(sode_array_ref), intent(in) :: arrays(:)
    integer :: rc
    call sode_start_arrays(x, arrays, rc)
    call expect(rc, what, 'sode_start_arrays: ' // why)
  end subroutine refused

  !> A refusal `rc` of `what` must be SODE_ERR_ARG with a message holding `why`.
  subroutine expect(rc, what, why)
    integer, intent(in) :: rc
    character(len=*), intent(in) :: what, why
    integer :: e
    if (rc == SODE_ERR_ARG .and. index(sode_last_error(), why) > 0) return
    write (error_unit, '(5a, i0, 2a)') 'rk2d: ', what, ' should be refused with "', why, '"; got status ', &
         rc, ': ', sode_last_error()
    call mpi_abort(MPI_COMM_WORLD, 1, e)
  end subroutine expect

  !> The halo of the whole grid: the periodic copy of its edges.
  subroutine wrap(a)
    real(real64), intent(inout) :: a(0:, 0:)
    a(0, :) = a(NX, :)
    a(NX + 1, :) = a(1, :)
    a(:, 0) = a(:, NY)
    a(:, NY + 1) = a(:, 1)
  end subroutine wrap

  subroutine laplacian(a, l, n)
    real(real64), intent(in) :: a(0:, 0:)
    real(real64), intent(out) :: l(0:, 0:)
    integer, intent(in) :: n(2)
    integer :: i, j
    real(real64) :: faces, corners
    do j = 1, n(2)
       do i = 1, n(1)
          faces = a(i - 1, j) + a(i + 1, j) + a(i, j - 1) + a(i, j + 1)
          corners = a(i - 1, j - 1) + a(i + 1, j - 1) + a(i - 1, j + 1) + a(i + 1, j + 1)
          l(i, j) = (4 * faces + corners - 20 * a(i, j)) / 6
       end do
    end do
  end subroutine laplacian

  real(real64) function initial(i, j)
    integer, intent(in) :: i, j
    initial = sin(0.3d0 * i) * cos(0.2d0 * j) + 0.01d0 * mod(i * 7 + j * 3, 11)
  end function initial

  !> This rank's cells `start + 1 .. start + size` of `n` split into `p`
  !> blocks, the first `mod(n, p)` one cell larger.
  subroutine block(n, p, c, start, size)
    integer, intent(in) :: n, p, c
    integer, intent(out) :: start, size
    size = n / p
    start = c * size + min(c, mod(n, p))
    if (c < mod(n, p)) size = size + 1
  end subroutine block

end program rk2d
