/* What installing a seccomp filter costs, by the length of the walk the
 * kernel makes through it for every syscall number when it fills its
 * per-number cache of always-allowed calls (Linux 5.11+).
 *
 * Two programs of the same size: N comparisons that every number walks
 * (a list), and the same N behind a first jump over them (a walk of two
 * steps). Each is installed in 300 forked children; the medians of the
 * seccomp() call are printed.
 *
 * Build and run: benches/seccomp/run.sh [N]
 */
#define _GNU_SOURCE
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS 300

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median time of installing `prog` in a fresh child, in us. */
static double median_install(struct sock_fprog *prog) {
    double took[RUNS];
    for (int r = 0; r < RUNS; r++) {
        int fds[2];
        if (pipe(fds) != 0) { perror("pipe"); exit(1); }
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); exit(1); }
        if (pid == 0) {
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            double t0 = now_us();
            long rc = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                              SECCOMP_FILTER_FLAG_NEW_LISTENER, prog);
            double d = now_us() - t0;
            if (rc < 0) { perror("seccomp"); _exit(1); }
            if (write(fds[1], &d, sizeof d) != sizeof d) _exit(1);
            _exit(0);
        }
        if (read(fds[0], &took[r], sizeof took[r]) != sizeof took[r]) {
            fprintf(stderr, "a child failed to install the filter\n");
            exit(1);
        }
        waitpid(pid, 0, 0);
        close(fds[0]);
        close(fds[1]);
    }
    qsort(took, RUNS, sizeof took[0], by_value);
    return took[RUNS / 2];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 80;
    if (n < 1 || n > 250) { fprintf(stderr, "N: 1 to 250\n"); return 2; }
    struct sock_filter f[256];
    struct sock_fprog prog = {0, f};
    for (int skip = 0; skip <= 1; skip++) {
        int i = 0;
        f[i++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0);
        if (skip) /* number >= 0 always: jump over the comparisons */
            f[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0, n, 0);
        for (int k = 0; k < n; k++) /* numbers no call has: never taken */
            f[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 100000 + k, 0, 0);
        f[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        prog.len = i;
        printf("%d instructions, %s: median %.1f us\n", i,
               skip ? "a walk of 2 steps" : "every number walks them all",
               median_install(&prog));
    }
    return 0;
}
