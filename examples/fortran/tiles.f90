! Several domains per rank, as tiled ocean and atmosphere models hold
! them: each rank owns NT tiles of SX x SY cells and NR levels, kept in one
! array whose last dimension is the tile, u(1-OL:SX+OL, 1-OL:SY+OL, NR, NT)
! (MITgcm's layout). The tiles lie on a ring along x across all ranks
! (tile t of rank r is global tile r*NT + t); along y each tile is periodic
! on its own. The exchange is described by its messages
! (sode_exchange_create, sode_add_send, sode_add_recv), in the array's own
! bounds: OL columns to each x neighbour's tile, to another rank or to this
! one, and OL rows from each tile to itself. Then the same exchange
! described by its grid of domains instead (sode_exchange_create_tiles:
! the ring of tiles is a periodic grid of nranks*NT x 1 domains, each
! domain's rank given), where sode derives those boxes itself. Three
! iterations each; every halo cell of every tile and level must hold its
! owner's value.
!
!   mpirun -n 3 ./tiles
program tiles
  use, intrinsic :: iso_fortran_env, only: real64, error_unit, output_unit
  use mpi_f08
  use sode
  implicit none

  integer, parameter :: NT = 2, SX = 6, SY = 5, NR = 3, OL = 2
  integer :: rank, nranks, ierr, wrong, total

  call mpi_init(ierr)
  call mpi_comm_rank(MPI_COMM_WORLD, rank, ierr)
  call mpi_comm_size(MPI_COMM_WORLD, nranks, ierr)
  wrong = run(.false.) + run(.true.)
  call mpi_allreduce(wrong, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (total /= 0) then
     if (rank == 0) write (error_unit, '(a, i0, a)') 'tiles: ', total, ' halo cells wrong'
     call mpi_abort(MPI_COMM_WORLD, 1, ierr)
  end if
  if (rank == 0) write (output_unit, '(a, i0, a, i0, a)') 'ok ', nranks, ' ranks of ', NT, &
       ' tiles each (one array, the tile its last dimension), described by boxes and by the grid' // &
       ' of domains: every halo cell of every tile and level its owner''s value'
  call mpi_finalize(ierr)

contains

  !> The value of global column gx, row gy, level k at iteration it.
  real(real64) function value(it, gx, gy, k)
    integer, intent(in) :: it, gx, gy, k
    value = real(it * 1000000 + k * 100000 + gx * 100 + gy, real64)
  end function value

  !> The rank and local tile of global tile `g` (0-based, wrapped).
  subroutine owner(g, r, t)
    integer, intent(in) :: g
    integer, intent(out) :: r, t
    integer :: w
    w = modulo(g, nranks * NT)
    r = w / NT
    t = mod(w, NT) + 1
  end subroutine owner

  !> The tag of what global tile `g` receives from direction `d` (1 west,
  !> 2 east, 3 south, 4 north): unique per receiving tile and side.
  integer function tag_of(g, d)
    integer, intent(in) :: g, d
    tag_of = 4 * modulo(g, nranks * NT) + d
  end function tag_of

  !> The boxes of tile `t` (global `g`): x halos from the neighbouring
  !> tiles, wherever they are, and y halos from itself.
  subroutine describe(x, t, g)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: t, g
    integer :: r, q
    ! West halo from the tile before, east halo from the tile after.
    call owner(g - 1, r, q)
    call sode_add_recv(x, r, tag_of(g, 1), [1 - OL, 1, 1, t], [0, SY, NR, t])
    call sode_add_send(x, r, tag_of(g - 1, 2), [1, 1, 1, t], [OL, SY, NR, t])
    call owner(g + 1, r, q)
    call sode_add_recv(x, r, tag_of(g, 2), [SX + 1, 1, 1, t], [SX + OL, SY, NR, t])
    call sode_add_send(x, r, tag_of(g + 1, 1), [SX - OL + 1, 1, 1, t], [SX, SY, NR, t])
    ! Along y the tile is its own neighbour.
    call sode_add_recv(x, rank, tag_of(g, 3), [1, 1 - OL, 1, t], [SX, 0, NR, t])
    call sode_add_send(x, rank, tag_of(g, 3), [1, SY - OL + 1, 1, t], [SX, SY, NR, t])
    call sode_add_recv(x, rank, tag_of(g, 4), [1, SY + 1, 1, t], [SX, SY + OL, NR, t])
    call sode_add_send(x, rank, tag_of(g, 4), [1, 1, 1, t], [SX, OL, NR, t])
  end subroutine describe

  !> Three iterations over an exchange described by its boxes or, with
  !> `by_grid`, by its grid of domains; the halo cells wrong.
  integer function run(by_grid) result(wrong)
    logical, intent(in) :: by_grid
    type(sode_comm) :: sc
    type(sode_exchange) :: x
    real(real64), allocatable, target :: u(:, :, :, :)
    integer :: it, t, g, i, j, k, gx, gy, p
    integer :: owners(nranks * NT), coords(2, NT)

    allocate (u(1 - OL:SX + OL, 1 - OL:SY + OL, NR, NT))
    call sode_comm_create_mpi(MPI_COMM_WORLD%MPI_VAL, sc)
    if (by_grid) then
       ! Domain p (from 0) is global tile p, on rank p / NT.
       owners = [(p / NT, p = 0, nranks * NT - 1)]
       coords = reshape([(rank * NT + t - 1, 0, t = 1, NT)], [2, NT])
       call sode_exchange_create_tiles(sc, [nranks * NT, 1], [.true., .true.], owners, coords, &
            [OL, OL], [OL, OL], SODE_STAR, x)
    else
       call sode_exchange_create(sc, [1 - OL, 1 - OL, 1, 1], x)
    end if
    call sode_add_field(x, u, first=[1, 1, 1, 1], last=[SX, SY, NR, NT])
    if (.not. by_grid) then
       do t = 1, NT
          call describe(x, t, rank * NT + t - 1)
       end do
    end if
    call sode_commit(x)
    wrong = 0
    do it = 1, 3
       u = -1
       do t = 1, NT
          do k = 1, NR
             do j = 1, SY
                do i = 1, SX
                   u(i, j, k, t) = value(it, (rank * NT + t - 1) * SX + i, j, k)
                end do
             end do
          end do
       end do
       call sode_start(x)
       call sode_wait(x)
       do t = 1, NT
          g = rank * NT + t - 1
          do k = 1, NR
             ! x halos (rows 1..SY), then y halos (columns 1..SX).
             do j = 1, SY
                do i = 1 - OL, SX + OL
                   if (i >= 1 .and. i <= SX) cycle
                   gx = modulo(g * SX + i - 1, nranks * NT * SX) + 1
                   if (u(i, j, k, t) /= value(it, gx, j, k)) wrong = wrong + 1
                end do
             end do
             do j = 1 - OL, SY + OL
                if (j >= 1 .and. j <= SY) cycle
                gy = modulo(j - 1, SY) + 1
                do i = 1, SX
                   if (u(i, j, k, t) /= value(it, g * SX + i, gy, k)) wrong = wrong + 1
                end do
             end do
          end do
       end do
    end do
    if (wrong /= 0) write (error_unit, '(a, i0, a, i0, a)') 'rank ', rank, ': ', wrong, ' halo cells wrong'
    call sode_exchange_free(x)
    call sode_comm_free(sc)
  end function run

end program tiles
