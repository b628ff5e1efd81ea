/* A 1-D decomposition: a ring of ranks (periodic) and a line (not), each
 * rank owning a block of a global array of int64 with two halo cells on
 * each side, every halo cell checked against the value its owner holds.
 *
 *   mpirun -n 3 ./ring1d */
#include <mpi.h>
#include <sode_mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define GLOBAL 29
#define H 2

static int64_t value(int it, int g) { return (int64_t)it * 1000 + g; }

/* One exchange on a ring (periodic) or a line; returns the wrong cells. */
/* sode_exchange_stats after `iterations`: one link per neighbouring rank
 * the line or ring has (both directions to the same rank travel together;
 * a copy within the rank where the neighbour is this rank), H cells each
 * way per direction and iteration, and the totals from those. */
static int check_stats(sode_exchange *x, int rank, int size, int periodic, int iterations) {
    sode_stats s;
    int wrong = 0, expected = 0, remote = 0, peers[2], directions[2] = {0, 0};
    if (sode_exchange_stats(x, &s) != SODE_OK) {
        fprintf(stderr, "rank %d: stats: %s\n", rank, sode_last_error());
        return 1;
    }
    for (int d = -1; d <= 1; d += 2) {
        int peer = rank + d;
        if (periodic || (peer >= 0 && peer < size)) {
            peer = (peer + size) % size;
            int k = 0;
            while (k < expected && peers[k] != peer) {
                k++;
            }
            if (k == expected) {
                peers[expected++] = peer;
            }
            directions[k]++;
            remote += peer != rank;
        }
    }
    uint64_t face = H * sizeof(int64_t);
    wrong += s.neighbours != expected || s.exchanges != (uint64_t)iterations;
    wrong += s.bytes_sent != face * remote * iterations || s.bytes_received != face * remote * iterations;
    wrong += !(s.start_seconds > 0 && s.wait_seconds > 0);
    for (int i = 0; i < s.neighbours; i++) {
        sode_neighbour_stats n;
        wrong += sode_exchange_neighbour_stats(x, i, &n) != SODE_OK;
        int k = 0;
        while (k < expected && peers[k] != n.rank) {
            k++;
        }
        wrong += k == expected;
        uint64_t both = k < expected ? face * directions[k] : 0;
        wrong += n.bytes_sent != both || n.bytes_received != both;
        wrong += (strcmp(n.channel, "local") == 0) != (n.rank == rank);
    }
    sode_neighbour_stats none;
    wrong += sode_exchange_neighbour_stats(x, s.neighbours, &none) != SODE_ERR_ARG;
    wrong += sode_exchange_reset_stats(x) != SODE_OK || sode_exchange_stats(x, &s) != SODE_OK;
    wrong += s.exchanges != 0 || s.bytes_sent != 0 || s.start_seconds != 0.0;
    if (wrong) {
        fprintf(stderr, "rank %d: stats: %llu exchanges, %d neighbours (want %d), %llu bytes sent, %llu received (want %llu)\n",
                rank, (unsigned long long)s.exchanges, s.neighbours, expected, (unsigned long long)s.bytes_sent,
                (unsigned long long)s.bytes_received, (unsigned long long)(face * remote * iterations));
    }
    return wrong;
}

static int run(sode_comm *c, int rank, int size, int periodic) {
    int q = GLOBAL / size, r = GLOBAL % size;
    int start = rank * q + (rank < r ? rank : r), own = q + (rank < r);
    int64_t a[GLOBAL + 2 * H];
    int64_t ext[1] = {own + 2 * H}, lo[1] = {H}, size_own[1] = {own};
    int dims[1] = {size}, coords[1] = {rank}, per[1] = {periodic}, h[1] = {H};
    sode_exchange *x = NULL;
    int rc = sode_exchange_create_cart(c, 1, dims, coords, per, h, h, SODE_STAR, &x);
    rc = rc ? rc : sode_exchange_add_field(x, a, SODE_I64, 1, ext, lo, size_own, NULL, NULL, SODE_ORDER_C);
    rc = rc ? rc : sode_exchange_commit(x);
    int wrong = 0;
    for (int it = 1; it <= 3 && rc == SODE_OK; it++) {
        for (int i = 0; i < own + 2 * H; i++) {
            a[i] = (i >= H && i < H + own) ? value(it, start + i - H) : -1;
        }
        rc = sode_exchange_start(x);
        rc = rc ? rc : sode_exchange_wait(x, 60.0);
        for (int i = 0; i < own + 2 * H && rc == SODE_OK; i++) {
            int g = start + i - H;
            int owned = g >= 0 && g < GLOBAL;
            if (!owned && periodic) {
                g = (g + GLOBAL) % GLOBAL;
                owned = 1;
            }
            int64_t want = owned ? value(it, g) : -1;
            if (a[i] != want) {
                fprintf(stderr, "rank %d: cell %d is %lld, want %lld\n", rank, i, (long long)a[i],
                        (long long)want);
                wrong++;
            }
        }
    }
    if (rc != SODE_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, sode_last_error());
        wrong++;
    } else {
        wrong += check_stats(x, rank, size, periodic, 3);
    }
    sode_exchange_free(&x);
    return wrong;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sode_comm *c = NULL;
    if (sode_comm_create_mpi(MPI_COMM_WORLD, 60.0, &c) != SODE_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, sode_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int wrong = run(c, rank, size, 1) + run(c, rank, size, 0), all = 0;
    sode_comm_free(&c);
    MPI_Allreduce(&wrong, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf(all ? "ring1d: %d wrong cells\n" : "ok 1-D, %d ranks: a ring and a line, every halo cell its owner's value, the stats as sent\n",
               all ? all : size);
    }
    MPI_Finalize();
    return all != 0;
}
