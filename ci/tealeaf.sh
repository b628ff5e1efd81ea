#!/usr/bin/env bash
# TeaLeaf (UK-MAC/TeaLeaf_ref: Fortran 90 and MPI, 2-D heat conduction)
# with its halo exchange ported to sode, beside the MPI original.
#
#   bash ci/tealeaf.sh [ranks...]      # default: 1 2 4
#
# Both are built from the client's own sources and Makefile with the same
# flags; the port is ci/clients/tealeaf.patch (tea_exchange through sode:
# one committed exchange of every field per depth, made when first asked
# for, started on the fields asked for), linked against the installed sode with pkg-config sode_fortran.
# Each input deck (every solver: CG, CG with block Jacobi, PPCG with
# halo depth 3, Chebyshev, Jacobi) runs under mpirun on each rank count;
# every number in the two tea.out files must agree, digit for digit (only
# wall-clock lines are left out), and TeaLeaf's own check of its answer
# must pass in both where the deck asks for it. SODE_CLIENTS and
# SODE_PREFIX as in ci/clients/common.sh.
set -euo pipefail
# shellcheck source=ci/clients/common.sh
source "$(dirname "$0")/clients/common.sh"
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(1 2 4)

have_client tealeaf || exit 0
src=$clients/tealeaf
installed_sode
fresh_copies tealeaf "$src"

# GNU flags without OpenMP (one tile per rank, as the port expects);
# Debian's gfortran needs the argument-mismatch allowance for mpif.h.
make_flags=(COMPILER=GNU OMP_GNU= -j 2)
echo "-- building the MPI original and the sode port ($(patch_size tealeaf))"
make -C "$work/tealeaf-mpi" "${make_flags[@]}" OPTIONS=-fallow-argument-mismatch >/dev/null 2>&1 \
  || { make -C "$work/tealeaf-mpi" "${make_flags[@]}" OPTIONS=-fallow-argument-mismatch 2>&1 | tail -20; exit 1; }
sode_options="-fallow-argument-mismatch $(pkg-config --cflags sode_fortran)"
sode_libs=$(pkg-config --libs sode_fortran)
make -C "$work/tealeaf-sode" "${make_flags[@]}" OPTIONS="$sode_options" LDLIBS="$sode_libs" >/dev/null 2>&1 \
  || { make -C "$work/tealeaf-sode" "${make_flags[@]}" OPTIONS="$sode_options" LDLIBS="$sode_libs" 2>&1 | tail -20; exit 1; }

# The decks: Benchmarks/tea_bm_2.in's problem (250 x 250 cells), whose
# expected answer after 10 steps TeaLeaf checks (test_problem 2).
deck() { # name, settings...
  local name=$1
  shift
  tealeaf_deck "$work/$name.in" tea_bm_2 "$@"
}
deck cg end_step=10 tl_max_iters=10000 tl_use_cg "tl_eps 1.0e-15" "test_problem 2"
deck cg-block end_step=10 tl_max_iters=10000 tl_use_cg "tl_eps 1.0e-15" tl_preconditioner_type=jac_block \
  reflective_boundary "test_problem 2"
deck ppcg end_step=10 tl_max_iters=10000 tl_use_ppcg "tl_eps 1.0e-15" tl_ppcg_inner_steps=10 halo_depth=3 \
  tl_preconditioner_type=jac_diag reflective_boundary "test_problem 2"
deck cheby end_step=2 tl_max_iters=10000 tl_use_chebyshev "tl_eps 1.0e-15"
deck jacobi end_step=3 tl_max_iters=400 tl_use_jacobi "tl_eps 1.0e-15" reflective_boundary

run() { # build, deck, ranks: leaves tea.out as NAME-RANKS.out
  local dir=$work/tealeaf-$1
  cp "$work/$2.in" "$dir/tea.in"
  (cd "$dir" && timeout 300 "${mpirun[@]}" -n "$3" ./tea_leaf > "run-$2-$3.log" 2>&1) \
    || { tail -20 "$dir/run-$2-$3.log"; echo "error: tealeaf-$1 failed on $2 with $3 ranks" >&2; exit 1; }
  grep -v "Wall clock\|time per cell\|overhead" "$dir/tea.out" > "$dir/$2-$3.out"
}

for d in cg cg-block ppcg cheby jacobi; do
  for n in "${ranks[@]}"; do
    # Alternating which goes first, so neither always runs on a warm machine.
    if [ $(( n % 2 )) -eq 0 ]; then run mpi "$d" "$n"; run sode "$d" "$n"
    else run sode "$d" "$n"; run mpi "$d" "$n"; fi
    mpi_out=$work/tealeaf-mpi/$d-$n.out
    sode_out=$work/tealeaf-sode/$d-$n.out
    if ! diff "$mpi_out" "$sode_out" > "$work/tealeaf-$d-$n.diff"; then
      head -20 "$work/tealeaf-$d-$n.diff"
      echo "error: TeaLeaf over sode differs from MPI on $d with $n ranks (< MPI, > sode)" >&2
      exit 1
    fi
    if grep -q "^test_problem" "$work/$d.in" && ! grep -q "considered PASSED" "$sode_out"; then
      echo "error: TeaLeaf's own check failed on $d with $n ranks" >&2
      exit 1
    fi
    iterations=$(grep -c "Iteration count" "$sode_out")
    numbers=$(grep -o "[0-9][0-9.E+-]*" "$sode_out" | wc -l)
    [ "$iterations" -gt 0 ] || { echo "error: no solver output from $d with $n ranks" >&2; exit 1; }
    echo "ok: $d, $n ranks: $numbers numbers the same as MPI's ($iterations solves)$(grep -q "^test_problem" "$work/$d.in" && echo ", TeaLeaf's check passed")"
  done
done
