! sode for Fortran: `use sode`. A thin module over the C ABI (sode.h) and
! libsode_mpi, through ISO_C_BINDING; compile it with the compiler of the
! program (the installed package builds it with the one CMake found).
!
! Every routine takes an optional `ierr`, positional right after the
! required arguments (`call sode_wait(x, ierr)`; timeouts and halo widths
! come by keyword after it): present, it receives the status (SODE_OK is
! 0); absent, a failure prints sode's message and ends the job with
! MPI_Abort, as MPI's default error handler does. Communicators are MPI
! `integer` handles (`comm%MPI_VAL` with mpi_f08).
!
!   type(sode_comm) :: sc
!   type(sode_exchange) :: x
!   real(real64), target :: u(0:nx+1, 0:ny+1, 0:nz+1)
!   call sode_comm_create_mpi(cart, sc)
!   call sode_exchange_create_mpi_cart(sc, cart, [1,1,1], [1,1,1], SODE_BOX, x)
!   call sode_add_field(x, u, first=[1,1,1], last=[nx,ny,nz])
!   call sode_commit(x)
!   do it = 1, steps
!     call sode_start(x); ...interior...; call sode_wait(x); ...boundary...
!   end do
!   call sode_exchange_free(x); call sode_comm_free(sc)
module sode
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: real32, real64, int32, int64, error_unit
  implicit none
  private

  integer, parameter, public :: SODE_OK = 0, SODE_ERR_NULL = 1, SODE_ERR_ARG = 2, &
       SODE_ERR_STATE = 3, SODE_ERR_TIMEOUT = 4, SODE_ERR_BOOTSTRAP = 5, &
       SODE_ERR_MISMATCH = 6, SODE_ERR_CHANNEL = 7, SODE_ERR_INTERNAL = 8
  integer, parameter, public :: SODE_STAR = 0, SODE_STAR_EDGES = 1, SODE_BOX = 2
  integer, parameter, public :: SODE_TRANSPORT_AUTO = 0, SODE_TRANSPORT_SHM = 1, &
       SODE_TRANSPORT_RDMA = 2, SODE_TRANSPORT_TCP = 3
  integer, parameter, public :: SODE_ZERO_COPY_AUTO = 0, SODE_ZERO_COPY_ALWAYS = 1, &
       SODE_ZERO_COPY_NEVER = 2
  !> Where a field's arrays live (sode_set_memory_kind): host memory, the one kind today.
  integer, parameter, public :: SODE_MEMORY_HOST = 0
  !> The ABI version this module was written for (compare with sode_abi_version()).
  integer, parameter, public :: SODE_MODULE_ABI = 1
  !> Timeouts: no deadline, and the job's default (SODE_TIMEOUT, else none).
  real(real64), parameter, public :: SODE_NO_DEADLINE = huge(1d0), SODE_TIMEOUT_DEFAULT = -1d0
  integer, parameter :: F32 = 0, F64 = 1, I32 = 2, I64 = 3, C32 = 4, C64 = 5
  ! The calls that check a sode_array, as sode_exchange_check_array_f numbers them.
  integer, parameter :: ROUTINE_START = 0, ROUTINE_LEND = 1, ROUTINE_FIELDS = 2
  !> Element kinds of a field sode keeps (sode_add_shared_field).
  integer, parameter, public :: SODE_REAL32 = F32, SODE_REAL64 = F64, SODE_INT32 = I32, &
       SODE_INT64 = I64, SODE_COMPLEX32 = C32, SODE_COMPLEX64 = C64

  !> A sode communicator: the ranks of a job.
  type, public :: sode_comm
     type(c_ptr) :: ptr = c_null_ptr
  end type sode_comm

  !> A halo exchange.
  type, public :: sode_exchange
     type(c_ptr) :: ptr = c_null_ptr
  end type sode_exchange

  !> What sode_array(a) makes of an array given in place of a field's: its
  !> address, element type and shape (not a copy of it), which
  !> sode_start_arrays, sode_lend_arrays and sode_start_fields check
  !> against the field's before sode reads or writes it.
  type, public :: sode_array_ref
     private
     type(c_ptr) :: ptr = c_null_ptr
     integer :: ty = -1
     integer :: ndims = 0
     integer(c_int64_t) :: shp(7) = 0
     logical :: contiguous = .false.
  end type sode_array_ref

  !> What an exchange has done since its commit or sode_reset_stats
  !> (sode_get_stats): iterations completed, seconds in start and in
  !> wait/test calls, bytes sent to and received from other ranks, and
  !> its neighbours (sode_get_neighbour_stats 1 to neighbours).
  type, bind(C), public :: sode_stats
     integer(c_int64_t) :: exchanges = 0
     real(c_double) :: start_seconds = 0, wait_seconds = 0
     integer(c_int64_t) :: bytes_sent = 0, bytes_received = 0
     integer(c_int) :: neighbours = 0
  end type sode_stats

  !> One neighbour, as C's sode_neighbour_stats.
  type, bind(C) :: neighbour_stats
     integer(c_int) :: rank
     type(c_ptr) :: channel
     integer(c_int64_t) :: bytes_sent, bytes_received
  end type neighbour_stats

  public :: sode_comm_create_mpi, sode_comm_create_env, sode_comm_free, sode_comm_rank
  public :: sode_comm_size, sode_field_count
  public :: sode_comm_reorder_cart
  public :: sode_exchange_create_mpi_cart, sode_exchange_create_cart, sode_exchange_free
  public :: sode_exchange_create_tiles
  public :: sode_exchange_create, sode_add_send, sode_add_recv
  public :: sode_add_field, sode_add_field_bytes
  public :: sode_commit, sode_start, sode_start_arrays, sode_start_fields, sode_wait, sode_test
  public :: sode_lend_arrays, sode_get_staged_starts, sode_array
  public :: sode_set_transport, sode_set_zero_copy, sode_set_overlap, sode_set_memory_kind, sode_describe
  public :: sode_set_depth
  public :: sode_set_shared_fields, sode_add_shared_field, sode_shared_field, sode_start_set
  public :: sode_last_error, sode_abi_version, sode_strerror, sode_version
  public :: sode_get_stats, sode_get_neighbour_stats, sode_reset_stats

  !> Adds a field: a real32, real64, int32, int64, complex(real32) or
  !> complex(real64) array of rank 1 to 7 (Fortran order), with the
  !> TARGET attribute (an assumed-shape dummy too) or a POINTER, contiguous
  !> in memory (a whole array, or a pointer to one), its owned cells `first(:)` to `last(:)` in the
  !> array's own bounds, its halo widths below and above on the process
  !> grid's axes (default: the exchange's). A staggered field's overlap
  !> with its neighbours: sode_set_overlap.
  interface sode_add_field
     module procedure add_r64_1, add_r64_2, add_r64_3, add_r64_4, add_r64_5, add_r64_6, add_r64_7
     module procedure add_r32_1, add_r32_2, add_r32_3, add_r32_4, add_r32_5, add_r32_6, add_r32_7
     module procedure add_i32_1, add_i32_2, add_i32_3, add_i32_4, add_i32_5, add_i32_6, add_i32_7
     module procedure add_i64_1, add_i64_2, add_i64_3, add_i64_4, add_i64_5, add_i64_6, add_i64_7
     module procedure add_c32_1, add_c32_2, add_c32_3, add_c32_4, add_c32_5, add_c32_6, add_c32_7
     module procedure add_c64_1, add_c64_2, add_c64_3, add_c64_4, add_c64_5, add_c64_6, add_c64_7
  end interface sode_add_field

  !> An array to exchange in place of a field's (Runge-Kutta stages, double
  !> buffers), for sode_start_arrays, sode_lend_arrays and
  !> sode_start_fields: `call sode_start_arrays(x, [sode_array(s1),
  !> sode_array(s1v)])`. `a` is a real32, real64, int32, int64,
  !> complex(real32) or complex(real64) array of rank 1 to 7 with the
  !> TARGET attribute (an assumed-shape dummy too) or a POINTER, as for
  !> sode_add_field; the call that takes it refuses one of another type,
  !> rank or shape than its field's, or not contiguous in memory, naming
  !> the field, before sode reads or writes it.
  interface sode_array
     module procedure array_r64_1, array_r64_2, array_r64_3, array_r64_4, array_r64_5, array_r64_6, array_r64_7
     module procedure array_r32_1, array_r32_2, array_r32_3, array_r32_4, array_r32_5, array_r32_6, array_r32_7
     module procedure array_i32_1, array_i32_2, array_i32_3, array_i32_4, array_i32_5, array_i32_6, array_i32_7
     module procedure array_i64_1, array_i64_2, array_i64_3, array_i64_4, array_i64_5, array_i64_6, array_i64_7
     module procedure array_c32_1, array_c32_2, array_c32_3, array_c32_4, array_c32_5, array_c32_6, array_c32_7
     module procedure array_c64_1, array_c64_2, array_c64_3, array_c64_4, array_c64_5, array_c64_6, array_c64_7
  end interface sode_array

  !> Starts the exchange on other arrays than the fields were added with
  !> (Runge-Kutta stages, double buffers): one per field in the order
  !> added, each `sode_array(a)` of an array laid out as its field
  !> (`call sode_start_arrays(x, [sode_array(s1), sode_array(v)])`, where
  !> field 2 stays on its own array `v`), or `c_loc(a)` (`c_null_ptr` for
  !> the field's own), which sode cannot check. The wait or test that
  !> completes the exchange fills the halos of the same arrays; the next
  !> `sode_start` uses the fields' own arrays again. Where faces travel
  !> in place over RDMA, a field given an array not lent
  !> (sode_lend_arrays) has the faces of its messages packed and unpacked
  !> for that start, as if they were packed.
  interface sode_start_arrays
     module procedure start_arrays_given, start_arrays_loc
  end interface sode_start_arrays

  !> Lends one more set of arrays before sode_commit, one per field in the
  !> order added, each `sode_array(a)` (or `c_loc(a)`) of an array that
  !> stays alive until sode_exchange_free: where faces travel in place
  !> over RDMA, a start on exactly one lent set's arrays
  !> (sode_start_arrays) travels in place as a start on the arrays added
  !> does. Lend each Runge-Kutta stage's arrays (ranks may lend different
  !> numbers of sets).
  interface sode_lend_arrays
     module procedure lend_arrays_given, lend_arrays_loc
  end interface sode_lend_arrays

  !> Starts the exchange on the fields `fields` lists only (numbered from 1
  !> in the order added, each once): `call sode_start_fields(x, [1, 3])`,
  !> or on other arrays for them, `call sode_start_fields(x, [2],
  !> [sode_array(s2)])` (as in sode_start_arrays; `c_loc(s2)` too). Each
  !> message carries those fields' faces only (on every channel), and the
  !> wait or test that completes the exchange fills their halos only;
  !> every neighbour must start the same fields. Faces that travel in
  !> place over RDMA are packed for such a start, through sode's buffers;
  !> a start on every field travels in place again.
  interface sode_start_fields
     module procedure start_fields, start_fields_given, start_fields_arrays
  end interface sode_start_fields

  !> A field sode keeps (sode_set_shared_fields): array `a` becomes a
  !> pointer to field `field` (from 1, in the order added) of set `set`
  !> (from 1), with the bounds `lbounds(:)` to `ubounds(:)` it was added
  !> with; a pointer of another type, rank or extent than the field's is
  !> refused. `a` may be declared CONTIGUOUS or not (a model's derived
  !> types hold plain pointers); what it points to is. Valid until the
  !> exchange is freed.
  interface sode_shared_field
     module procedure shared_r64_1, shared_r64_2, shared_r64_3, shared_r64_4, shared_r64_5, shared_r64_6, shared_r64_7
     module procedure shared_r32_1, shared_r32_2, shared_r32_3, shared_r32_4, shared_r32_5, shared_r32_6, shared_r32_7
     module procedure shared_i32_1, shared_i32_2, shared_i32_3, shared_i32_4, shared_i32_5, shared_i32_6, shared_i32_7
     module procedure shared_i64_1, shared_i64_2, shared_i64_3, shared_i64_4, shared_i64_5, shared_i64_6, shared_i64_7
     module procedure shared_c32_1, shared_c32_2, shared_c32_3, shared_c32_4, shared_c32_5, shared_c32_6, shared_c32_7
     module procedure shared_c64_1, shared_c64_2, shared_c64_3, shared_c64_4, shared_c64_5, shared_c64_6, shared_c64_7
  end interface sode_shared_field

  interface
     function c_abi_version() bind(C, name="sode_abi_version") result(v)
       import :: c_int
       integer(c_int) :: v
     end function c_abi_version
     function c_last_error() bind(C, name="sode_last_error") result(p)
       import :: c_ptr
       type(c_ptr) :: p
     end function c_last_error
     function c_strerror(status) bind(C, name="sode_strerror") result(p)
       import :: c_ptr, c_int
       integer(c_int), value :: status
       type(c_ptr) :: p
     end function c_strerror
     function c_version() bind(C, name="sode_version") result(p)
       import :: c_ptr
       type(c_ptr) :: p
     end function c_version
     function c_strlen(s) bind(C, name="strlen") result(n)
       import :: c_ptr, c_size_t
       type(c_ptr), value :: s
       integer(c_size_t) :: n
     end function c_strlen
     function c_comm_create_mpi_f(comm, timeout, out) bind(C, name="sode_comm_create_mpi_f") result(rc)
       import :: c_int, c_double, c_ptr
       integer(c_int), value :: comm
       real(c_double), value :: timeout
       type(c_ptr) :: out
       integer(c_int) :: rc
     end function c_comm_create_mpi_f
     function c_comm_create_env(timeout, out) bind(C, name="sode_comm_create_env") result(rc)
       import :: c_int, c_double, c_ptr
       real(c_double), value :: timeout
       type(c_ptr) :: out
       integer(c_int) :: rc
     end function c_comm_create_env
     function c_comm_rank(comm, rank) bind(C, name="sode_comm_rank") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: comm
       integer(c_int) :: rank
       integer(c_int) :: rc
     end function c_comm_rank
     function c_comm_size(comm, size) bind(C, name="sode_comm_size") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: comm
       integer(c_int) :: size
       integer(c_int) :: rc
     end function c_comm_size
     function c_comm_free(comm) bind(C, name="sode_comm_free") result(rc)
       import :: c_int, c_ptr
       type(c_ptr) :: comm
       integer(c_int) :: rc
     end function c_comm_free
     function c_create_mpi_cart_f(sc, cart, lo, hi, shape, out) &
          bind(C, name="sode_exchange_create_mpi_cart_f") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: sc
       integer(c_int), value :: cart, shape
       integer(c_int) :: lo(*), hi(*)
       type(c_ptr) :: out
       integer(c_int) :: rc
     end function c_create_mpi_cart_f
     function c_reorder_cart(sc, ndims, dims, periodic, block, halo, shape, cell_bytes, coords, out) &
          bind(C, name="sode_comm_reorder_cart") result(rc)
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: sc
       integer(c_int), value :: ndims, halo, shape
       integer(c_int) :: dims(*), periodic(*), block(*), coords(*)
       integer(c_size_t), value :: cell_bytes
       type(c_ptr) :: out
       integer(c_int) :: rc
     end function c_reorder_cart
     function c_create_cart(sc, ndims, dims, coords, periodic, lo, hi, shape, out) &
          bind(C, name="sode_exchange_create_cart") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: sc
       integer(c_int), value :: ndims, shape
       integer(c_int) :: dims(*), coords(*), periodic(*), lo(*), hi(*)
       type(c_ptr) :: out
       integer(c_int) :: rc
     end function c_create_cart
     function c_create_tiles(sc, ndims, dims, periodic, owners, ntiles, coords, lo, hi, shape, out) &
          bind(C, name="sode_exchange_create_tiles") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: sc
       integer(c_int), value :: ndims, ntiles, shape
       integer(c_int) :: dims(*), periodic(*), owners(*), coords(*), lo(*), hi(*)
       type(c_ptr) :: out
       integer(c_int) :: rc
     end function c_create_tiles
     function c_create_f(sc, ndims, lb, out) bind(C, name="sode_exchange_create_f") result(rc)
       import :: c_int, c_ptr, c_int64_t
       type(c_ptr), value :: sc
       integer(c_int), value :: ndims
       integer(c_int64_t), intent(in) :: lb(*)
       type(c_ptr) :: out
       integer(c_int) :: rc
     end function c_create_f
     function c_add_send_f(x, rank, tag, n, first, last) bind(C, name="sode_exchange_add_send_f") result(rc)
       import :: c_int, c_ptr, c_int64_t
       type(c_ptr), value :: x
       integer(c_int), value :: rank, tag, n
       integer(c_int64_t), intent(in) :: first(*), last(*)
       integer(c_int) :: rc
     end function c_add_send_f
     function c_add_recv_f(x, rank, tag, n, first, last) bind(C, name="sode_exchange_add_recv_f") result(rc)
       import :: c_int, c_ptr, c_int64_t
       type(c_ptr), value :: x
       integer(c_int), value :: rank, tag, n
       integer(c_int64_t), intent(in) :: first(*), last(*)
       integer(c_int) :: rc
     end function c_add_recv_f
     function c_add_box_field_f(x, send, field, rank, tag, n, first, last) &
          bind(C, name="sode_exchange_add_box_field_f") result(rc)
       import :: c_ptr, c_int, c_int64_t
       type(c_ptr), value :: x
       integer(c_int), value :: send, field, rank, tag, n
       integer(c_int64_t), intent(in) :: first(*), last(*)
       integer(c_int) :: rc
     end function c_add_box_field_f
     function c_add_field_f(x, base, ty, ndims, lb, ub, first, last, lo, hi) &
          bind(C, name="sode_exchange_add_field_f") result(rc)
       import :: c_int, c_ptr, c_int64_t
       type(c_ptr), value :: x, base, lo, hi
       integer(c_int), value :: ty, ndims
       integer(c_int64_t), intent(in) :: lb(*), ub(*), first(*), last(*)
       integer(c_int) :: rc
     end function c_add_field_f
     function c_field_count(x, n) bind(C, name="sode_exchange_field_count") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: x
       integer(c_int), intent(out) :: n
       integer(c_int) :: rc
     end function c_field_count
     function c_set_overlap(x, field, lo, hi) bind(C, name="sode_exchange_set_overlap") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: x
       integer(c_int), value :: field
       integer(c_int), intent(in) :: lo(*), hi(*)
       integer(c_int) :: rc
     end function c_set_overlap
     function c_set_memory_kind(x, field, kind) bind(C, name="sode_exchange_set_memory_kind") result(rc)
       import :: c_ptr, c_int
       type(c_ptr), value :: x
       integer(c_int), value :: field, kind
       integer(c_int) :: rc
     end function c_set_memory_kind
     function c_commit(x) bind(C, name="sode_exchange_commit") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int) :: rc
     end function c_commit
     function c_start(x) bind(C, name="sode_exchange_start") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int) :: rc
     end function c_start
     subroutine c_mpi_abort(code) bind(C, name="sode_mpi_abort")
       import :: c_int
       integer(c_int), value :: code
     end subroutine c_mpi_abort
     function c_lend_arrays(x, n, arrays) bind(C, name="sode_exchange_lend_arrays") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: n
       type(c_ptr), intent(in) :: arrays(*)
       integer(c_int) :: rc
     end function c_lend_arrays
     function c_start_arrays(x, n, arrays) bind(C, name="sode_exchange_start_arrays") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: n
       type(c_ptr), intent(in) :: arrays(*)
       integer(c_int) :: rc
     end function c_start_arrays
     function c_check_array(x, routine, field, ty, ndims, shp, contiguous) &
          bind(C, name="sode_exchange_check_array_f") result(rc)
       import :: c_int, c_ptr, c_int64_t
       type(c_ptr), value :: x
       integer(c_int), value :: routine, field, ty, ndims, contiguous
       integer(c_int64_t), intent(in) :: shp(*)
       integer(c_int) :: rc
     end function c_check_array
     function c_start_fields(x, n, fields, narrays, arrays) bind(C, name="sode_exchange_start_fields_f") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: n, narrays
       integer(c_int), intent(in) :: fields(*)
       type(c_ptr), intent(in) :: arrays(*)
       integer(c_int) :: rc
     end function c_start_fields
     function c_wait(x, timeout) bind(C, name="sode_exchange_wait") result(rc)
       import :: c_int, c_ptr, c_double
       type(c_ptr), value :: x
       real(c_double), value :: timeout
       integer(c_int) :: rc
     end function c_wait
     function c_test(x, done) bind(C, name="sode_exchange_test") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int) :: done
       integer(c_int) :: rc
     end function c_test
     function c_exchange_stats(x, s) bind(C, name="sode_exchange_stats") result(rc)
       import :: c_int, c_ptr, sode_stats
       type(c_ptr), value :: x
       type(sode_stats), intent(out) :: s
       integer(c_int) :: rc
     end function c_exchange_stats
     function c_staged_starts(x, n) bind(C, name="sode_exchange_staged_starts") result(rc)
       import :: c_int, c_ptr, c_int64_t
       type(c_ptr), value :: x
       integer(c_int64_t), intent(out) :: n
       integer(c_int) :: rc
     end function c_staged_starts
     function c_neighbour_stats(x, i, n) bind(C, name="sode_exchange_neighbour_stats") result(rc)
       import :: c_int, c_ptr, neighbour_stats
       type(c_ptr), value :: x
       integer(c_int), value :: i
       type(neighbour_stats), intent(out) :: n
       integer(c_int) :: rc
     end function c_neighbour_stats
     function c_reset_stats(x) bind(C, name="sode_exchange_reset_stats") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int) :: rc
     end function c_reset_stats
     function c_exchange_free(x) bind(C, name="sode_exchange_free") result(rc)
       import :: c_int, c_ptr
       type(c_ptr) :: x
       integer(c_int) :: rc
     end function c_exchange_free
     function c_set_transport(x, t) bind(C, name="sode_exchange_set_transport") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: t
       integer(c_int) :: rc
     end function c_set_transport
     function c_set_depth(x, depth) bind(C, name="sode_exchange_set_depth") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: depth
       integer(c_int) :: rc
     end function c_set_depth
     function c_set_shared_fields(x, sets) bind(C, name="sode_exchange_set_shared_fields") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: sets
       integer(c_int) :: rc
     end function c_set_shared_fields
     function c_shared_field_f(x, set, field, ty, n, shape, array) bind(C, name="sode_exchange_shared_field_f") &
          result(rc)
       import :: c_int, c_int64_t, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: set, field, ty, n
       integer(c_int64_t), intent(in) :: shape(*)
       type(c_ptr) :: array
       integer(c_int) :: rc
     end function c_shared_field_f
     function c_start_set(x, set) bind(C, name="sode_exchange_start_set") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: set
       integer(c_int) :: rc
     end function c_start_set
     function c_set_zero_copy(x, m) bind(C, name="sode_exchange_set_zero_copy") result(rc)
       import :: c_int, c_ptr
       type(c_ptr), value :: x
       integer(c_int), value :: m
       integer(c_int) :: rc
     end function c_set_zero_copy
     function c_describe(x, buf, size, needed) bind(C, name="sode_exchange_describe") result(rc)
       import :: c_int, c_ptr, c_size_t, c_char
       type(c_ptr), value :: x
       character(kind=c_char) :: buf(*)
       integer(c_size_t), value :: size
       integer(c_size_t) :: needed
       integer(c_int) :: rc
     end function c_describe
     function c_report_error(status, message) bind(C, name="sode_report_error") result(rc)
       import :: c_int, c_char
       integer(c_int), value :: status
       character(kind=c_char) :: message(*)
       integer(c_int) :: rc
     end function c_report_error
  end interface

