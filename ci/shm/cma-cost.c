/* What one message of `size` bytes costs between two processes on two
 * CPUs, two ways a shared-memory transport can move it:
 *
 * - window: the sender copies its data into a buffer both map, the
 *   receiver copies it out (two copies in user space; sode's path for a
 *   program's own arrays);
 * - cma: the receiver reads the sender's memory with process_vm_readv
 *   (one copy, in the kernel, which pins the sender's pages first; the
 *   cross-memory attach that MPI libraries use for large messages).
 *
 * Each iteration the sender first writes its data (`written`, as a code's
 * step computes the cells it then sends) or leaves it as it was
 * (`unchanged`), then the message moves; the receiver times whole
 * iterations after a warm-up and prints microseconds per message.
 *
 *   cma-cost SIZE window|cma written|unchanged [ITERATIONS]
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

struct control {
    _Atomic long go, done;
};

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: cma-cost SIZE window|cma written|unchanged [ITERATIONS]\n");
        return 2;
    }
    size_t size = strtoul(argv[1], NULL, 10);
    int cma = strcmp(argv[2], "cma") == 0, written = strcmp(argv[3], "written") == 0;
    long iters = argc > 4 ? atol(argv[4]) : 2000, warm = iters / 4;
    if (size == 0 || size > (1ul << 30) || iters < 4) {
        fprintf(stderr, "cma-cost: SIZE 1 to 2^30 bytes, ITERATIONS at least 4\n");
        return 2;
    }
    struct control *c = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *window = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    char *src = malloc(size);
    if (c == MAP_FAILED || window == MAP_FAILED || !src) {
        perror("cma-cost");
        return 1;
    }
    memset(src, 1, size);
    pid_t sender = getpid(), child = fork();
    if (child == 0) {
        pin(1);
        char *dst = malloc(size);
        memset(dst, 0, size);
        struct iovec local = {dst, size}, remote = {src, size};
        double start = 0.0;
        for (long it = 1; it <= iters; it++) {
            while (atomic_load(&c->go) != it) {
            }
            if (it == warm + 1) {
                start = now();
            }
            if (cma) {
                if (process_vm_readv(sender, &local, 1, &remote, 1, 0) != (ssize_t)size) {
                    perror("cma-cost: process_vm_readv");
                    _exit(1);
                }
            } else {
                memcpy(dst, window, size);
            }
            if (dst[size - 1] != (written ? (char)it : 1)) {
                fprintf(stderr, "cma-cost: iteration %ld received the wrong bytes\n", it);
                _exit(1);
            }
            atomic_store(&c->done, it);
        }
        printf("%.2f\n", (now() - start) * 1e6 / (iters - warm));
        fflush(stdout);
        _exit(0);
    }
    pin(0);
    for (long it = 1; it <= iters; it++) {
        if (written) {
            memset(src, (char)it, size);
        }
        if (!cma) {
            memcpy(window, src, size);
        }
        atomic_store(&c->go, it);
        while (atomic_load(&c->done) != it) {
        }
    }
    int status;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
