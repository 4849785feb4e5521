/*
 * big_heap: what an operation costs when the heap is big (a cache, a
 * database, a language runtime keeping gigabytes of small objects live).
 * One thread allocates MIB MiB (requested bytes) of blocks of 48 or 64
 * bytes, one or the other at random, writing each ("build"); frees every
 * other one and allocates a 40-byte block in its place ("churn"), so that
 * both classes' slabs are left half used and the 40-byte ones need new
 * slabs; then frees everything ("free").
 *
 * With `emptied`, the churn frees every 48-byte block first, then
 * allocates as many 40-byte blocks in their places: the 48-byte slabs
 * empty, scattered through segments the 64-byte blocks keep in use, and
 * the 40-byte blocks can reuse their memory if the allocator kept it.
 *
 *   big_heap MIB [emptied]
 *
 * Prints the seconds of each phase, the nanoseconds per operation over
 * all phases (a malloc or a free is one operation), the same in CPU time of
 * the process (its threads and the kernel's work for it: steadier than wall
 * time on a loaded machine) and the minor faults:
 *   big_heap mib=.. ops=.. build_s=.. churn_s=.. free_s=.. ns_per_op=..
 *            build_cpu_s=.. churn_cpu_s=.. free_cpu_s=.. cpu_ns_per_op=.. minflt=..
 * An allocator whose costs do not grow with the heap prints the same
 * ns_per_op for 1 GiB as for 8 GiB.
 */
#include "bench.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 0;
    int emptied = argc == 3 && strcmp(argv[2], "emptied") == 0;
    if ((argc != 2 && !emptied) || mib < 1) {
        fprintf(stderr, "usage: big_heap MIB [emptied]\n");
        return 2;
    }
    size_t n = ((size_t)mib << 20) / 56;
    /* The table of blocks comes from the kernel, not from the allocator
       under test: its own cost and faults are the same for every one. */
    char **blocks = mmap(NULL, n * sizeof(char *), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (blocks == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    uint64_t s = 0x2545f4914f6cdd1dull;
    double c0 = cpu_s(), t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        size_t size = next_rand(&s) & 1 ? 64 : 48;
        char *p = malloc(size);
        if (!p)
            abort();
        memset(p, (int)i, size);
        blocks[i] = p;
    }
    double c1 = cpu_s(), t1 = now_s();
    size_t churned = 0;
    if (emptied) {
        /* The sizes drawn again, in the same order: the blocks of 48. */
        uint64_t again = 0x2545f4914f6cdd1dull;
        for (size_t i = 0; i < n; i++) {
            if (!(next_rand(&again) & 1)) {
                free(blocks[i]);
                blocks[i] = NULL;
            }
        }
    }
    for (size_t i = 0; i < n; i += emptied ? 1 : 2) {
        if (emptied && blocks[i] != NULL)
            continue;
        if (!emptied)
            free(blocks[i]);
        char *p = malloc(40);
        if (!p)
            abort();
        memset(p, (int)i, 40);
        blocks[i] = p;
        churned++;
    }
    double c2 = cpu_s(), t2 = now_s();
    for (size_t i = 0; i < n; i++)
        free(blocks[i]);
    double c3 = cpu_s(), t3 = now_s();
    size_t ops = n + churned * 2 + n;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("big_heap mib=%ld%s ops=%zu build_s=%.3f churn_s=%.3f free_s=%.3f ns_per_op=%.2f "
           "build_cpu_s=%.3f churn_cpu_s=%.3f free_cpu_s=%.3f cpu_ns_per_op=%.2f minflt=%ld\n",
           mib, emptied ? " emptied" : "", ops, t1 - t0, t2 - t1, t3 - t2, (t3 - t0) * 1e9 / (double)ops, c1 - c0, c2 - c1,
           c3 - c2, (c3 - c0) * 1e9 / (double)ops, ru.ru_minflt);
    munmap(blocks, n * sizeof(char *));
    return 0;
}