contains

  !> The message of the last sode call on this thread (empty after success),
  !> naming the module's routines (sode_wait, not sode_exchange_wait).
  function sode_last_error() result(msg)
    character(len=:), allocatable :: msg
    msg = fortran_names(fortran_string(c_last_error()))
  end function sode_last_error

  !> `text` with the C names of the routines this module calls otherwise
  !> (sode_exchange_wait for sode_wait) in their Fortran names, as whole
  !> words: the library words its messages for C.
  function fortran_names(text) result(out)
    character(len=*), intent(in) :: text
    character(len=:), allocatable :: out
    ! Longest first, so that no name is taken for the start of another.
    character(len=*), parameter :: c_names(25) = [character(len=31) :: &
         'sode_exchange_set_shared_fields', 'sode_exchange_neighbour_stats', 'sode_exchange_set_memory_kind', &
         'sode_exchange_add_send_field', 'sode_exchange_add_recv_field', 'sode_exchange_set_zero_copy', &
         'sode_exchange_set_transport', 'sode_exchange_staged_starts', 'sode_exchange_shared_field', &
         'sode_exchange_start_arrays', 'sode_exchange_lend_arrays', 'sode_exchange_set_overlap', &
         'sode_exchange_reset_stats', 'sode_exchange_field_count', &
         'sode_exchange_set_depth', 'sode_exchange_add_field', 'sode_exchange_add_send', 'sode_exchange_add_recv', &
         'sode_exchange_start_set', 'sode_exchange_describe', 'sode_exchange_commit', 'sode_exchange_stats', &
         'sode_exchange_start', 'sode_exchange_wait', 'sode_exchange_test']
    character(len=*), parameter :: f_names(25) = [character(len=24) :: &
         'sode_set_shared_fields', 'sode_get_neighbour_stats', 'sode_set_memory_kind', &
         'sode_add_send', 'sode_add_recv', 'sode_set_zero_copy', &
         'sode_set_transport', 'sode_get_staged_starts', 'sode_shared_field', &
         'sode_start_arrays', 'sode_lend_arrays', 'sode_set_overlap', &
         'sode_reset_stats', 'sode_field_count', &
         'sode_set_depth', 'sode_add_field', 'sode_add_send', 'sode_add_recv', &
         'sode_start_set', 'sode_describe', 'sode_commit', 'sode_get_stats', &
         'sode_start', 'sode_wait', 'sode_test']
    integer :: i, k, n
    logical :: replaced
    out = ''
    i = 1
    do while (i <= len(text))
       replaced = .false.
       if (i == 1 .or. .not. word_char(text(max(i - 1, 1):max(i - 1, 1)))) then
          do k = 1, size(c_names)
             n = len_trim(c_names(k))
             if (i + n - 1 > len(text)) cycle
             if (text(i:i + n - 1) /= c_names(k)(1:n)) cycle
             if (i + n <= len(text)) then
                if (word_char(text(i + n:i + n))) cycle
             end if
             out = out // trim(f_names(k))
             i = i + n
             replaced = .true.
             exit
          end do
       end if
       if (.not. replaced) then
          out = out // text(i:i)
          i = i + 1
       end if
    end do
  end function fortran_names

  !> Whether `c` can be part of a routine's name.
  logical function word_char(c)
    character(len=1), intent(in) :: c
    word_char = (c >= 'a' .and. c <= 'z') .or. (c >= 'A' .and. c <= 'Z') .or. (c >= '0' .and. c <= '9') &
         .or. c == '_'
  end function word_char

  !> The name and meaning of a status code ("SODE_ERR_ARG: an invalid
  !> argument"); sode_last_error() says what failed in the last call.
  function sode_strerror(status) result(msg)
    integer, intent(in) :: status
    character(len=:), allocatable :: msg
    msg = fortran_string(c_strerror(int(status, c_int)))
  end function sode_strerror

  !> The version of the library linked, "major.minor.patch".
  function sode_version() result(msg)
    character(len=:), allocatable :: msg
    msg = fortran_string(c_version())
  end function sode_version

  !> A copy of a NUL-terminated C string.
  function fortran_string(p) result(msg)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: msg
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    n = int(c_strlen(p))
    allocate (character(len=n) :: msg)
    if (n == 0) return
    call c_f_pointer(p, chars, [n])
    do i = 1, n
       msg(i:i) = chars(i)
    end do
  end function fortran_string

  !> The ABI version of the library linked (compare with SODE_MODULE_ABI).
  integer function sode_abi_version()
    sode_abi_version = int(c_abi_version())
  end function sode_abi_version

  !> `ierr` gets `rc`; without it, a failure prints the message and stops.
  subroutine finish(rc, ierr)
    integer(c_int), intent(in) :: rc
    integer, intent(out), optional :: ierr
    if (present(ierr)) then
       ierr = int(rc)
    else if (rc /= SODE_OK) then
       write (error_unit, '(a, i0, 2a)') 'sode: error ', rc, ': ', sode_last_error()
       flush (error_unit)
       ! The whole job, as MPI's default error handler would end it; the
       ! job's exit status is sode's.
       call c_mpi_abort(rc)
       error stop 1
    end if
  end subroutine finish

  real(c_double) function seconds(timeout, default)
    real(real64), intent(in), optional :: timeout
    real(real64), intent(in) :: default
    seconds = default
    if (present(timeout)) seconds = timeout
  end function seconds

  !> A communicator whose ranks are `comm`'s (an MPI integer handle).
  !> Collective over `comm`.
  subroutine sode_comm_create_mpi(comm, sc, ierr, timeout)
    integer, intent(in) :: comm
    type(sode_comm), intent(out) :: sc
    real(real64), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    call finish(c_comm_create_mpi_f(int(comm, c_int), seconds(timeout, 60d0), sc%ptr), ierr)
  end subroutine sode_comm_create_mpi

  !> A communicator from the launcher's environment (sode-run, SODE_ROOT).
  subroutine sode_comm_create_env(sc, ierr, timeout)
    type(sode_comm), intent(out) :: sc
    real(real64), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    call finish(c_comm_create_env(seconds(timeout, 60d0), sc%ptr), ierr)
  end subroutine sode_comm_create_env

  !> This rank in `sc`.
  subroutine sode_comm_rank(sc, rank, ierr)
    type(sode_comm), intent(in) :: sc
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: r
    r = -1
    call finish(c_comm_rank(sc%ptr, r), ierr)
    rank = int(r)
  end subroutine sode_comm_rank

  !> The number of ranks in `sc`.
  subroutine sode_comm_size(sc, size, ierr)
    type(sode_comm), intent(in) :: sc
    integer, intent(out) :: size
    integer, intent(out), optional :: ierr
    integer(c_int) :: n
    n = 0
    call finish(c_comm_size(sc%ptr, n), ierr)
    size = int(n)
  end subroutine sode_comm_size

  !> The number of fields added to `x` so far (sode_start_fields numbers
  !> them from 1 in that order).
  subroutine sode_field_count(x, count, ierr)
    type(sode_exchange), intent(in) :: x
    integer, intent(out) :: count
    integer, intent(out), optional :: ierr
    integer(c_int) :: n
    n = 0
    call finish(c_field_count(x%ptr, n), ierr)
    count = int(n)
  end subroutine sode_field_count

  subroutine sode_comm_free(sc, ierr)
    type(sode_comm), intent(inout) :: sc
    integer, intent(out), optional :: ierr
    call finish(c_comm_free(sc%ptr), ierr)
  end subroutine sode_comm_free

  !> Widths for C: one per axis, non-negative.
  function widths(w, n) result(c)
    integer, intent(in) :: w(:)
    integer, intent(in) :: n
    integer(c_int) :: c(max(n, 1))
    c = 0
    c(1:min(n, size(w))) = int(w(1:min(n, size(w))), c_int)
  end function widths

  !> Flags for C (1 true, 0 false): one per axis, three at most.
  function flags(l, n) result(c)
    logical, intent(in) :: l(:)
    integer, intent(in) :: n
    integer(c_int) :: c(3)
    c = 0
    where (l(1:min(n, size(l), 3))) c(1:min(n, size(l), 3)) = 1
  end function flags

  !> A Cartesian exchange from an MPI Cartesian communicator (an integer
  !> handle): halo widths below and above per axis, shape SODE_STAR,
  !> SODE_STAR_EDGES or SODE_BOX. `sc` must be made from `cart`.
  subroutine sode_exchange_create_mpi_cart(sc, cart, halo_lo, halo_hi, shape, x, ierr)
    type(sode_comm), intent(in) :: sc
    integer, intent(in) :: cart, halo_lo(:), halo_hi(:), shape
    type(sode_exchange), intent(out) :: x
    integer, intent(out), optional :: ierr
    integer(c_int) :: lo(3), hi(3)
    lo = widths(halo_lo, 3)
    hi = widths(halo_hi, 3)
    if (size(halo_lo) < 1 .or. size(halo_lo) > 3 .or. size(halo_hi) /= size(halo_lo)) then
       call finish(c_report_error(int(SODE_ERR_ARG, c_int), &
            'sode_exchange_create_mpi_cart: give one halo width per axis (1 to 3) below and above' &
            // c_null_char), ierr)
       return
    end if
    call finish(c_create_mpi_cart_f(sc%ptr, int(cart, c_int), lo, hi, int(shape, c_int), x%ptr), ierr)
  end subroutine sode_exchange_create_mpi_cart

  !> A communicator with the ranks of `sc` renumbered for a Cartesian grid
  !> (MPI_Cart_create with reorder): processes per axis, periodic axes,
  !> cells each rank owns per axis, halo width, shape, bytes of one cell of
  !> every field together. The neighbours that exchange the most end up on
  !> one node. `coords` receives this rank's place in the grid (from 0, the
  !> first axis varying fastest with the new rank), for
  !> sode_exchange_create_cart on `reordered`. Collective: a rank's bad
  !> argument fails every rank.
  subroutine sode_comm_reorder_cart(sc, dims, periodic, block, halo, shape, cell_bytes, coords, &
       reordered, ierr)
    type(sode_comm), intent(in) :: sc
    integer, intent(in) :: dims(:), block(:), halo, shape, cell_bytes
    logical, intent(in) :: periodic(:)
    integer, intent(out) :: coords(:)
    type(sode_comm), intent(out) :: reordered
    integer, intent(out), optional :: ierr
    integer :: n, rc
    integer(c_int) :: p(3), c(3)
    logical :: fits
    n = size(dims)
    fits = n >= 2 .and. n <= 3 .and. size(periodic) == n .and. size(block) == n .and. size(coords) == n
    p = 0
    if (fits) p = flags(periodic, n)
    c = -1
    ! With arrays that do not fit, ndims 0 still takes part, so that every
    ! rank fails rather than waits; then the message says why here.
    rc = c_reorder_cart(sc%ptr, int(merge(n, 0, fits), c_int), widths(dims, 3), p, widths(block, 3), &
         int(halo, c_int), int(shape, c_int), int(cell_bytes, c_size_t), c, reordered%ptr)
    if (.not. fits) then
       rc = c_report_error(int(SODE_ERR_ARG, c_int), &
            'sode_comm_reorder_cart: dims, periodic, block and coords need one value per axis (2 or 3)' &
            // c_null_char)
    end if
    coords = int(c(1:min(3, size(coords))))
    call finish(rc, ierr)
  end subroutine sode_comm_reorder_cart

  !> A Cartesian exchange described by hand: processes per axis, this
  !> rank's coordinates (from 0), periodic axes, halo widths, shape.
  subroutine sode_exchange_create_cart(sc, dims, coords, periodic, halo_lo, halo_hi, shape, x, ierr)
    type(sode_comm), intent(in) :: sc
    integer, intent(in) :: dims(:), coords(:), halo_lo(:), halo_hi(:), shape
    logical, intent(in) :: periodic(:)
    type(sode_exchange), intent(out) :: x
    integer, intent(out), optional :: ierr
    integer :: n
    n = size(dims)
    if (n < 1 .or. n > 3 .or. size(coords) /= n .or. size(periodic) /= n .or. &
         size(halo_lo) /= n .or. size(halo_hi) /= n) then
       call finish(c_report_error(int(SODE_ERR_ARG, c_int), &
            'sode_exchange_create_cart: dims, coords, periodic and the halo widths need one value per axis (1 to 3)' &
            // c_null_char), ierr)
       return
    end if
    call finish(c_create_cart(sc%ptr, int(n, c_int), widths(dims, n), widths(coords, n), flags(periodic, n), &
         widths(halo_lo, n), widths(halo_hi, n), int(shape, c_int), x%ptr), ierr)
  end subroutine sode_exchange_create_cart

  !> An exchange of a grid of domains, several a rank (tiles, as tiled
  !> ocean and atmosphere models keep them): domains per axis, periodic
  !> axes, the rank of every domain in MPI_Cart_rank's order (the last
  !> axis fastest), this rank's tiles' coordinates (from 0, one column
  !> per tile: coords(:, t) is tile t, the t-th along the last dimension
  !> of every field), halo widths and shape. Each tile's halo comes from
  !> the neighbouring domains; a neighbour this rank holds too is copied.
  subroutine sode_exchange_create_tiles(sc, dims, periodic, owners, coords, halo_lo, halo_hi, shape, x, ierr)
    type(sode_comm), intent(in) :: sc
    integer, intent(in) :: dims(:), owners(:), coords(:, :), halo_lo(:), halo_hi(:), shape
    logical, intent(in) :: periodic(:)
    type(sode_exchange), intent(out) :: x
    integer, intent(out), optional :: ierr
    integer :: n
    n = size(dims)
    if (n < 1 .or. n > 3 .or. size(periodic) /= n .or. size(coords, 1) /= n .or. &
         size(halo_lo) /= n .or. size(halo_hi) /= n) then
       call finish(c_report_error(int(SODE_ERR_ARG, c_int), &
            'sode_exchange_create_tiles: dims, periodic, the halo widths and each tile''s coordinates need one' // &
            ' value per axis (1 to 3)' // c_null_char), ierr)
       return
    end if
    if (size(owners) /= product(dims)) then
       call finish(c_report_error(int(SODE_ERR_ARG, c_int), &
            'sode_exchange_create_tiles: owners needs one rank per domain (product(dims))' // c_null_char), ierr)
       return
    end if
    call finish(c_create_tiles(sc%ptr, int(n, c_int), widths(dims, n), flags(periodic, n), int(owners, c_int), &
         int(size(coords, 2), c_int), int(reshape(coords, [size(coords)]), c_int), widths(halo_lo, n), &
         widths(halo_hi, n), int(shape, c_int), x%ptr), ierr)
  end subroutine sode_exchange_create_tiles

  !> An exchange described by its messages, for codes with their own
  !> decomposition: boxes of cells of every field sent to and received
  !> from named ranks (sode_add_send, sode_add_recv), in the fields' own
  !> bounds. The boxes have `size(lbounds)` dimensions (1 to 8), the
  !> fields' first ones, which start at `lbounds(:)` in every field added
  !> (checked by sode_add_field).
  subroutine sode_exchange_create(sc, lbounds, x, ierr)
    type(sode_comm), intent(in) :: sc
    integer, intent(in) :: lbounds(:)
    type(sode_exchange), intent(out) :: x
    integer, intent(out), optional :: ierr
    call finish(c_create_f(sc%ptr, size(lbounds, kind=c_int), int(lbounds, c_int64_t), x%ptr), ierr)
  end subroutine sode_exchange_create

  !> Sends the cells `first(:)` to `last(:)` of every field (in the bounds
  !> of sode_exchange_create) to rank `rank` each iteration; they fill
  !> that rank's receive from this one with the same `tag` (0 or more),
  !> which must have the same shape. With `field=f`, of field `f` alone
  !> (numbered from 1, added already): fields laid out differently
  !> (staggered, on another grid) send boxes of their own, received into
  !> the same field. Before commit.
  subroutine sode_add_send(x, rank, tag, first, last, ierr, field)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: rank, tag, first(:), last(:)
    integer, intent(out), optional :: ierr
    integer, intent(in), optional :: field
    call finish(box_call(x, rank, tag, first, last, .true., field), ierr)
  end subroutine sode_add_send

  !> Receives into the cells `first(:)` to `last(:)` of every field (with
  !> `field=f`, of field `f` alone) what rank `rank` sends this one with
  !> `tag`. Before commit.
  subroutine sode_add_recv(x, rank, tag, first, last, ierr, field)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: rank, tag, first(:), last(:)
    integer, intent(out), optional :: ierr
    integer, intent(in), optional :: field
    call finish(box_call(x, rank, tag, first, last, .false., field), ierr)
  end subroutine sode_add_recv

  integer(c_int) function box_call(x, rank, tag, first, last, send, field) result(rc)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: rank, tag, first(:), last(:)
    logical, intent(in) :: send
    integer, intent(in), optional :: field
    integer(c_int) :: n
    character(len=*), parameter :: routine(2) = [character(len=13) :: 'sode_add_recv', 'sode_add_send']
    if (size(first) /= size(last)) then
       rc = c_report_error(int(SODE_ERR_ARG, c_int), trim(routine(merge(2, 1, send))) // &
            ': first and last need one index per dimension of the exchange''s boxes' // c_null_char)
       return
    end if
    n = size(first, kind=c_int)
    if (present(field)) then
       rc = c_add_box_field_f(x%ptr, merge(1_c_int, 0_c_int, send), int(field, c_int), int(rank, c_int), &
            int(tag, c_int), n, int(first, c_int64_t), int(last, c_int64_t))
    else if (send) then
       rc = c_add_send_f(x%ptr, int(rank, c_int), int(tag, c_int), n, int(first, c_int64_t), int(last, c_int64_t))
    else
       rc = c_add_recv_f(x%ptr, int(rank, c_int), int(tag, c_int), n, int(first, c_int64_t), int(last, c_int64_t))
    end if
  end function box_call

  !> Every rank-specific `add_*` lands here: the array's address, type,
  !> shape and lower bounds.
  !> Whether an array given to sode_add_field is contiguous in memory, as
  !> sode reads and writes it from its first element; reports the error
  !> when it is not (a section with a stride, or of part of a column).
  logical function held(contiguous, ierr)
    logical, intent(in) :: contiguous
    integer, intent(out), optional :: ierr
    held = contiguous
    if (.not. held) call finish(c_report_error(int(SODE_ERR_ARG, c_int), &
         'sode_add_field: the array is not contiguous in memory (a section such as u(1:n:2, :) or' // &
         ' u(2:5, :) of a larger array, or a pointer to one): give the whole array, its owned cells' // &
         ' in first and last' // c_null_char), ierr)
  end function held

  subroutine add_any(x, base, ty, shp, lb, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    type(c_ptr), intent(in) :: base
    integer, intent(in) :: ty, shp(:), lb(:), first(:), last(:)
    integer, intent(in), optional, target :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    integer(c_int), target :: lo(8), hi(8)
    type(c_ptr) :: plo, phi
    integer :: d
    character(len=20) :: routine
    ! Elements of a size, not a type: called by sode_add_field_bytes.
    routine = merge('sode_add_field_bytes', 'sode_add_field      ', ty < 0)
    d = size(shp)
    if (size(first) /= d .or. size(last) /= d) then
       call finish(c_report_error(int(SODE_ERR_ARG, c_int), trim(routine) // &
            ': first and last need one index per dimension of the array' // c_null_char), ierr)
       return
    end if
    plo = c_null_ptr
    phi = c_null_ptr
    if (present(halo_lo)) then
       lo = widths(halo_lo, 8)
       plo = c_loc(lo)
    end if
    if (present(halo_hi)) then
       hi = widths(halo_hi, 8)
       phi = c_loc(hi)
    end if
    ! The bounds as the caller has them: sode's messages name them.
    call finish(c_add_field_f(x%ptr, base, int(ty, c_int), int(d, c_int), int(lb, c_int64_t), &
         int(lb + shp - 1, c_int64_t), int(first, c_int64_t), int(last, c_int64_t), plo, phi), ierr)
  end subroutine add_any

  !> A staggered field's overlap with its neighbours (before commit, every
  !> rank the same): `overlap_lo(a)` owned cells at the low end of grid
  !> axis `a` that the neighbour below owns too, `overlap_hi(a)` at the
  !> high end. Those cells, computed by both ranks, are never sent: for
  !> nodes `first` to `last` whose first and last the neighbours hold too,
  !> `call sode_set_overlap(x, [1], [1])`. The field is the one added last,
  !> or `field` (from 1, in the order added).
  subroutine sode_set_overlap(x, overlap_lo, overlap_hi, ierr, field)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: overlap_lo(:), overlap_hi(:)
    integer, intent(out), optional :: ierr
    integer, intent(in), optional :: field
    integer(c_int) :: rc, n
    rc = field_index(x, 'sode_set_overlap', 'its overlap', n, field)
    if (rc == SODE_OK) rc = c_set_overlap(x%ptr, n, widths(overlap_lo, 8), widths(overlap_hi, 8))
    call finish(rc, ierr)
  end subroutine sode_set_overlap

  !> Where a field's arrays live (before commit): SODE_MEMORY_HOST, the
  !> default and the one kind sode exchanges today; the kind is part of a
  !> field's layout so that device memory can come without a new call.
  !> The field is the one added last, or `field` (from 1, in the order added).
  subroutine sode_set_memory_kind(x, kind, ierr, field)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: kind
    integer, intent(out), optional :: ierr
    integer, intent(in), optional :: field
    integer(c_int) :: rc, n
    rc = field_index(x, 'sode_set_memory_kind', 'its memory kind', n, field)
    if (rc == SODE_OK) rc = c_set_memory_kind(x%ptr, n, int(kind, c_int))
    call finish(rc, ierr)
  end subroutine sode_set_memory_kind

  !> The C number `n` (from 0) of `field` (from 1), or of the field added
  !> last when it is absent; an error naming `op` when there is none.
  function field_index(x, op, what, n, field) result(rc)
    type(sode_exchange), intent(in) :: x
    character(len=*), intent(in) :: op, what
    integer(c_int), intent(out) :: n
    integer, intent(in), optional :: field
    integer(c_int) :: rc
    if (present(field)) then
       rc = numbered(op, 'field', field)
       n = int(field - 1, c_int)
       return
    end if
    rc = c_field_count(x%ptr, n)
    n = n - 1
    if (rc == SODE_OK .and. n < 0) then
       rc = c_report_error(int(SODE_ERR_ARG, c_int), &
            op // ': no field added yet: add the field, then set ' // what // c_null_char)
    end if
  end function field_index

  !> Lets sode keep the fields, `sets` copies of each, in memory it
  !> allocates (shared memory neighbours on the node read faces from
  !> straight): before adding fields, which are then added with
  !> sode_add_shared_field and reached with sode_shared_field after commit;
  !> each iteration exchanges one set (sode_start_set), then sode_wait.
  subroutine sode_set_shared_fields(x, sets, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: sets
    integer, intent(out), optional :: ierr
    call finish(c_set_shared_fields(x%ptr, int(sets, c_int)), ierr)
  end subroutine sode_set_shared_fields

  !> Adds a field sode keeps: `kind` SODE_REAL64, SODE_REAL32, SODE_INT32,
  !> SODE_INT64, SODE_COMPLEX32 or SODE_COMPLEX64, bounds `lbounds(:)` to `ubounds(:)` (rank 1 to 7, halos included), owned
  !> cells `first(:)` to `last(:)`, halo widths as for sode_add_field.
  subroutine sode_add_shared_field(x, kind, lbounds, ubounds, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: kind, lbounds(:), ubounds(:), first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (size(ubounds) /= size(lbounds)) then
       call finish(c_report_error(int(SODE_ERR_ARG, c_int), &
            'sode_add_shared_field: lbounds and ubounds need one bound per axis' // c_null_char), ierr)
       return
    end if
    call add_any(x, c_null_ptr, kind, ubounds - lbounds + 1, lbounds, first, last, ierr, halo_lo, halo_hi)
  end subroutine sode_add_shared_field

  !> Starts exchanging set `set` (from 1) of the fields sode keeps.
  subroutine sode_start_set(x, set, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set
    integer, intent(out), optional :: ierr
    integer(c_int) :: rc
    rc = numbered('sode_start_set', 'set', set)
    if (rc == SODE_OK) rc = c_start_set(x%ptr, int(set - 1, c_int))
    call finish(rc, ierr)
  end subroutine sode_start_set

  !> SODE_OK when `n`, a set's or field's number, counts from 1 as this
  !> module's do; otherwise SODE_ERR_ARG, with a message naming `routine`.
  integer(c_int) function numbered(routine, what, n) result(rc)
    character(len=*), intent(in) :: routine, what
    integer, intent(in) :: n
    character(len=24) :: shown
    rc = SODE_OK
    if (n >= 1) return
    write (shown, '(i0)') n
    rc = c_report_error(int(SODE_ERR_ARG, c_int), routine // ': ' // what // ' ' // trim(shown) // &
         ': sets and fields are numbered from 1 in the order added' // c_null_char)
  end function numbered

  !> The address of field `field` of set `set` (both from 1) that sode
  !> keeps, in `p`, for a pointer to elements of `ty` over `shp`: sode
  !> refuses one unlike the field.
  integer(c_int) function shared_address(x, set, field, ty, shp, p) result(rc)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, ty, shp(:)
    type(c_ptr), intent(out) :: p
    p = c_null_ptr
    rc = numbered('sode_shared_field', 'set', set)
    if (rc == SODE_OK) rc = numbered('sode_shared_field', 'field', field)
    if (rc == SODE_OK) rc = c_shared_field_f(x%ptr, int(set - 1, c_int), int(field - 1, c_int), int(ty, c_int), &
         int(size(shp), c_int), int(shp, c_int64_t), p)
  end function shared_address

  subroutine shared_r64_1(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(1), ubounds(1)
    real(real64), pointer, intent(out) :: a(:)
    integer, intent(out), optional :: ierr
    real(real64), pointer, contiguous :: t(:)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):) => t
  end subroutine shared_r64_1

  subroutine shared_r64_2(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(2), ubounds(2)
    real(real64), pointer, intent(out) :: a(:, :)
    integer, intent(out), optional :: ierr
    real(real64), pointer, contiguous :: t(:, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):) => t
  end subroutine shared_r64_2

  subroutine shared_r64_3(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(3), ubounds(3)
    real(real64), pointer, intent(out) :: a(:, :, :)
    integer, intent(out), optional :: ierr
    real(real64), pointer, contiguous :: t(:, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):) => t
  end subroutine shared_r64_3

  subroutine shared_r64_4(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(4), ubounds(4)
    real(real64), pointer, intent(out) :: a(:, :, :, :)
    integer, intent(out), optional :: ierr
    real(real64), pointer, contiguous :: t(:, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):) => t
  end subroutine shared_r64_4

  subroutine shared_r32_1(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(1), ubounds(1)
    real(real32), pointer, intent(out) :: a(:)
    integer, intent(out), optional :: ierr
    real(real32), pointer, contiguous :: t(:)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):) => t
  end subroutine shared_r32_1

  subroutine shared_r32_2(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(2), ubounds(2)
    real(real32), pointer, intent(out) :: a(:, :)
    integer, intent(out), optional :: ierr
    real(real32), pointer, contiguous :: t(:, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):) => t
  end subroutine shared_r32_2

  subroutine shared_r32_3(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(3), ubounds(3)
    real(real32), pointer, intent(out) :: a(:, :, :)
    integer, intent(out), optional :: ierr
    real(real32), pointer, contiguous :: t(:, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):) => t
  end subroutine shared_r32_3

  subroutine shared_r32_4(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(4), ubounds(4)
    real(real32), pointer, intent(out) :: a(:, :, :, :)
    integer, intent(out), optional :: ierr
    real(real32), pointer, contiguous :: t(:, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):) => t
  end subroutine shared_r32_4

  subroutine shared_i32_1(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(1), ubounds(1)
    integer(int32), pointer, intent(out) :: a(:)
    integer, intent(out), optional :: ierr
    integer(int32), pointer, contiguous :: t(:)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):) => t
  end subroutine shared_i32_1

  subroutine shared_i32_2(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(2), ubounds(2)
    integer(int32), pointer, intent(out) :: a(:, :)
    integer, intent(out), optional :: ierr
    integer(int32), pointer, contiguous :: t(:, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):) => t
  end subroutine shared_i32_2

  subroutine shared_i32_3(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(3), ubounds(3)
    integer(int32), pointer, intent(out) :: a(:, :, :)
    integer, intent(out), optional :: ierr
    integer(int32), pointer, contiguous :: t(:, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):) => t
  end subroutine shared_i32_3

  subroutine shared_i32_4(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(4), ubounds(4)
    integer(int32), pointer, intent(out) :: a(:, :, :, :)
    integer, intent(out), optional :: ierr
    integer(int32), pointer, contiguous :: t(:, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):) => t
  end subroutine shared_i32_4

  subroutine shared_i64_1(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(1), ubounds(1)
    integer(int64), pointer, intent(out) :: a(:)
    integer, intent(out), optional :: ierr
    integer(int64), pointer, contiguous :: t(:)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):) => t
  end subroutine shared_i64_1

  subroutine shared_i64_2(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(2), ubounds(2)
    integer(int64), pointer, intent(out) :: a(:, :)
    integer, intent(out), optional :: ierr
    integer(int64), pointer, contiguous :: t(:, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):) => t
  end subroutine shared_i64_2

  subroutine shared_i64_3(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(3), ubounds(3)
    integer(int64), pointer, intent(out) :: a(:, :, :)
    integer, intent(out), optional :: ierr
    integer(int64), pointer, contiguous :: t(:, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):) => t
  end subroutine shared_i64_3

  subroutine shared_i64_4(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(4), ubounds(4)
    integer(int64), pointer, intent(out) :: a(:, :, :, :)
    integer, intent(out), optional :: ierr
    integer(int64), pointer, contiguous :: t(:, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):) => t
  end subroutine shared_i64_4

  subroutine shared_c32_1(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(1), ubounds(1)
    complex(real32), pointer, intent(out) :: a(:)
    integer, intent(out), optional :: ierr
    complex(real32), pointer, contiguous :: t(:)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):) => t
  end subroutine shared_c32_1

  subroutine shared_c32_2(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(2), ubounds(2)
    complex(real32), pointer, intent(out) :: a(:, :)
    integer, intent(out), optional :: ierr
    complex(real32), pointer, contiguous :: t(:, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):) => t
  end subroutine shared_c32_2

  subroutine shared_c32_3(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(3), ubounds(3)
    complex(real32), pointer, intent(out) :: a(:, :, :)
    integer, intent(out), optional :: ierr
    complex(real32), pointer, contiguous :: t(:, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):) => t
  end subroutine shared_c32_3

  subroutine shared_c32_4(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(4), ubounds(4)
    complex(real32), pointer, intent(out) :: a(:, :, :, :)
    integer, intent(out), optional :: ierr
    complex(real32), pointer, contiguous :: t(:, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):) => t
  end subroutine shared_c32_4

  subroutine shared_c64_1(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(1), ubounds(1)
    complex(real64), pointer, intent(out) :: a(:)
    integer, intent(out), optional :: ierr
    complex(real64), pointer, contiguous :: t(:)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):) => t
  end subroutine shared_c64_1

  subroutine shared_c64_2(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(2), ubounds(2)
    complex(real64), pointer, intent(out) :: a(:, :)
    integer, intent(out), optional :: ierr
    complex(real64), pointer, contiguous :: t(:, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):) => t
  end subroutine shared_c64_2

  subroutine shared_c64_3(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(3), ubounds(3)
    complex(real64), pointer, intent(out) :: a(:, :, :)
    integer, intent(out), optional :: ierr
    complex(real64), pointer, contiguous :: t(:, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):) => t
  end subroutine shared_c64_3

  subroutine shared_c64_4(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(4), ubounds(4)
    complex(real64), pointer, intent(out) :: a(:, :, :, :)
    integer, intent(out), optional :: ierr
    complex(real64), pointer, contiguous :: t(:, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):) => t
  end subroutine shared_c64_4

  subroutine shared_r64_5(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(5), ubounds(5)
    real(real64), pointer, intent(out) :: a(:, :, :, :, :)
    integer, intent(out), optional :: ierr
    real(real64), pointer, contiguous :: t(:, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):) => t
  end subroutine shared_r64_5

  subroutine shared_r64_6(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(6), ubounds(6)
    real(real64), pointer, intent(out) :: a(:, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    real(real64), pointer, contiguous :: t(:, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):) => t
  end subroutine shared_r64_6

  subroutine shared_r64_7(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(7), ubounds(7)
    real(real64), pointer, intent(out) :: a(:, :, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    real(real64), pointer, contiguous :: t(:, :, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):, lbounds(7):) => t
  end subroutine shared_r64_7

  subroutine shared_r32_5(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(5), ubounds(5)
    real(real32), pointer, intent(out) :: a(:, :, :, :, :)
    integer, intent(out), optional :: ierr
    real(real32), pointer, contiguous :: t(:, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):) => t
  end subroutine shared_r32_5

  subroutine shared_r32_6(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(6), ubounds(6)
    real(real32), pointer, intent(out) :: a(:, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    real(real32), pointer, contiguous :: t(:, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):) => t
  end subroutine shared_r32_6

  subroutine shared_r32_7(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(7), ubounds(7)
    real(real32), pointer, intent(out) :: a(:, :, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    real(real32), pointer, contiguous :: t(:, :, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, F32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):, lbounds(7):) => t
  end subroutine shared_r32_7

  subroutine shared_i32_5(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(5), ubounds(5)
    integer(int32), pointer, intent(out) :: a(:, :, :, :, :)
    integer, intent(out), optional :: ierr
    integer(int32), pointer, contiguous :: t(:, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):) => t
  end subroutine shared_i32_5

  subroutine shared_i32_6(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(6), ubounds(6)
    integer(int32), pointer, intent(out) :: a(:, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    integer(int32), pointer, contiguous :: t(:, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):) => t
  end subroutine shared_i32_6

  subroutine shared_i32_7(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(7), ubounds(7)
    integer(int32), pointer, intent(out) :: a(:, :, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    integer(int32), pointer, contiguous :: t(:, :, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):, lbounds(7):) => t
  end subroutine shared_i32_7

  subroutine shared_i64_5(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(5), ubounds(5)
    integer(int64), pointer, intent(out) :: a(:, :, :, :, :)
    integer, intent(out), optional :: ierr
    integer(int64), pointer, contiguous :: t(:, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):) => t
  end subroutine shared_i64_5

  subroutine shared_i64_6(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(6), ubounds(6)
    integer(int64), pointer, intent(out) :: a(:, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    integer(int64), pointer, contiguous :: t(:, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):) => t
  end subroutine shared_i64_6

  subroutine shared_i64_7(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(7), ubounds(7)
    integer(int64), pointer, intent(out) :: a(:, :, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    integer(int64), pointer, contiguous :: t(:, :, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, I64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):, lbounds(7):) => t
  end subroutine shared_i64_7

  subroutine shared_c32_5(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(5), ubounds(5)
    complex(real32), pointer, intent(out) :: a(:, :, :, :, :)
    integer, intent(out), optional :: ierr
    complex(real32), pointer, contiguous :: t(:, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):) => t
  end subroutine shared_c32_5

  subroutine shared_c32_6(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(6), ubounds(6)
    complex(real32), pointer, intent(out) :: a(:, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    complex(real32), pointer, contiguous :: t(:, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):) => t
  end subroutine shared_c32_6

  subroutine shared_c32_7(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(7), ubounds(7)
    complex(real32), pointer, intent(out) :: a(:, :, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    complex(real32), pointer, contiguous :: t(:, :, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C32, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):, lbounds(7):) => t
  end subroutine shared_c32_7

  subroutine shared_c64_5(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(5), ubounds(5)
    complex(real64), pointer, intent(out) :: a(:, :, :, :, :)
    integer, intent(out), optional :: ierr
    complex(real64), pointer, contiguous :: t(:, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):) => t
  end subroutine shared_c64_5

  subroutine shared_c64_6(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(6), ubounds(6)
    complex(real64), pointer, intent(out) :: a(:, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    complex(real64), pointer, contiguous :: t(:, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):) => t
  end subroutine shared_c64_6

  subroutine shared_c64_7(x, set, field, lbounds, ubounds, a, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: set, field, lbounds(7), ubounds(7)
    complex(real64), pointer, intent(out) :: a(:, :, :, :, :, :, :)
    integer, intent(out), optional :: ierr
    complex(real64), pointer, contiguous :: t(:, :, :, :, :, :, :)
    type(c_ptr) :: p
    integer(c_int) :: rc
    nullify (a)
    rc = shared_address(x, set, field, C64, ubounds - lbounds + 1, p)
    call finish(rc, ierr)
    if (rc /= SODE_OK) return
    call c_f_pointer(p, t, ubounds - lbounds + 1)
    a(lbounds(1):, lbounds(2):, lbounds(3):, lbounds(4):, lbounds(5):, lbounds(6):, lbounds(7):) => t
  end subroutine shared_c64_7

  !> A sode_array of elements of `ty`, shape `shp`, without its address
  !> (which `c_loc` gives only where it is contiguous).
  function described(ty, shp, contiguous) result(given)
    integer, intent(in) :: ty, shp(:)
    logical, intent(in) :: contiguous
    type(sode_array_ref) :: given
    given%ty = ty
    given%ndims = size(shp)
    given%shp(1:size(shp)) = shp
    given%contiguous = contiguous
  end function described

  function array_r64_1(a) result(given)
    real(real64), pointer, intent(in) :: a(:)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r64_1

  function array_r64_2(a) result(given)
    real(real64), pointer, intent(in) :: a(:, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r64_2

  function array_r64_3(a) result(given)
    real(real64), pointer, intent(in) :: a(:, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r64_3

  function array_r64_4(a) result(given)
    real(real64), pointer, intent(in) :: a(:, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r64_4

  function array_r64_5(a) result(given)
    real(real64), pointer, intent(in) :: a(:, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r64_5

  function array_r64_6(a) result(given)
    real(real64), pointer, intent(in) :: a(:, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r64_6

  function array_r64_7(a) result(given)
    real(real64), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r64_7

  function array_r32_1(a) result(given)
    real(real32), pointer, intent(in) :: a(:)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r32_1

  function array_r32_2(a) result(given)
    real(real32), pointer, intent(in) :: a(:, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r32_2

  function array_r32_3(a) result(given)
    real(real32), pointer, intent(in) :: a(:, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r32_3

  function array_r32_4(a) result(given)
    real(real32), pointer, intent(in) :: a(:, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r32_4

  function array_r32_5(a) result(given)
    real(real32), pointer, intent(in) :: a(:, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r32_5

  function array_r32_6(a) result(given)
    real(real32), pointer, intent(in) :: a(:, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r32_6

  function array_r32_7(a) result(given)
    real(real32), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(F32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_r32_7

  function array_i32_1(a) result(given)
    integer(int32), pointer, intent(in) :: a(:)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i32_1

  function array_i32_2(a) result(given)
    integer(int32), pointer, intent(in) :: a(:, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i32_2

  function array_i32_3(a) result(given)
    integer(int32), pointer, intent(in) :: a(:, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i32_3

  function array_i32_4(a) result(given)
    integer(int32), pointer, intent(in) :: a(:, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i32_4

  function array_i32_5(a) result(given)
    integer(int32), pointer, intent(in) :: a(:, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i32_5

  function array_i32_6(a) result(given)
    integer(int32), pointer, intent(in) :: a(:, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i32_6

  function array_i32_7(a) result(given)
    integer(int32), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i32_7

  function array_i64_1(a) result(given)
    integer(int64), pointer, intent(in) :: a(:)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i64_1

  function array_i64_2(a) result(given)
    integer(int64), pointer, intent(in) :: a(:, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i64_2

  function array_i64_3(a) result(given)
    integer(int64), pointer, intent(in) :: a(:, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i64_3

  function array_i64_4(a) result(given)
    integer(int64), pointer, intent(in) :: a(:, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i64_4

  function array_i64_5(a) result(given)
    integer(int64), pointer, intent(in) :: a(:, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i64_5

  function array_i64_6(a) result(given)
    integer(int64), pointer, intent(in) :: a(:, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i64_6

  function array_i64_7(a) result(given)
    integer(int64), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(I64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_i64_7

  function array_c32_1(a) result(given)
    complex(real32), pointer, intent(in) :: a(:)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c32_1

  function array_c32_2(a) result(given)
    complex(real32), pointer, intent(in) :: a(:, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c32_2

  function array_c32_3(a) result(given)
    complex(real32), pointer, intent(in) :: a(:, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c32_3

  function array_c32_4(a) result(given)
    complex(real32), pointer, intent(in) :: a(:, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c32_4

  function array_c32_5(a) result(given)
    complex(real32), pointer, intent(in) :: a(:, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c32_5

  function array_c32_6(a) result(given)
    complex(real32), pointer, intent(in) :: a(:, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c32_6

  function array_c32_7(a) result(given)
    complex(real32), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C32, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c32_7

  function array_c64_1(a) result(given)
    complex(real64), pointer, intent(in) :: a(:)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c64_1

  function array_c64_2(a) result(given)
    complex(real64), pointer, intent(in) :: a(:, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c64_2

  function array_c64_3(a) result(given)
    complex(real64), pointer, intent(in) :: a(:, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c64_3

  function array_c64_4(a) result(given)
    complex(real64), pointer, intent(in) :: a(:, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c64_4

  function array_c64_5(a) result(given)
    complex(real64), pointer, intent(in) :: a(:, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c64_5

  function array_c64_6(a) result(given)
    complex(real64), pointer, intent(in) :: a(:, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c64_6

  function array_c64_7(a) result(given)
    complex(real64), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    type(sode_array_ref) :: given
    if (.not. associated(a)) return
    given = described(C64, shape(a), is_contiguous(a))
    if (given%contiguous) given%ptr = c_loc(a)
  end function array_c64_7

  subroutine add_r64_1(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real64), pointer, intent(in) :: a(:)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r64_1

  subroutine add_r64_2(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real64), pointer, intent(in) :: a(:, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r64_2

  subroutine add_r64_3(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real64), pointer, intent(in) :: a(:, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r64_3

  subroutine add_r64_4(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real64), pointer, intent(in) :: a(:, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r64_4

  subroutine add_r32_1(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real32), pointer, intent(in) :: a(:)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r32_1

  subroutine add_r32_2(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real32), pointer, intent(in) :: a(:, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r32_2

  subroutine add_r32_3(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real32), pointer, intent(in) :: a(:, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r32_3

  subroutine add_r32_4(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real32), pointer, intent(in) :: a(:, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r32_4

  subroutine add_i32_1(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int32), pointer, intent(in) :: a(:)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i32_1

  subroutine add_i32_2(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int32), pointer, intent(in) :: a(:, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i32_2

  subroutine add_i32_3(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int32), pointer, intent(in) :: a(:, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i32_3

  subroutine add_i32_4(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int32), pointer, intent(in) :: a(:, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i32_4

  subroutine add_i64_1(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int64), pointer, intent(in) :: a(:)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i64_1

  subroutine add_i64_2(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int64), pointer, intent(in) :: a(:, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i64_2

  subroutine add_i64_3(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int64), pointer, intent(in) :: a(:, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i64_3

  subroutine add_i64_4(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int64), pointer, intent(in) :: a(:, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i64_4

  subroutine add_c32_1(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real32), pointer, intent(in) :: a(:)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c32_1

  subroutine add_c32_2(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real32), pointer, intent(in) :: a(:, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c32_2

  subroutine add_c32_3(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real32), pointer, intent(in) :: a(:, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c32_3

  subroutine add_c32_4(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real32), pointer, intent(in) :: a(:, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c32_4

  subroutine add_c64_1(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real64), pointer, intent(in) :: a(:)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c64_1

  subroutine add_c64_2(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real64), pointer, intent(in) :: a(:, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c64_2

  subroutine add_c64_3(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real64), pointer, intent(in) :: a(:, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c64_3

  subroutine add_c64_4(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real64), pointer, intent(in) :: a(:, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c64_4

  subroutine add_r64_5(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real64), pointer, intent(in) :: a(:, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r64_5

  subroutine add_r64_6(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real64), pointer, intent(in) :: a(:, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r64_6

  subroutine add_r64_7(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real64), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r64_7

  subroutine add_r32_5(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real32), pointer, intent(in) :: a(:, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r32_5

  subroutine add_r32_6(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real32), pointer, intent(in) :: a(:, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r32_6

  subroutine add_r32_7(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    real(real32), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), F32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_r32_7

  subroutine add_i32_5(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int32), pointer, intent(in) :: a(:, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i32_5

  subroutine add_i32_6(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int32), pointer, intent(in) :: a(:, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i32_6

  subroutine add_i32_7(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int32), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i32_7

  subroutine add_i64_5(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int64), pointer, intent(in) :: a(:, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i64_5

  subroutine add_i64_6(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int64), pointer, intent(in) :: a(:, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i64_6

  subroutine add_i64_7(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    integer(int64), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), I64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_i64_7

  subroutine add_c32_5(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real32), pointer, intent(in) :: a(:, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c32_5

  subroutine add_c32_6(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real32), pointer, intent(in) :: a(:, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c32_6

  subroutine add_c32_7(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real32), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C32, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c32_7

  subroutine add_c64_5(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real64), pointer, intent(in) :: a(:, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c64_5

  subroutine add_c64_6(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real64), pointer, intent(in) :: a(:, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c64_6

  subroutine add_c64_7(x, a, first, last, ierr, halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    complex(real64), pointer, intent(in) :: a(:, :, :, :, :, :, :)
    integer, intent(in) :: first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    if (held(is_contiguous(a), ierr)) call add_any(x, c_loc(a), C64, shape(a), lbound(a), first, last, ierr, halo_lo, halo_hi)
  end subroutine add_c64_7

  !> Adds a field of elements of `elem_bytes` bytes each, copied as they
  !> are (a derived type with BIND(C) or SEQUENCE, a character string):
  !> `base` is `c_loc` of the whole array (contiguous, with the TARGET
  !> attribute), `lbounds` and `ubounds` its bounds; the rest as in
  !> sode_add_field: `call sode_add_field_bytes(x, c_loc(s), int(c_sizeof(s(1, 1))),
  !> lbound(s), ubound(s), first=[1, 1], last=[nx, ny])`.
  subroutine sode_add_field_bytes(x, base, elem_bytes, lbounds, ubounds, first, last, ierr, &
       halo_lo, halo_hi)
    type(sode_exchange), intent(inout) :: x
    type(c_ptr), intent(in) :: base
    integer, intent(in) :: elem_bytes, lbounds(:), ubounds(:), first(:), last(:)
    integer, intent(in), optional :: halo_lo(:), halo_hi(:)
    integer, intent(out), optional :: ierr
    character(len=24) :: n
    if (elem_bytes < 1 .or. size(ubounds) /= size(lbounds)) then
       write (n, '(i0)') elem_bytes
       call finish(c_report_error(int(SODE_ERR_ARG, c_int), &
            'sode_add_field_bytes: elements of ' // trim(n) // ' bytes, or lbounds and ubounds of' // &
            ' different sizes: give at least 1 byte, and one bound of each per dimension' // c_null_char), ierr)
       return
    end if
    call add_any(x, base, -elem_bytes, ubounds - lbounds + 1, lbounds, first, last, ierr, halo_lo, halo_hi)
  end subroutine sode_add_field_bytes

  !> Which channels carry the messages (before commit, the same on every
  !> rank): SODE_TRANSPORT_AUTO (shared memory on the node, RDMA or TCP
  !> between; the default), SODE_TRANSPORT_SHM, SODE_TRANSPORT_RDMA or
  !> SODE_TRANSPORT_TCP.
  subroutine sode_set_transport(x, transport, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: transport
    integer, intent(out), optional :: ierr
    call finish(c_set_transport(x%ptr, int(transport, c_int)), ierr)
  end subroutine sode_set_transport

  !> Which faces travel in place over RDMA (before commit): SODE_ZERO_COPY_AUTO
  !> (the default, or what SODE_ZERO_COPY says), SODE_ZERO_COPY_ALWAYS or
  !> SODE_ZERO_COPY_NEVER. In place, between sode_start and the end of
  !> sode_wait the cells sent must not be written nor the halos touched.
  subroutine sode_set_zero_copy(x, mode, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: mode
    integer, intent(out), optional :: ierr
    call finish(c_set_zero_copy(x%ptr, int(mode, c_int)), ierr)
  end subroutine sode_set_zero_copy

  !> Makes the starts that follow move at most `depth` layers of each
  !> halo, those nearest the owned cells (0, the default: every layer, as
  !> committed). One exchange committed at the widest halos then serves
  !> the steps that need fewer layers: `call sode_set_depth(x, 1)` before
  !> `call sode_start_fields(x, [2, 3])`. Any time but while an exchange is
  !> in flight; every rank alike. A start at a depth fails where faces
  !> travel in place over RDMA (`sode_set_zero_copy(x,
  !> SODE_ZERO_COPY_NEVER)` before commit packs them).
  subroutine sode_set_depth(x, depth, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: depth
    integer, intent(out), optional :: ierr
    call finish(c_set_depth(x%ptr, int(depth, c_int)), ierr)
  end subroutine sode_set_depth

  !> How each neighbour is reached, one line per link (after commit):
  !> `rank 1 (y+): rdma; sends 8192 bytes in place (1 runs); ...`.
  function sode_describe(x, ierr) result(text)
    type(sode_exchange), intent(inout) :: x
    integer, intent(out), optional :: ierr
    character(len=:), allocatable :: text
    character(kind=c_char), allocatable :: buf(:)
    integer(c_size_t) :: needed
    integer(c_int) :: rc
    integer :: i
    needed = 0
    allocate (buf(1))
    rc = c_describe(x%ptr, buf, 0_c_size_t, needed)
    if (rc == SODE_OK) then
       deallocate (buf)
       allocate (buf(max(needed, 1_c_size_t)))
       rc = c_describe(x%ptr, buf, size(buf, kind=c_size_t), needed)
    end if
    call finish(rc, ierr)
    if (rc /= SODE_OK) then
       text = ''
       return
    end if
    allocate (character(len=max(int(needed) - 1, 0)) :: text)
    do i = 1, len(text)
       text(i:i) = buf(i)
    end do
  end function sode_describe

  !> Checks the exchange across the job and sets up its channels;
  !> collective, every rank gets the same status.
  subroutine sode_commit(x, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(out), optional :: ierr
    call finish(c_commit(x%ptr), ierr)
  end subroutine sode_commit

  !> Packs the faces and starts the exchange.
  subroutine sode_start(x, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(out), optional :: ierr
    call finish(c_start(x%ptr), ierr)
  end subroutine sode_start

  !> sode_lend_arrays of `c_loc`s.
  subroutine lend_arrays_loc(x, arrays, ierr)
    type(sode_exchange), intent(inout) :: x
    type(c_ptr), intent(in) :: arrays(:)
    integer, intent(out), optional :: ierr
    call finish(c_lend_arrays(x%ptr, size(arrays, kind=c_int), arrays), ierr)
  end subroutine lend_arrays_loc

  !> sode_lend_arrays of sode_arrays, each checked against its field.
  subroutine lend_arrays_given(x, arrays, ierr)
    type(sode_exchange), intent(inout) :: x
    type(sode_array_ref), intent(in) :: arrays(:)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: at(size(arrays))
    integer(c_int) :: rc
    integer :: k
    rc = checked(x, ROUTINE_LEND, [(k, k = 1, size(arrays))], arrays, at)
    if (rc == SODE_OK) rc = c_lend_arrays(x%ptr, size(arrays, kind=c_int), at)
    call finish(rc, ierr)
  end subroutine lend_arrays_given

  !> sode_start_arrays of `c_loc`s.
  subroutine start_arrays_loc(x, arrays, ierr)
    type(sode_exchange), intent(inout) :: x
    type(c_ptr), intent(in) :: arrays(:)
    integer, intent(out), optional :: ierr
    call finish(c_start_arrays(x%ptr, size(arrays, kind=c_int), arrays), ierr)
  end subroutine start_arrays_loc

  !> sode_start_arrays of sode_arrays, each checked against its field.
  subroutine start_arrays_given(x, arrays, ierr)
    type(sode_exchange), intent(inout) :: x
    type(sode_array_ref), intent(in) :: arrays(:)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: at(size(arrays))
    integer(c_int) :: rc
    integer :: k
    rc = checked(x, ROUTINE_START, [(k, k = 1, size(arrays))], arrays, at)
    if (rc == SODE_OK) rc = c_start_arrays(x%ptr, size(arrays, kind=c_int), at)
    call finish(rc, ierr)
  end subroutine start_arrays_given

  !> The addresses of `arrays` in `at`, once sode has found each of the
  !> type, rank and shape of field `fields(k)` (from 1) and contiguous;
  !> the first refusal's status. `routine` names the call in the message.
  integer(c_int) function checked(x, routine, fields, arrays, at) result(rc)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: routine, fields(:)
    type(sode_array_ref), intent(in) :: arrays(:)
    type(c_ptr), intent(out) :: at(:)
    integer :: k
    character(len=*), parameter :: names(0:2) = [character(len=17) :: &
         'sode_start_arrays', 'sode_lend_arrays', 'sode_start_fields']
    at = c_null_ptr
    rc = SODE_OK
    do k = 1, min(size(arrays), size(fields))
       rc = numbered(trim(names(routine)), 'field', fields(k))
       if (rc /= SODE_OK) return
       if (arrays(k)%ty < 0) then
          rc = c_report_error(int(SODE_ERR_ARG, c_int), trim(names(routine)) // &
               ': an entry of the list is not an array: a POINTER not associated, or not made by sode_array(a)' &
               // c_null_char)
          return
       end if
       rc = c_check_array(x%ptr, int(routine, c_int), int(fields(k) - 1, c_int), int(arrays(k)%ty, c_int), &
            int(arrays(k)%ndims, c_int), arrays(k)%shp, merge(1_c_int, 0_c_int, arrays(k)%contiguous))
       if (rc /= SODE_OK) return
       at(k) = arrays(k)%ptr
    end do
  end function checked

  !> sode_start_fields on the fields' own arrays.
  subroutine start_fields(x, fields, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: fields(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: ids(size(fields))
    type(c_ptr) :: own(1)
    ids = int(fields, c_int)
    own = c_null_ptr
    call finish(c_start_fields(x%ptr, size(fields, kind=c_int), ids, 0_c_int, own), ierr)
  end subroutine start_fields

  !> sode_start_fields on other arrays: `arrays(k)` is `c_loc` of the
  !> array for field `fields(k)` (or `c_null_ptr` for its own).
  subroutine start_fields_arrays(x, fields, arrays, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: fields(:)
    type(c_ptr), intent(in) :: arrays(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: ids(size(fields))
    ids = int(fields, c_int)
    call finish(c_start_fields(x%ptr, size(fields, kind=c_int), ids, size(arrays, kind=c_int), arrays), ierr)
  end subroutine start_fields_arrays

  !> sode_start_fields on sode_arrays: `arrays(k)` for field `fields(k)`,
  !> checked against it.
  subroutine start_fields_given(x, fields, arrays, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(in) :: fields(:)
    type(sode_array_ref), intent(in) :: arrays(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: ids(size(fields))
    type(c_ptr) :: at(size(arrays))
    integer(c_int) :: rc
    ids = int(fields, c_int)
    rc = checked(x, ROUTINE_FIELDS, fields, arrays, at)
    if (rc == SODE_OK) rc = c_start_fields(x%ptr, size(fields, kind=c_int), ids, size(arrays, kind=c_int), at)
    call finish(rc, ierr)
  end subroutine start_fields_given

  !> Waits for every halo: up to `timeout` seconds (SODE_NO_DEADLINE: as
  !> long as it takes), by default as long as SODE_TIMEOUT says (no
  !> deadline when it is unset, as MPI waits; a rank that dies is reported
  !> by the job's health all the same).
  subroutine sode_wait(x, ierr, timeout)
    type(sode_exchange), intent(inout) :: x
    real(real64), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    call finish(c_wait(x%ptr, seconds(timeout, SODE_TIMEOUT_DEFAULT)), ierr)
  end subroutine sode_wait

  !> One pass: `done` once every halo has arrived and is in place. Polled
  !> without completing for SODE_WAIT_WARN seconds, it warns as sode_wait.
  subroutine sode_test(x, done, ierr)
    type(sode_exchange), intent(inout) :: x
    logical, intent(out) :: done
    integer, intent(out), optional :: ierr
    integer(c_int) :: d
    d = 0
    call finish(c_test(x%ptr, d), ierr)
    done = d /= 0
  end subroutine sode_test

  !> What `x` has done since its commit or sode_reset_stats. Local.
  subroutine sode_get_stats(x, stats, ierr)
    type(sode_exchange), intent(in) :: x
    type(sode_stats), intent(out) :: stats
    integer, intent(out), optional :: ierr
    call finish(c_exchange_stats(x%ptr, stats), ierr)
  end subroutine sode_get_stats

  !> The starts of `x` since its commit or sode_reset_stats whose faces
  !> built to travel in place over RDMA went through sode's buffers: on
  !> arrays neither added nor lent (sode_lend_arrays), or on some fields
  !> or fewer layers. Local.
  subroutine sode_get_staged_starts(x, count, ierr)
    type(sode_exchange), intent(in) :: x
    integer(int64), intent(out) :: count
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: n
    call finish(c_staged_starts(x%ptr, n), ierr)
    count = n
  end subroutine sode_get_staged_starts

  !> Neighbour `i` (1 to stats%neighbours) of `x`: its rank, its channel
  !> ("shm", "rdma", "tcp", or "local": this rank itself) and the bytes one
  !> iteration sends it and receives from it. Local.
  subroutine sode_get_neighbour_stats(x, i, rank, channel, bytes_sent, bytes_received, ierr)
    type(sode_exchange), intent(in) :: x
    integer, intent(in) :: i
    integer, intent(out) :: rank
    character(len=:), allocatable, intent(out) :: channel
    integer(int64), intent(out) :: bytes_sent, bytes_received
    integer, intent(out), optional :: ierr
    type(neighbour_stats) :: n
    integer(c_int) :: rc
    rc = c_neighbour_stats(x%ptr, int(i - 1, c_int), n)
    rank = -1
    channel = ''
    bytes_sent = 0
    bytes_received = 0
    if (rc == SODE_OK) then
       rank = int(n%rank)
       channel = fortran_string(n%channel)
       bytes_sent = n%bytes_sent
       bytes_received = n%bytes_received
    end if
    call finish(rc, ierr)
  end subroutine sode_get_neighbour_stats

  !> Sets the counters of sode_get_stats to zero. Local.
  subroutine sode_reset_stats(x, ierr)
    type(sode_exchange), intent(in) :: x
    integer, intent(out), optional :: ierr
    call finish(c_reset_stats(x%ptr), ierr)
  end subroutine sode_reset_stats

  subroutine sode_exchange_free(x, ierr)
    type(sode_exchange), intent(inout) :: x
    integer, intent(out), optional :: ierr
    call finish(c_exchange_free(x%ptr), ierr)
  end subroutine sode_exchange_free

end module sode
