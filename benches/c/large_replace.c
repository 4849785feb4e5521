/*
 * large_replace: big blocks replaced one at a time. LIVE blocks of random
 * size MIN_MIB..MAX_MIB MiB are live; each of STEPS steps frees a random one
 * and allocates a new one of a new random size, writing one byte per page
 * (as a program that fills its buffers). Whether freed big blocks are
 * reused or returned to the kernel and faulted in again shows in the system
 * time and the minor faults (printed).
 *
 *   large_replace STEPS [LIVE [MIN_MIB MAX_MIB]]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: large_replace STEPS [LIVE [MIN_MIB MAX_MIB]]\n");
        return 2;
    }
    long steps = atol(argv[1]);
    int live = argc > 2 ? atoi(argv[2]) : 20;
    long min_mib = argc > 3 ? atol(argv[3]) : 5, max_mib = argc > 4 ? atol(argv[4]) : 25;
    if (steps < 0 || live < 1 || live > 1024 || min_mib < 1 || max_mib < min_mib) {
        fprintf(stderr, "large_replace: bad arguments\n");
        return 2;
    }
    char *blocks[1024];
    uint64_t s = 0x2545f4914f6cdd1dull;
#define NEXT() (s ^= s << 13, s ^= s >> 7, s ^= s << 17, s)
#define NEW_BLOCK(i)                                                                       \
    do {                                                                                   \
        size_t size = ((size_t)min_mib << 20) + NEXT() % ((size_t)(max_mib - min_mib + 1) << 20); \
        blocks[i] = malloc(size);                                                          \
        if (!blocks[i])                                                                    \
            abort();                                                                       \
        for (size_t o = 0; o < size; o += 4096)                                            \
            blocks[i][o] = (char)o;                                                        \
        blocks[i][size - 1] = 1;                                                           \
    } while (0)
    for (int i = 0; i < live; i++)
        NEW_BLOCK(i);
    for (long k = 0; k < steps; k++) {
        int i = (int)(NEXT() % (uint64_t)live);
        free(blocks[i]);
        NEW_BLOCK(i);
    }
    for (int i = 0; i < live; i++)
        free(blocks[i]);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("large_replace steps=%ld live=%d minflt=%ld\n", steps, live, ru.ru_minflt);
    return 0;
}
