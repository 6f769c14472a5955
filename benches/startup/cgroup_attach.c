/* What putting a new process into a cgroup v2 group costs: writing its
 * pid to the group's cgroup.procs (the kernel takes its global
 * cgroup_threadgroup_rwsem for writing, which waits for an RCU grace
 * period) against creating it there with clone3(CLONE_INTO_CGROUP) (only
 * the read side, as every fork). 20 ms of quiet before each, as between
 * one agent's commands. As root, with a cgroup2 mount:
 *
 *     cc -O2 -o /tmp/cgroup_attach benches/startup/cgroup_attach.c
 *     mkdir /sys/fs/cgroup/unified/attach-probe      # or /sys/fs/cgroup/...
 *     /tmp/cgroup_attach /sys/fs/cgroup/unified/attach-probe 40
 *     rmdir /sys/fs/cgroup/unified/attach-probe
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CGROUP_V2_DIR N\n", argv[0]);
        return 2;
    }
    char procs[4096];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", argv[1]);
    int n = atoi(argv[2]);
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (dir < 0) {
        perror(argv[1]);
        return 1;
    }
    double moved = 0, cloned = 0;
    for (int i = 0; i < n; i++) {
        usleep(20000);
        pid_t child = fork();
        if (child == 0) {
            pause();
            _exit(0);
        }
        char pid[32];
        int len = snprintf(pid, sizeof pid, "%d", child);
        double t = now_ms();
        int fd = open(procs, O_WRONLY);
        if (fd < 0 || write(fd, pid, len) != len) {
            perror(procs);
            return 1;
        }
        close(fd);
        moved += now_ms() - t;
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);

        usleep(20000);
        struct clone_args args;
        memset(&args, 0, sizeof args);
        args.flags = CLONE_INTO_CGROUP;
        args.exit_signal = SIGCHLD;
        args.cgroup = dir;
        t = now_ms();
        long r = syscall(SYS_clone3, &args, sizeof args);
        if (r == 0)
            _exit(0);
        cloned += now_ms() - t;
        if (r < 0) {
            perror("clone3");
            return 1;
        }
        waitpid(r, NULL, 0);
    }
    printf("pid written to cgroup.procs: %.3f ms mean; clone3 CLONE_INTO_CGROUP: %.3f ms mean (n=%d)\n",
           moved / n, cloned / n, n);
    return 0;
}
