/* How long after a PID namespace's last process is reaped the kernel
 * still counts it against user.max_pid_namespaces.
 *
 *     cc -O2 -o /tmp/pidns_lag benches/serve/pidns_lag.c && /tmp/pidns_lag
 *
 * In a new user namespace allowed one PID namespace: make one (its only
 * process exits at once, and is reaped), then time how long
 * clone(CLONE_NEWPID) keeps failing with ENOSPC. Run as root or any user
 * with unprivileged user namespaces. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char stack[64 * 1024];

static int leave(void *arg) { (void)arg; return 0; }

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static pid_t new_pid_namespace(void) {
  return clone(leave, stack + sizeof stack, CLONE_NEWPID | SIGCHLD, NULL);
}

int main(void) {
  if (unshare(CLONE_NEWUSER) != 0) { perror("unshare(CLONE_NEWUSER)"); return 1; }
  int fd = open("/proc/sys/user/max_pid_namespaces", O_WRONLY);
  if (fd < 0 || write(fd, "1", 1) != 1) { perror("max_pid_namespaces"); return 1; }
  close(fd);
  pid_t pid = new_pid_namespace();
  if (pid < 0) { perror("clone"); return 1; }
  for (int round = 0; round < 10; round++) {
    /* pid: a PID namespace's only process; reap it, then time the next. */
    waitpid(pid, NULL, 0);
    double reaped = now_ms();
    int refused = 0;
    while ((pid = new_pid_namespace()) < 0) {
      if (errno != ENOSPC) { perror("clone"); return 1; }
      refused++;
      usleep(200);
    }
    printf("counted off after %.2f ms (%d clones refused with ENOSPC)\n",
           now_ms() - reaped, refused);
  }
  waitpid(pid, NULL, 0);
  return 0;
}
