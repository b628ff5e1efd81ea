! An exchange described by its messages, from Fortran: a code with its
! own decomposition names the boxes it sends and receives, in its arrays'
! own bounds (sode_exchange_create, sode_add_send, sode_add_recv). The
! columns of a 5 x 41 grid are dealt out unevenly (2, 3, 4, ... columns a
! rank, the rest to the last), on a ring: each rank sends its first column
! left (tag 1) and its last right (tag 2), into its neighbours' halo
! columns 0 and w+1. Five fields: real64 (given through a POINTER, as
! models hold fields in derived types), int64 (given by a routine that
! holds it as an assumed-shape dummy), complex(real64) and a derived type (moved as its bytes, sode_add_field_bytes) of 5 x (w+2)
! cells, and a real32 one with a third dimension of 2 that travels whole. Three
! iterations; every halo cell must hold its owner's value. On one rank both
! columns go to itself; on two, both to the one neighbour. Misuse is
! refused by name, in the arrays' own bounds.
!
!   mpirun -n 3 ./explicit2d
program explicit2d
  use, intrinsic :: iso_fortran_env, only: real32, real64, int64, error_unit, output_unit
  use, intrinsic :: iso_c_binding, only: c_loc, c_sizeof, c_double, c_int32_t
  use mpi_f08
  use sode
  implicit none

  integer, parameter :: NX = 5, COLUMNS = 41

  !> A record per cell, moved as its 16 bytes.
  type, bind(c) :: rec
     real(c_double) :: t
     integer(c_int32_t) :: i, g
  end type rec
  integer :: rank, nranks, ierr, wrong, total, told, all_told

  call mpi_init(ierr)
  call mpi_comm_rank(MPI_COMM_WORLD, rank, ierr)
  call mpi_comm_size(MPI_COMM_WORLD, nranks, ierr)
  call run(wrong, told)
  call mpi_allreduce(wrong, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  call mpi_allreduce(told, all_told, 1, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
  if (total /= 0 .or. all_told == 0) then
     if (rank == 0) write (error_unit, '(a, i0, a, l1)') 'explicit2d: ', total, &
          ' halo cells wrong; every misuse named: ', all_told == 1
     call mpi_abort(MPI_COMM_WORLD, 1, ierr)
  end if
  if (rank == 0) write (output_unit, '(a, i0, a)') 'explicit boxes from Fortran on ', nranks, &
       ' ranks (uneven columns, real64, int64, complex, records and real32 x 2): every halo cell its' // &
       ' owner''s value;' // &
       ' every misuse named'
  call mpi_finalize(ierr)

contains

  !> The value global cell (i, g, layer) holds at iteration `it`.
  real(real64) function value(it, i, g, layer)
    integer, intent(in) :: it, i, g, layer
    value = real(it * 100000 + layer * 10000 + i * 100 + g, real64)
  end function value

  !> The first global column of rank `r` (0-based) and its width.
  subroutine columns_of(r, start, width)
    integer, intent(in) :: r
    integer, intent(out) :: start, width
    integer :: q
    start = 1
    do q = 0, r - 1
       start = start + 2 + mod(q, 3)
    end do
    width = 2 + mod(r, 3)
    if (r == nranks - 1) width = COLUMNS - start + 1
  end subroutine columns_of

  !> Whether `ierr` is SODE_ERR_ARG and the message begins with `text`;
  !> prints it when not.
  logical function refused(st, text)
    integer, intent(in) :: st
    character(len=*), intent(in) :: text
    refused = st == SODE_ERR_ARG .and. index(sode_last_error(), text) == 1
    if (.not. refused) write (error_unit, '(a, i0, 4a)') 'rank ', rank, ': expected "', text, &
         '", got: ', sode_last_error()
  end function refused

  !> Adds `k` as a model's routine would, given it as an assumed-shape
  !> dummy (its bounds declared, as the caller's).
  subroutine add_counts(x, k, w)
    type(sode_exchange), intent(inout) :: x
    integer(int64), target, intent(inout) :: k(:, 0:)
    integer, intent(in) :: w
    call sode_add_field(x, k, first=[1, 1], last=[NX, w])
  end subroutine add_counts

  subroutine run(wrong, told)
    integer, intent(out) :: wrong, told
    type(sode_comm) :: sc
    type(sode_exchange) :: x
    real(real64), allocatable, target :: u(:, :), off(:, :)
    real(real64), pointer :: up(:, :)
    integer(int64), allocatable, target :: k(:, :)
    real(real32), allocatable, target :: v(:, :, :)
    complex(real64), allocatable, target :: z(:, :)
    type(rec), allocatable, target :: recs(:, :)
    integer :: start, w, left, right, it, i, j, g, layer, st
    logical :: ok
    character(len=16) :: r_left

    call columns_of(rank, start, w)
    left = modulo(rank - 1, nranks)
    right = modulo(rank + 1, nranks)
    allocate (u(1:NX, 0:w + 1), k(1:NX, 0:w + 1), v(1:NX, 0:w + 1, 1:2), off(0:NX, 0:w + 1))
    allocate (z(1:NX, 0:w + 1), recs(1:NX, 0:w + 1))
    call sode_comm_create_mpi(MPI_COMM_WORLD%MPI_VAL, sc)
    ! Boxes of two dimensions, counted as the arrays are declared.
    call sode_exchange_create(sc, [1, 0], x)
    up => u
    call sode_add_field(x, up, first=[1, 1], last=[NX, w])
    call add_counts(x, k, w)
    call sode_add_field(x, v, first=[1, 1, 1], last=[NX, w, 2])
    call sode_add_field(x, z, first=[1, 1], last=[NX, w])
    call sode_add_field_bytes(x, c_loc(recs), int(c_sizeof(recs(1, 0))), lbound(recs), ubound(recs), &
         first=[1, 1], last=[NX, w])
    call sode_add_send(x, left, 1, [1, 1], [NX, 1])
    call sode_add_send(x, right, 2, [1, w], [NX, w])
    call sode_add_recv(x, right, 1, [1, w + 1], [NX, w + 1])
    call sode_add_recv(x, left, 2, [1, 0], [NX, 0])
    ! A box of one field (k) alone, beside the boxes of every field: the
    ! same column again, so the halos must come out the same.
    call sode_add_send(x, left, 3, [1, 1], [NX, 1], field=2)
    call sode_add_recv(x, right, 3, [1, w + 1], [NX, w + 1], field=2)

    ! Misuse, each refused by name and adding nothing.
    write (r_left, '(i0)') left
    call sode_add_send(x, left, 9, [1, 1], [NX + 1, 1], st)
    ok = refused(st, 'sode_add_send: field 1: dimension 1: the box 1:6 (to or from rank ' // &
         trim(r_left) // ', tag 9) leaves the array''s bounds 1:5')
    call sode_add_recv(x, left, 9, [1, 2], [NX, 1], st)
    ok = refused(st, 'sode_add_recv: dimension 2: the box 2:1 holds no cells') .and. ok
    call sode_add_recv(x, left, 9, [0, 1], [NX, 1], st)
    ok = refused(st, 'sode_add_recv: dimension 1: the box 0:5 starts below the arrays'' lower bound 1') .and. ok
    call sode_add_send(x, left, 9, [1], [NX], st)
    ok = refused(st, 'sode_add_send: first and last hold 1 indices each, but the exchange''s boxes have 2') .and. ok
    call sode_add_send(x, left, 9, [1, 1], [NX, 1], st, field=6)
    ok = refused(st, 'sode_add_send: field 6: the exchange has 5 fields; add the field before its boxes') .and. ok
    call sode_add_field_bytes(x, c_loc(recs), 0, lbound(recs), ubound(recs), first=[1, 1], last=[NX, w], &
         ierr=st)
    ok = refused(st, 'sode_add_field_bytes: elements of 0 bytes') .and. ok
    call sode_add_field_bytes(x, c_loc(recs), 16, lbound(recs), ubound(recs), first=[1, 1], last=[NX + 1, w], &
         ierr=st)
    ok = refused(st, 'sode_add_field_bytes: dimension 1: the owned cells 1:6, with 0 halo cells below and' // &
         ' 0 above, need the bounds 1:6; the array''s are 1:5') .and. ok
    call sode_add_recv(x, left, 9, [1, 0], [NX, 0], st, field=0)
    ok = refused(st, 'sode_add_recv: field 0: fields are numbered from 1 in the order added') .and. ok
    call sode_add_field(x, off, first=[1, 1], last=[NX, w], ierr=st)
    ok = refused(st, 'sode_add_field: dimension 1: the array''s lower bound is 0, but the exchange''s boxes' // &
         ' count from 1') .and. ok
    call sode_add_field(x, off(0:NX:2, :), first=[1, 1], last=[2, w], ierr=st)
    ok = refused(st, 'sode_add_field: the array is not contiguous in memory') .and. ok
    told = merge(1, 0, ok)

    call sode_commit(x)
    wrong = 0
    do it = 1, 3
       u = -1
       k = -1
       v = -1
       z = (-1, -1)
       recs = rec(-1, -1, -1)
       do layer = 1, 2
          do j = 1, w
             do i = 1, NX
                if (layer == 1) u(i, j) = value(it, i, start + j - 1, 0)
                if (layer == 1) k(i, j) = int(value(it, i, start + j - 1, 0), int64)
                if (layer == 1) z(i, j) = cmplx(value(it, i, start + j - 1, 0), -value(it, i, start + j - 1, 3), real64)
                if (layer == 1) recs(i, j) = rec(value(it, i, start + j - 1, 4), i, start + j - 1)
                v(i, j, layer) = real(value(it, i, start + j - 1, layer), real32)
             end do
          end do
       end do
       call sode_start(x)
       call sode_wait(x)
       do j = 0, w + 1, w + 1
          g = modulo(start + j - 2, COLUMNS) + 1
          do i = 1, NX
             if (u(i, j) /= value(it, i, g, 0)) wrong = wrong + 1
             if (k(i, j) /= int(value(it, i, g, 0), int64)) wrong = wrong + 1
             if (z(i, j) /= cmplx(value(it, i, g, 0), -value(it, i, g, 3), real64)) wrong = wrong + 1
             if (recs(i, j)%t /= value(it, i, g, 4) .or. recs(i, j)%i /= i .or. recs(i, j)%g /= g) &
                  wrong = wrong + 1
             do layer = 1, 2
                if (v(i, j, layer) /= real(value(it, i, g, layer), real32)) wrong = wrong + 1
             end do
          end do
       end do
    end do
    if (wrong /= 0) write (error_unit, '(a, i0, a, i0, a)') 'rank ', rank, ': ', wrong, ' halo cells wrong'
    call sode_exchange_free(x)
    call sode_comm_free(sc)
  end subroutine run

end program explicit2d
