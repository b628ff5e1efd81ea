! The halo exchange of a 3-D stencil code through sode (`use sode_f08`: the
! sode module, taking mpi_f08's type(MPI_Comm) as well as integer handles)
! and through MPI (Isend/Irecv of subarrays), compared cell for cell, bit
! for bit, and against the values the neighbours own.
!
!   mpirun -n 4 ./stencil3d
!   mpirun -n 4 ./stencil3d --grid 2x2x1   every configuration on that grid only
!
! Process grids 1xNx1, Nx1x1 (and 2x2x1 for 4 ranks); periodic on no, all
! or two axes; star and box stencils; a real64 and an int32 field with
! unequal halo widths per axis and side, declared with their own lower
! bounds; a global grid that does not divide evenly. Halo cells without a
! neighbour keep their sentinel. Every configuration runs twice: on the
! program's arrays, and on arrays sode keeps in shared memory
! (sode_set_shared_fields, two sets exchanged in turn). On the program's
! arrays, the second iteration exchanges a second pair of arrays through
! the same committed exchange (sode_start_arrays, as a Runge-Kutta stage
! would) and checks that the pair it was committed with is left alone.
module stencil3d_run
  use, intrinsic :: iso_c_binding, only: c_loc
  use, intrinsic :: iso_fortran_env, only: real64, int32, int64, output_unit, error_unit
  use mpi_f08
  use sode_f08
  implicit none

  integer, parameter :: GLOBAL(3) = [11, 9, 6]
  integer, parameter :: U_LO(3) = [1, 2, 1], U_HI(3) = [2, 1, 1]
  integer, parameter :: V_LO(3) = [1, 1, 0], V_HI(3) = [0, 1, 1]
  real(real64), parameter :: U_SENTINEL = -999.5d0
  integer(int32), parameter :: V_SENTINEL = -77
  logical, parameter :: PERIODS(3, 3) = reshape([.false., .false., .false., &
       .true., .true., .true., .true., .false., .true.], [3, 3])

  integer :: rank
  ! The configuration being run.
  integer :: dims(3), coords(3), start(3), own(3), filled
  type(MPI_Comm) :: cart
  logical :: periodic(3), is_box
  ! Whether sode keeps the fields (us and vs then point into its sets).
  logical :: shared = .false.
  real(real64), pointer, contiguous :: us(:, :, :) => null()
  complex(real64), pointer, contiguous :: zs(:, :, :) => null()
  real(real64), allocatable, target :: um(:, :, :)
  ! A plain pointer (not declared contiguous), as a model's derived types
  ! hold their fields: sode_add_field and sode_shared_field take it.
  integer(int32), pointer :: vs(:, :, :) => null()
  integer(int32), allocatable, target :: vm(:, :, :)
  ! The second pair of arrays (a Runge-Kutta stage), and the pair the
  ! exchange was committed with while the second stands in for it.
  real(real64), pointer, contiguous :: u2(:, :, :) => null(), u_own(:, :, :) => null()
  integer(int32), pointer, contiguous :: v2(:, :, :) => null(), v_own(:, :, :) => null()
  real(real64), allocatable :: u_before(:, :, :)
  integer(int32), allocatable :: v_before(:, :, :)

contains


  !> Stops unless the call just made failed with SODE_ERR_ARG and a
  !> message starting with `text`.
  subroutine refused(ierr, text)
    integer, intent(in) :: ierr
    character(len=*), intent(in) :: text
    if (ierr == SODE_ERR_ARG .and. index(sode_last_error(), text) == 1) return
    write (error_unit, '(a, i0, 4a)') 'rank ', rank, ': expected "', text, '", got: ', sode_last_error()
    error stop 1
  end subroutine refused

  real(real64) function u_value(it, gc)
    integer, intent(in) :: it, gc(3)
    u_value = it * 1d6 + gc(1) * 1d4 + gc(2) * 1d2 + gc(3) + 0.25d0
  end function u_value

  integer(int32) function v_value(it, gc)
    integer, intent(in) :: it, gc(3)
    v_value = int(it * 1000000 + gc(1) * 10000 + gc(2) * 100 + gc(3) + 7, int32)
  end function v_value

  subroutine block(n, np, c, start, own)
    integer, intent(in) :: n, np, c
    integer, intent(out) :: start, own
    integer :: q, r
    q = n / np
    r = mod(n, np)
    start = c * q + min(c, r)
    own = q
    if (c < r) own = q + 1
  end subroutine block

  !> The global cell a local one stands for; whether anyone owns it; on how
  !> many axes it lies outside the owned box.
  logical function global_of(idx, start, own, periodic, gc, outside)
    integer, intent(in) :: idx(3), start(3), own(3)
    logical, intent(in) :: periodic(3)
    integer, intent(out) :: gc(3), outside
    integer :: a
    global_of = .true.
    outside = 0
    do a = 1, 3
       gc(a) = start(a) + idx(a) - 1
       if (idx(a) < 1 .or. idx(a) > own(a)) outside = outside + 1
       if (gc(a) < 0 .or. gc(a) >= GLOBAL(a)) then
          if (.not. periodic(a)) global_of = .false.
          gc(a) = modulo(gc(a), GLOBAL(a))
       end if
    end do
  end function global_of

  subroutine run(grid, periods_of, box)
    integer, intent(in) :: grid(3)
    logical, intent(in) :: periods_of(3), box
    integer :: a, it, shape, ierr
    type(sode_comm) :: sc
    type(sode_exchange) :: x
    integer :: me, total_filled, cells, total_cells
    integer :: ulb(3), uub(3), vlb(3), vub(3)
    character(len=5) :: name

    dims = grid
    periodic = periods_of
    is_box = box
    call mpi_cart_create(MPI_COMM_WORLD, 3, dims, periodic, .true., cart, ierr)
    call mpi_comm_rank(cart, me, ierr)
    call mpi_cart_coords(cart, me, 3, coords, ierr)
    do a = 1, 3
       call block(GLOBAL(a), dims(a), coords(a), start(a), own(a))
    end do
    ulb = 1 - U_LO
    uub = own + U_HI
    vlb = 1 - V_LO
    vub = own + V_HI
    allocate (um(ulb(1):uub(1), ulb(2):uub(2), ulb(3):uub(3)))
    allocate (vm(vlb(1):vub(1), vlb(2):vub(2), vlb(3):vub(3)))
    if (.not. shared) then
       allocate (us, mold=um)
       allocate (vs, mold=vm)
       allocate (u2, mold=um)
       allocate (v2, mold=vm)
    end if

    shape = SODE_STAR
    if (is_box) shape = SODE_BOX
    call sode_comm_create_mpi(cart%MPI_VAL, sc)
    call check_reorder(sc, shape)
    ! The communicator as an integer handle above, as a type(MPI_Comm) here.
    call sode_exchange_create_mpi_cart(sc, cart, max(U_LO, V_LO), max(U_HI, V_HI), shape, x)
    if (shared) then
       call sode_set_shared_fields(x, 2)
       call sode_add_shared_field(x, SODE_REAL64, ulb, uub, first=[1, 1, 1], last=own, &
            halo_lo=U_LO, halo_hi=U_HI)
       call sode_add_shared_field(x, SODE_INT32, vlb, vub, first=[1, 1, 1], last=own, &
            halo_lo=V_LO, halo_hi=V_HI)
    else
       call sode_add_field(x, us, first=[1, 1, 1], last=own, halo_lo=U_LO, halo_hi=U_HI)
       call sode_add_field(x, vs, first=[1, 1, 1], last=own, halo_lo=V_LO, halo_hi=V_HI)
    end if
    ! The defaults, said out loud: channels by locality, faces in place
    ! over RDMA where their runs are long.
    call sode_set_transport(x, SODE_TRANSPORT_AUTO)
    call sode_set_zero_copy(x, SODE_ZERO_COPY_AUTO)
    call sode_commit(x)
    ! Every rank has a neighbour but on one process without a periodic axis.
    if (index(sode_describe(x), 'rank ') /= 1 .and. (product(dims) > 1 .or. any(periodic))) then
       write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': no description of the neighbours: ', &
            sode_describe(x)
       error stop 1
    end if

    ! Sets and fields count from 1: set 3 of 2 is refused by its number.
    if (shared) then
       call sode_start_set(x, 3, ierr)
       if (ierr /= SODE_ERR_ARG .or. index(sode_last_error(), &
            'sode_start_set: set 3: the exchange keeps 2 sets (numbered from 1)') /= 1) then
          write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': set 3 of 2 gave: ', sode_last_error()
          error stop 1
       end if
       ! A pointer unlike its field is refused: another type, or bounds of
       ! another extent, would reach past the field's memory.
       call sode_shared_field(x, 1, 2, ulb, uub, us, ierr)
       call refused(ierr, 'sode_shared_field: field 2 holds int32, the pointer given points to real64')
       call sode_shared_field(x, 1, 1, ulb, uub, zs, ierr)
       call refused(ierr, 'sode_shared_field: field 1 holds real64, the pointer given points to complex(real64)')
       call sode_shared_field(x, 1, 1, ulb, uub + [0, 1, 0], us, ierr)
       call refused(ierr, 'sode_shared_field: field 1, dimension 2: the bounds given hold')
    end if

    filled = 0
    cells = 0
    do it = 1, 3
       if (shared) then
          call sode_shared_field(x, mod(it, 2) + 1, 1, ulb, uub, us)
          call sode_shared_field(x, mod(it, 2) + 1, 2, vlb, vub, vs)
       else if (it == 2) then
          u_before = us
          v_before = vs
          u_own => us
          v_own => vs
          us => u2
          vs => v2
       end if
       call fill_u(us, it)
       call fill_u(um, it)
       call fill_v(vs, it)
       call fill_v(vm, it)
       if (shared) then
          call sode_start_set(x, mod(it, 2) + 1)
       else if (it == 2) then
          ! Over RDMA with faces in place, these go through sode's buffers.
          call sode_start_arrays(x, [c_loc(us), c_loc(vs)], ierr)
          if (ierr /= SODE_OK) then
             write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': sode_start_arrays: ', sode_last_error()
             call mpi_abort(MPI_COMM_WORLD, 1, ierr)
          end if
       else
          call sode_start(x)
       end if
       ! ierr positional, the timeout by keyword; once with none: the
       ! job's default (SODE_TIMEOUT, else no deadline).
       if (it == 3) then
          call sode_wait(x, ierr)
       else
          call sode_wait(x, ierr, timeout=30d0)
       end if
       if (ierr /= SODE_OK) then
          write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': sode_wait: ', sode_last_error()
          call mpi_abort(MPI_COMM_WORLD, 1, ierr)
       end if
       call mpi_exchange()
       if (any(transfer(us, [0_int64]) /= transfer(um, [0_int64])) .or. any(vs /= vm)) then
          write (error_unit, '(a, i0, a)') 'rank ', rank, ': sode and MPI differ'
          call mpi_abort(MPI_COMM_WORLD, 1, ierr)
       end if
       call check_u(us, it)
       call check_v(vs, it)
       if (.not. shared .and. it == 2 .and. associated(us, u2)) then
          if (any(transfer(u_own, [0_int64]) /= transfer(u_before, [0_int64])) .or. &
               any(v_own /= v_before)) then
             write (error_unit, '(a, i0, a)') 'rank ', rank, &
                  ': the exchange started on other arrays changed the ones it was committed with'
             call mpi_abort(MPI_COMM_WORLD, 1, ierr)
          end if
          us => u_own
          vs => v_own
       end if
       cells = cells + int(product(ubound(us) - lbound(us) + 1) + product(ubound(vs) - lbound(vs) + 1))
    end do
    call mpi_reduce(filled, total_filled, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
    call mpi_reduce(cells, total_cells, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
    name = 'star'
    if (is_box) name = 'box'
    if (shared) name = trim(name) // '+'
    if (rank == 0) then
       write (output_unit, '(a, i0, a, i0, a, i0, a, 3l1, 1x, a, a, i0, a, i0, a)') 'ok grid ', dims(1), 'x', &
            dims(2), 'x', dims(3), ' periodic ', periodic, trim(name), ': ', total_cells, &
            ' cells equal to MPI''s, bit for bit, ', total_filled, ' halo cells filled'
    end if
    call check_stats(x, 3)
    call sode_exchange_free(x)
    call sode_comm_free(sc)
    call mpi_comm_free(cart, ierr)
    if (shared) then
       nullify (us, vs)
    else
       deallocate (us, vs, u2, v2)
    end if
    deallocate (um, vm)

  end subroutine run

  !> sode_comm_reorder_cart from Fortran: rank r of the reordered
  !> communicator gets sode's coordinates of r (first axis fastest); a
  !> misdescribed grid is a named error on every rank.
  subroutine check_reorder(sc, shape)
    type(sode_comm), intent(in) :: sc
    integer, intent(in) :: shape
    type(sode_comm) :: r
    integer :: c(3), rr, me, st, a, rest
    call sode_comm_rank(sc, me)
    call sode_comm_reorder_cart(sc, dims, periodic, GLOBAL / dims, 1, shape, 16, c, r)
    call sode_comm_rank(r, rr)
    rest = rr
    do a = 1, 3
       if (c(a) /= mod(rest, dims(a))) then
          write (error_unit, '(a, i0, a, 3i3)') 'rank ', me, ': reordered coordinates ', c
          error stop 1
       end if
       rest = rest / dims(a)
    end do
    call sode_comm_free(r)
    call sode_comm_reorder_cart(sc, dims(1:2), periodic, GLOBAL / dims, 1, shape, 16, c, r, st)
    if (st /= SODE_ERR_ARG .or. index(sode_last_error(), 'one value per axis') == 0) then
       write (error_unit, '(a, i0, a)') 'rank ', me, ': a short dims gave ' // sode_last_error()
       error stop 1
    end if
  end subroutine check_reorder


  subroutine fill_u(f, it)
    real(real64), intent(out) :: f(lbound(us, 1):, lbound(us, 2):, lbound(us, 3):)
    integer, intent(in) :: it
    integer :: i, j, k, gc(3), outside
    logical :: owned
    do k = lbound(f, 3), ubound(f, 3)
       do j = lbound(f, 2), ubound(f, 2)
          do i = lbound(f, 1), ubound(f, 1)
             owned = global_of([i, j, k], start, own, periodic, gc, outside)
             f(i, j, k) = U_SENTINEL
             if (outside == 0) f(i, j, k) = u_value(it, gc)
          end do
       end do
    end do
  end subroutine fill_u

  subroutine fill_v(f, it)
    integer(int32), intent(out) :: f(lbound(vs, 1):, lbound(vs, 2):, lbound(vs, 3):)
    integer, intent(in) :: it
    integer :: i, j, k, gc(3), outside
    logical :: owned
    do k = lbound(f, 3), ubound(f, 3)
       do j = lbound(f, 2), ubound(f, 2)
          do i = lbound(f, 1), ubound(f, 1)
             owned = global_of([i, j, k], start, own, periodic, gc, outside)
             f(i, j, k) = V_SENTINEL
             if (outside == 0) f(i, j, k) = v_value(it, gc)
          end do
       end do
    end do
  end subroutine fill_v

  !> A halo cell is reached when its owner exists and the stencil reads
  !> it (a star reads no edge or corner).
  logical function reached(idx, gc, outside)
    integer, intent(in) :: idx(3)
    integer, intent(out) :: gc(3), outside
    reached = global_of(idx, start, own, periodic, gc, outside)
    reached = reached .and. (outside < 2 .or. is_box)
  end function reached

  subroutine check_u(f, it)
    real(real64), intent(in) :: f(lbound(us, 1):, lbound(us, 2):, lbound(us, 3):)
    integer, intent(in) :: it
    integer :: i, j, k, gc(3), outside
    real(real64) :: want
    do k = lbound(f, 3), ubound(f, 3)
       do j = lbound(f, 2), ubound(f, 2)
          do i = lbound(f, 1), ubound(f, 1)
             want = U_SENTINEL
             if (reached([i, j, k], gc, outside)) want = u_value(it, gc)
             if (f(i, j, k) /= want) call wrong('real64', [i, j, k])
             if (outside > 0 .and. f(i, j, k) /= U_SENTINEL) filled = filled + 1
          end do
       end do
    end do
  end subroutine check_u

  subroutine check_v(f, it)
    integer(int32), intent(in) :: f(lbound(vs, 1):, lbound(vs, 2):, lbound(vs, 3):)
    integer, intent(in) :: it
    integer :: i, j, k, gc(3), outside
    integer(int32) :: want
    do k = lbound(f, 3), ubound(f, 3)
       do j = lbound(f, 2), ubound(f, 2)
          do i = lbound(f, 1), ubound(f, 1)
             want = V_SENTINEL
             if (reached([i, j, k], gc, outside)) want = v_value(it, gc)
             if (f(i, j, k) /= want) call wrong('int32', [i, j, k])
             if (outside > 0 .and. f(i, j, k) /= V_SENTINEL) filled = filled + 1
          end do
       end do
    end do
  end subroutine check_v

  subroutine wrong(what, idx)
    character(len=*), intent(in) :: what
    integer, intent(in) :: idx(3)
    integer :: ierr2
    write (error_unit, '(a, i0, 3a, 3(1x, i0))') 'rank ', rank, ': the ', what, ' field is wrong at', idx
    call mpi_abort(MPI_COMM_WORLD, 1, ierr2)
  end subroutine wrong

  !> The same exchange through MPI: Isend/Irecv of subarrays.
  !> sode_get_stats after `iterations`: every neighbour on a channel, the
  !> totals the neighbours' bytes per iteration times the iterations.
  subroutine check_stats(x, iterations)
    type(sode_exchange), intent(in) :: x
    integer, intent(in) :: iterations
    type(sode_stats) :: st
    integer :: i, peer, ierr2
    character(len=:), allocatable :: channel
    integer(int64) :: sent, received, total_sent
    call sode_get_stats(x, st)
    total_sent = 0
    do i = 1, st%neighbours
       call sode_get_neighbour_stats(x, i, peer, channel, sent, received)
       if (channel /= 'local') total_sent = total_sent + sent
       if (all(channel /= ['local', 'shm  ', 'rdma ', 'tcp  ']) .or. peer < 0 .or. sent <= 0) then
          write (error_unit, '(a, i0, 3a, i0)') 'rank ', rank, ': neighbour over "', channel, '" of rank ', peer
          call mpi_abort(MPI_COMM_WORLD, 1, ierr2)
       end if
    end do
    if (st%exchanges /= iterations .or. st%bytes_sent /= total_sent * iterations &
         .or. st%start_seconds + st%wait_seconds <= 0 .or. st%neighbours < 0) then
       write (error_unit, '(a, i0, a, i0, a, i0, a, i0)') 'rank ', rank, ': stats: ', st%exchanges, &
            ' exchanges, ', st%bytes_sent, ' bytes sent, neighbours sent ', total_sent
       call mpi_abort(MPI_COMM_WORLD, 1, ierr2)
    end if
    call sode_get_neighbour_stats(x, st%neighbours + 1, peer, channel, sent, received, ierr2)
    if (ierr2 /= SODE_ERR_ARG) then
       write (error_unit, '(a, i0, a)') 'rank ', rank, ': a neighbour past the last was not refused'
       call mpi_abort(MPI_COMM_WORLD, 1, ierr2)
    end if
  end subroutine check_stats

  subroutine mpi_exchange()
    integer :: n, o(3), c(3), peer, nonzero, d1, d2, d3, ierr2
    type(MPI_Request) :: req(2 * 26 * 2)
    type(MPI_Datatype) :: st, rt
    logical :: exists, has_send, has_recv
    n = 0
    do d1 = -1, 1
       do d2 = -1, 1
          do d3 = -1, 1
             o = [d1, d2, d3]
             nonzero = count(o /= 0)
             if (nonzero == 0 .or. (nonzero > 1 .and. .not. is_box)) cycle
             c = coords + o
             exists = all(c >= 0 .and. c < dims .or. periodic)
             if (.not. exists) cycle
             c = modulo(c, dims)
             call mpi_cart_rank(cart, c, peer, ierr2)
             call regions(U_LO, U_HI, shape_of(lbound(um), ubound(um)), MPI_DOUBLE_PRECISION)
             if (has_send) call mpi_isend(um, 1, st, peer, tag(o), cart, req(n + 1), ierr2)
             if (has_send) n = n + 1
             if (has_recv) call mpi_irecv(um, 1, rt, peer, tag(-o), cart, req(n + 1), ierr2)
             if (has_recv) n = n + 1
             call free_types()
             call regions(V_LO, V_HI, shape_of(lbound(vm), ubound(vm)), MPI_INTEGER4)
             if (has_send) call mpi_isend(vm, 1, st, peer, 100 + tag(o), cart, req(n + 1), ierr2)
             if (has_send) n = n + 1
             if (has_recv) call mpi_irecv(vm, 1, rt, peer, 100 + tag(-o), cart, req(n + 1), ierr2)
             if (has_recv) n = n + 1
             call free_types()
          end do
       end do
    end do
    call mpi_waitall(n, req, MPI_STATUSES_IGNORE, ierr2)
  contains
    function shape_of(lb, ub) result(s)
      integer, intent(in) :: lb(3), ub(3)
      integer :: s(3)
      s = ub - lb + 1
    end function shape_of

    !> The send and receive subarrays towards `o`, committed.
    subroutine regions(lo, hi, sizes, dtype)
      integer, intent(in) :: lo(3), hi(3), sizes(3)
      type(MPI_Datatype), intent(in) :: dtype
      integer :: ss(3), sn(3), rs(3), rn(3), a2, ierr3
      do a2 = 1, 3
         select case (o(a2))
         case (-1)
            ss(a2) = lo(a2); sn(a2) = hi(a2); rs(a2) = 0; rn(a2) = lo(a2)
         case (1)
            ss(a2) = own(a2); sn(a2) = lo(a2); rs(a2) = lo(a2) + own(a2); rn(a2) = hi(a2)
         case default
            ss(a2) = lo(a2); sn(a2) = own(a2); rs(a2) = lo(a2); rn(a2) = own(a2)
         end select
      end do
      has_send = all(sn > 0)
      has_recv = all(rn > 0)
      if (has_send) then
         call mpi_type_create_subarray(3, sizes, sn, ss, MPI_ORDER_FORTRAN, dtype, st, ierr3)
         call mpi_type_commit(st, ierr3)
      end if
      if (has_recv) then
         call mpi_type_create_subarray(3, sizes, rn, rs, MPI_ORDER_FORTRAN, dtype, rt, ierr3)
         call mpi_type_commit(rt, ierr3)
      end if
    end subroutine regions

    subroutine free_types()
      integer :: ierr3
      if (has_send) call mpi_type_free(st, ierr3)
      if (has_recv) call mpi_type_free(rt, ierr3)
    end subroutine free_types

    integer function tag(off)
      integer, intent(in) :: off(3)
      tag = (off(1) + 1) * 9 + (off(2) + 1) * 3 + (off(3) + 1)
    end function tag
  end subroutine mpi_exchange
end module stencil3d_run

program stencil3d
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi_f08
  use sode_f08
  use stencil3d_run
  implicit none

  integer :: ierr, size, g, p, box, ngrids, sh
  integer :: grids(3, 3)
  character(len=64) :: arg

  call mpi_init(ierr)
  call mpi_comm_rank(MPI_COMM_WORLD, rank, ierr)
  call mpi_comm_size(MPI_COMM_WORLD, size, ierr)
  if (sode_abi_version() /= SODE_MODULE_ABI) then
     write (error_unit, *) 'the sode module and library disagree on the ABI version'
     call mpi_abort(MPI_COMM_WORLD, 3, ierr)
  end if
  if (index(sode_strerror(SODE_ERR_TIMEOUT), 'SODE_ERR_TIMEOUT: ') /= 1 &
       .or. sode_strerror(-1) /= 'not a sode status code' .or. len(sode_version()) < 5) then
     write (error_unit, *) 'sode_strerror or sode_version: ', sode_strerror(SODE_ERR_TIMEOUT), ' ', sode_version()
     call mpi_abort(MPI_COMM_WORLD, 3, ierr)
  end if
  if (rank == 0) write (*, '(2a)') 'sode ', sode_version()
  grids(:, 1) = [1, size, 1]
  grids(:, 2) = [size, 1, 1]
  grids(:, 3) = [2, 2, 1]
  ngrids = 2
  if (size == 1) ngrids = 1
  if (size == 4) ngrids = 3
  ! --grid PXxPYxPZ: every configuration on that grid only.
  call get_command_argument(1, arg)
  if (arg == '--grid') then
     call get_command_argument(2, arg)
     arg = arg(1:len_trim(arg))
     do g = 1, len_trim(arg)
        if (arg(g:g) == 'x') arg(g:g) = ' '
     end do
     read (arg, *, iostat=ierr) grids(:, 1)
     if (ierr /= 0 .or. product(grids(:, 1)) /= size) then
        if (rank == 0) write (error_unit, '(a, i0, a)') 'stencil3d: --grid: give PXxPYxPZ for ', size, ' ranks'
        call mpi_abort(MPI_COMM_WORLD, 2, ierr)
     end if
     ngrids = 1
  end if
  ! box+: the fields in sode's shared memory.
  do sh = 0, 1
     shared = sh == 1
     do g = 1, ngrids
        do p = 1, 3
           do box = 0, 1
              call run(grids(:, g), PERIODS(:, p), box == 1)
           end do
        end do
     end do
  end do
  call mpi_finalize(ierr)

end program stencil3d
