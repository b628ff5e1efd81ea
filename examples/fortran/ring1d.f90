! A 1-D decomposition from Fortran: a ring of ranks (periodic) and a line
! (not), each rank owning a block of a global array of 29 cells, with three
! fields in one exchange: an int64 array with two halo cells on each side,
! a real64 array with one, and a real64 array of nodes (the ends of the
! cells) with two, whose first and last node each rank shares with its
! neighbour there (sode_set_overlap) and marks as its own. Three
! iterations; every halo cell of each is checked against the value its
! owner holds, cells beyond a line's ends must keep their sentinel, and
! every rank's shared nodes must keep its mark (never sent). A fourth
! starts the real64 cells alone (sode_start_fields): the other two fields
! must keep every halo cell as it was. A fifth moves one layer of the
! int64 field's two (sode_set_depth): the outer layer and the other
! fields must keep theirs. Then arrays of rank 5 and 7 (levels and tiles
! as further dimensions), every further index of each halo cell checked.
!
!   mpirun -n 3 ./ring1d
program ring1d
  use, intrinsic :: iso_fortran_env, only: real64, int32, int64, error_unit, output_unit
  use, intrinsic :: iso_c_binding, only: c_loc
  use mpi_f08
  use sode
  implicit none

  integer, parameter :: GLOBAL = 29, H = 2, HR = 1
  integer :: rank, nranks, ierr, wrong, total, round

  call mpi_init(ierr)
  call mpi_comm_rank(MPI_COMM_WORLD, rank, ierr)
  call mpi_comm_size(MPI_COMM_WORLD, nranks, ierr)
  do round = 1, 2
     wrong = run(round == 1)
     call mpi_allreduce(wrong, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
     if (total /= 0) then
        if (rank == 0) write (error_unit, '(a, i0, a)') 'ring1d: ', total, ' halo cells wrong'
        call mpi_abort(MPI_COMM_WORLD, 1, ierr)
     end if
     if (rank == 0) then
        if (round == 1) then
           write (output_unit, '(a, i0, a)') 'ring of ', nranks, &
                ': int64 (halo 2), real64 (halo 1), node (overlap 1, halo 2) fields' // &
                ' equal to their owners'' cells'
        else
           write (output_unit, '(a, i0, a)') 'line of ', nranks, &
                ': int64 (halo 2), real64 (halo 1), node (overlap 1, halo 2) fields' // &
                ' equal to their owners'' cells; ends untouched'
        end if
     end if
  end do
  call mpi_finalize(ierr)

contains

  integer(int64) function value(it, g)
    integer, intent(in) :: it, g
    value = int(it, int64) * 1000 + g
  end function value

  !> The expected value of global cell `g` at iteration `it` (wrapped on a
  !> ring), or `sentinel` beyond a line's ends.
  integer(int64) function expected(it, g, periodic, sentinel)
    integer, intent(in) :: it, g
    logical, intent(in) :: periodic
    integer(int64), intent(in) :: sentinel
    if (g >= 0 .and. g < GLOBAL) then
       expected = value(it, g)
    else if (periodic) then
       expected = value(it, modulo(g, GLOBAL))
    else
       expected = sentinel
    end if
  end function expected

  !> Three exchanges on a ring or a line; returns the wrong cells.
  integer function run(periodic) result(wrong)
    logical, intent(in) :: periodic
    integer(int64), pointer, contiguous :: a(:)
    real(real64), pointer, contiguous :: r(:), v(:), w(:, :)
    type(sode_comm) :: sc
    type(sode_exchange) :: x, y
    integer :: q, rest, start, own, it, i, g, st, n
    logical :: told, alone, shallow, numbered

    q = GLOBAL / nranks
    rest = mod(GLOBAL, nranks)
    start = rank * q + min(rank, rest)
    own = q + merge(1, 0, rank < rest)
    allocate (a(1 - H:own + H), r(1 - HR:own + HR), v(1 - H:own + 1 + H))
    call sode_comm_create_mpi(MPI_COMM_WORLD%MPI_VAL, sc)
    call sode_exchange_create_cart(sc, [nranks], [rank], [periodic], [H], [H], SODE_STAR, x)
    ! An owned range whose halo leaves the array is told in its own bounds.
    call sode_add_field(x, a, first=[1 - H], last=[own], ierr=st)
    told = st == SODE_ERR_ARG .and. &
         index(sode_last_error(), 'sode_add_field: dimension 1: the owned cells -1:') == 1 .and. &
         index(sode_last_error(), 'need the bounds -3:') > 0 .and. index(sode_last_error(), 'the array''s are -1:') > 0
    if (.not. told) write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': a misplaced owned range gave: ', &
         sode_last_error()
    call sode_add_field(x, a, first=[1], last=[own])
    call sode_add_field(x, r, first=[1], last=[own], halo_lo=[HR], halo_hi=[HR])
    call sode_add_field(x, v, first=[1], last=[own + 1])
    call sode_set_overlap(x, [1], [1])
    ! Fields count from 1 here too: field 3 is v's (as just set), and
    ! fields 0 and 4 are refused by their numbers.
    call sode_set_overlap(x, [1], [1], field=3)
    call sode_set_overlap(x, [0], [0], st, field=0)
    numbered = st == SODE_ERR_ARG .and. &
         index(sode_last_error(), 'sode_set_overlap: field 0: sets and fields are numbered from 1') == 1
    call sode_set_overlap(x, [0], [0], st, field=4)
    numbered = numbered .and. st == SODE_ERR_ARG .and. &
         index(sode_last_error(), 'sode_set_overlap: field 4: the exchange has 3 fields (numbered from 1') == 1
    if (.not. numbered) write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': a field numbered out of range gave: ', &
         sode_last_error()
    ! Host memory, the one kind today: any other is refused by its number.
    call sode_set_memory_kind(x, SODE_MEMORY_HOST)
    call sode_set_memory_kind(x, SODE_MEMORY_HOST, field=1)
    call sode_set_memory_kind(x, 7, st, field=2)
    if (st /= SODE_ERR_ARG .or. index(sode_last_error(), &
         'sode_set_memory_kind: memory kind 7: SODE_MEMORY_HOST (0) is the one kind') /= 1) then
       numbered = .false.
       write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': memory kind 7 gave: ', sode_last_error()
    end if
    call sode_commit(x)
    wrong = merge(0, 1, told .and. numbered)
    call sode_comm_size(sc, n)
    if (n /= nranks) wrong = wrong + 1
    call sode_field_count(x, n)
    if (n /= 3) wrong = wrong + 1
    do it = 1, 5
       alone = it == 4
       shallow = it == 5
       a = -1
       r = -1d0
       v = -1d0
       do i = 1, own
          a(i) = value(it, start + i - 1)
          r(i) = real(value(it, start + i - 1), real64) / 4
          v(i) = real(value(it, start + i - 1), real64) / 2
       end do
       v(1) = mark(it)
       v(own + 1) = mark(it)
       if (alone .and. mod(rank, 2) == 0) then
          ! Each rank gives its arrays its own way: checked, or as an address.
          call sode_start_fields(x, [2], [sode_array(r)])
       else if (alone) then
          call sode_start_fields(x, [2], [c_loc(r)])
       else if (shallow) then
          ! One layer of the int64 field's two, and no other field.
          call sode_set_depth(x, 1)
          call sode_start_fields(x, [1])
       else
          call sode_start(x)
       end if
       call sode_wait(x)
       if (shallow) call sode_set_depth(x, 0)
       do i = 1 - H, own + H
          g = start + i - 1
          if ((alone .and. (i < 1 .or. i > own)) .or. (shallow .and. (i < 0 .or. i > own + 1))) then
             if (a(i) /= -1) wrong = wrong + 1
          else if (a(i) /= expected(it, g, periodic, -1_int64)) then
             wrong = wrong + 1
          end if
       end do
       do i = 1 - HR, own + HR
          g = start + i - 1
          if (shallow .and. (i < 1 .or. i > own)) then
             if (r(i) /= -1d0) wrong = wrong + 1
          else if (r(i) /= real(expected(it, g, periodic, -4_int64), real64) / 4) then
             wrong = wrong + 1
          end if
       end do
       do i = 1 - H, own + 1 + H
          g = start + i - 1
          if (i == 1 .or. i == own + 1) then
             if (v(i) /= mark(it)) wrong = wrong + 1
          else if ((alone .or. shallow) .and. (i < 1 .or. i > own + 1)) then
             if (v(i) /= -1d0) wrong = wrong + 1
          else if (v(i) /= real(expected(it, g, periodic, -2_int64), real64) / 2) then
             wrong = wrong + 1
          end if
       end do
    end do
    wrong = wrong + high_ranks(sc, periodic, start, own)
    ! A field the exchange lacks is told in the module's numbering.
    call sode_start_fields(x, [2, 4], ierr=st)
    if (st /= SODE_ERR_ARG .or. index(sode_last_error(), &
         'sode_start_fields: field 4: the exchange''s 3 fields are numbered 1..3') /= 1) then
       write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': field 4 of 3 gave: ', sode_last_error()
       wrong = wrong + 1
    end if
    ! A field whose second dimension (beyond the grid) differs across
    ! ranks fails the commit on every rank, told in the module's numbering.
    if (nranks > 1) then
       allocate (w(1 - H:own + H, 1:2 + rank))
       call sode_exchange_create_cart(sc, [nranks], [rank], [periodic], [H], [H], SODE_STAR, y)
       call sode_add_field(y, w, first=[1, 1], last=[own, 2 + rank])
       call sode_commit(y, ierr=st)
       if (st /= SODE_ERR_MISMATCH .or. index(sode_last_error(), 'field 1: ranks ') == 0) then
          write (error_unit, '(a, i0, 2a)') 'rank ', rank, ': differing extents gave: ', sode_last_error()
          wrong = wrong + 1
       end if
       call sode_exchange_free(y)
       deallocate (w)
    end if
    if (wrong /= 0) then
       write (error_unit, '(a, i0, a, l1, a, i0, a)') 'rank ', rank, ' (periodic ', periodic, '): ', &
            wrong, ' cells wrong'
    end if
    call sode_exchange_free(x)
    call sode_comm_free(sc)
    deallocate (a, r, v)
  end function run

  !> Arrays of rank 5 and 7, the further dimensions levels and tiles (as
  !> MITgcm keeps u(1-OL:sNx+OL, 1-OL:sNy+OL, Nr, nSx, nSy)): a halo cell
  !> along the first dimension carries every further index, each its own
  !> value. The int32 field's halo is 1 of the exchange's 2: its outer
  !> cells keep their sentinel. Then a rank-5 real64 and a rank-7 complex
  !> field that sode keeps. Returns the wrong cells.
  integer function high_ranks(sc, periodic, start, own) result(wrong)
    type(sode_comm), intent(inout) :: sc
    logical, intent(in) :: periodic
    integer, intent(in) :: start, own
    real(real64), pointer, contiguous :: t(:, :, :, :, :)
    integer(int32), pointer, contiguous :: k(:, :, :, :, :, :, :)
    real(real64), pointer, contiguous :: ts(:, :, :, :, :)
    complex(real64), pointer, contiguous :: zs(:, :, :, :, :, :, :)
    type(sode_exchange) :: z
    integer :: i, c, g
    allocate (t(1 - H:own + H, 2, 1, 2, 3), k(1 - H:own + H, 1, 2, 1, 1, 2, 1))
    t = -1d0
    k = -1
    do i = 1, own
       g = start + i - 1
       t(i, :, :, :, :) = reshape([(real(value(c, g), real64), c = 1, 12)], [2, 1, 2, 3])
       k(i, :, :, :, :, :, :) = reshape([(int(value(c, g), int32), c = 1, 4)], [1, 2, 1, 1, 2, 1])
    end do
    call sode_exchange_create_cart(sc, [nranks], [rank], [periodic], [H], [H], SODE_STAR, z)
    call sode_add_field(z, t, first=[1, 1, 1, 1, 1], last=[own, 2, 1, 2, 3])
    call sode_add_field(z, k, first=[1, 1, 1, 1, 1, 1, 1], last=[own, 1, 2, 1, 1, 2, 1], halo_lo=[1], halo_hi=[1])
    call sode_commit(z)
    call sode_start(z)
    call sode_wait(z)
    wrong = 0
    do i = 1 - H, own + H
       g = start + i - 1
       if (any(t(i, :, :, :, :) /= reshape([(real(expected(c, g, periodic, -1_int64), real64), c = 1, 12)], &
            [2, 1, 2, 3]))) wrong = wrong + 1
       if (i < 0 .or. i > own + 1) then
          if (any(k(i, :, :, :, :, :, :) /= -1)) wrong = wrong + 1
       else if (any(k(i, :, :, :, :, :, :) /= reshape([(int(expected(c, g, periodic, -1_int64), int32), c = 1, 4)], &
            [1, 2, 1, 1, 2, 1]))) then
          wrong = wrong + 1
       end if
    end do
    call sode_exchange_free(z)
    ! The same rank-5 field kept by sode, and a complex one of rank 7.
    call sode_exchange_create_cart(sc, [nranks], [rank], [periodic], [H], [H], SODE_STAR, z)
    call sode_set_shared_fields(z, 1)
    call sode_add_shared_field(z, SODE_REAL64, lbound(t), ubound(t), first=[1, 1, 1, 1, 1], last=[own, 2, 1, 2, 3])
    call sode_add_shared_field(z, SODE_COMPLEX64, [1 - H, 1, 1, 1, 1, 1, 1], [own + H, 1, 2, 1, 1, 2, 1], &
         first=[1, 1, 1, 1, 1, 1, 1], last=[own, 1, 2, 1, 1, 2, 1])
    call sode_commit(z)
    call sode_shared_field(z, 1, 1, lbound(t), ubound(t), ts)
    call sode_shared_field(z, 1, 2, [1 - H, 1, 1, 1, 1, 1, 1], [own + H, 1, 2, 1, 1, 2, 1], zs)
    ts = -1d0
    zs = (-1d0, 1d0)
    do i = 1, own
       g = start + i - 1
       ts(i, :, :, :, :) = reshape([(real(value(c, g), real64), c = 1, 12)], [2, 1, 2, 3])
       zs(i, :, :, :, :, :, :) = reshape([(cmplx(value(c, g), -value(c, g), real64), c = 1, 4)], [1, 2, 1, 1, 2, 1])
    end do
    call sode_start_set(z, 1)
    call sode_wait(z)
    do i = 1 - H, own + H
       g = start + i - 1
       if (any(ts(i, :, :, :, :) /= reshape([(real(expected(c, g, periodic, -1_int64), real64), c = 1, 12)], &
            [2, 1, 2, 3]))) wrong = wrong + 1
       if (any(zs(i, :, :, :, :, :, :) /= reshape([(cmplx(expected(c, g, periodic, -1_int64), &
            -expected(c, g, periodic, -1_int64), real64), c = 1, 4)], [1, 2, 1, 1, 2, 1]))) wrong = wrong + 1
    end do
    if (wrong /= 0) write (error_unit, '(a, i0, a, i0, a)') 'rank ', rank, ': ', wrong, &
         ' cells of the rank-5 and rank-7 fields wrong'
    call sode_exchange_free(z)
    deallocate (t, k)
  end function high_ranks

  !> What this rank writes on the nodes it shares at iteration `it`.
  real(real64) function mark(it)
    integer, intent(in) :: it
    mark = -1000d0 * (rank + 1) - it
  end function mark

end program ring1d
