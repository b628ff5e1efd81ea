/* The SCALE-LES3 halo exchange of the RSched paper as an MPI persistent
 * exchange (MPI_Send_init / MPI_Recv_init, MPI_Startall / MPI_Waitall), the
 * baseline the scale_les3 example is compared with in the same run.
 *
 *   mpirun -np 4 scale_les3_mpi PX PY ITERS K[,K...] SET[,SET...]
 *
 * The puts, their sizes and their order are the paper's (and
 * sode_scheduler::patterns::scale_les3's): diagonals first (2 puts each),
 * then E, W (1 each), N, S (2 each); each goes to the neighbour in its
 * direction on a periodic PX x PY grid, tagged with its index, and is
 * received from the opposite neighbour. Pseudo-collective, as in the paper:
 * a barrier, Startall, Waitall, a barrier; the time from Startall to the
 * end of Waitall is measured on rank 0. Prints one markdown row per point:
 * | k | set | mpi-persistent | median | min | mean | - |
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

struct put { int dx, dy; long bytes; };

static int pattern(long k, const char *set, struct put *p) {
  long column = 2 + k + 2, ew = column * 2 * 16 * 8, ns = column * 16 * 8, diag = column * 2 * 8;
  int n = 0, d = !strcmp(set, "diag") || !strcmp(set, "all8");
  int e = !strcmp(set, "ew") || !strcmp(set, "ewns") || !strcmp(set, "all8");
  int s = !strcmp(set, "ns") || !strcmp(set, "ewns") || !strcmp(set, "all8");
  if (!d && !e && !s) return -1;
  if (d) {
    int off[4][2] = {{1, 1}, {-1, 1}, {1, -1}, {-1, -1}};
    for (int i = 0; i < 4; i++)
      for (int c = 0; c < 2; c++) p[n++] = (struct put){off[i][0], off[i][1], diag};
  }
  if (e) { p[n++] = (struct put){1, 0, ew}; p[n++] = (struct put){-1, 0, ew}; }
  if (s) {
    for (int c = 0; c < 2; c++) p[n++] = (struct put){0, 1, ns};
    for (int c = 0; c < 2; c++) p[n++] = (struct put){0, -1, ns};
  }
  return n;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 6) {
    if (!rank) fprintf(stderr, "usage: %s PX PY ITERS K[,K...] SET[,SET...]\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int px = atoi(argv[1]), py = atoi(argv[2]), iters = atoi(argv[3]);
  if (px * py != size || iters < 1) {
    if (!rank) fprintf(stderr, "the grid %d x %d needs %d ranks, the job has %d\n", px, py, px * py, size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int mx = rank % px, my = rank / px;
  char *ks = strdup(argv[4]), *sets_arg = argv[5];
  double *t = malloc(sizeof(double) * iters);
  for (char *kt = strtok(ks, ","); kt; kt = strtok(NULL, ",")) {
    long k = atol(kt);
    char *sets = strdup(sets_arg), *save = NULL;
    for (char *set = strtok_r(sets, ",", &save); set; set = strtok_r(NULL, ",", &save)) {
      struct put p[14];
      int n = pattern(k, set, p);
      if (n < 0) {
        if (!rank) fprintf(stderr, "unknown set %s\n", set);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      long total = 0;
      for (int i = 0; i < n; i++) total += p[i].bytes;
      char *sbuf = calloc(total, 1), *rbuf = calloc(total, 1);
      MPI_Request req[28];
      long at = 0;
      for (int i = 0; i < n; i++) {
        int to = ((mx + p[i].dx + px) % px) + px * ((my + p[i].dy + py) % py);
        int from = ((mx - p[i].dx + px) % px) + px * ((my - p[i].dy + py) % py);
        MPI_Send_init(sbuf + at, (int)p[i].bytes, MPI_BYTE, to, i, MPI_COMM_WORLD, &req[2 * i]);
        MPI_Recv_init(rbuf + at, (int)p[i].bytes, MPI_BYTE, from, i, MPI_COMM_WORLD, &req[2 * i + 1]);
        at += p[i].bytes;
      }
      for (int it = -3; it < iters; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Startall(2 * n, req);
        MPI_Waitall(2 * n, req, MPI_STATUSES_IGNORE);
        double dt = (MPI_Wtime() - t0) * 1e6;
        MPI_Barrier(MPI_COMM_WORLD);
        if (it >= 0) t[it] = dt;
      }
      if (!rank) {
        double sum = 0;
        for (int i = 0; i < iters; i++) sum += t[i];
        qsort(t, iters, sizeof(double), cmp);
        printf("| %ld | %s | mpi-persistent | %.1f | %.1f | %.1f | - |\n", k, set, t[iters / 2], t[0], sum / iters);
        fflush(stdout);
      }
      for (int i = 0; i < 2 * n; i++) MPI_Request_free(&req[i]);
      free(sbuf);
      free(rbuf);
    }
    free(sets);
  }
  free(t);
  free(ks);
  MPI_Finalize();
  return 0;
}
