/* What one `cpuid` instruction costs on this machine. Under a hypervisor
 * every `cpuid` traps to it; glibc runs dozens at every process start
 * (its CPU feature and cache probes), so this cost is paid by every
 * dynamically or statically linked glibc program, cordon, bwrap and the
 * command alike.
 *
 *   cc -O2 -o /tmp/cpuid_cost benches/startup/cpuid_cost.c && /tmp/cpuid_cost
 */
#include <cpuid.h>
#include <stdio.h>
#include <time.h>

int main(void) {
    enum { N = 2000 };
    unsigned a, b, c, d;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++)
        __cpuid_count(4, i & 3, a, b, c, d);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    __cpuid(0, a, b, c, d);
    char vendor[13];
    __builtin_memcpy(vendor, &b, 4);
    __builtin_memcpy(vendor + 4, &d, 4);
    __builtin_memcpy(vendor + 8, &c, 4);
    vendor[12] = 0;
    printf("cpuid (leaf 4): %.2f us each, %d calls; vendor %s\n", ns / N / 1000.0, N, vendor);
    return 0;
}
