/*
 * big_blocks: many big blocks live at once. LIVE blocks of 128-180 KiB are
 * allocated (64 bytes of each written, as a program that fills a header),
 * then STEPS random replacements each free one and allocate another of a
 * new random size. The cost of a replacement should not grow with LIVE.
 *
 *   big_blocks LIVE [STEPS]
 *
 * Prints the time per replacement, in wall time and in CPU time of the
 * process (steadier on a loaded machine), and the minor faults:
 *   big_blocks live=.. steps=.. us_per_replacement=.. cpu_us_per_replacement=.. minflt=..
 */
#include "bench.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

static char *new_block(uint64_t *s) {
    size_t size = (128 << 10) + next_rand(s) % ((52 << 10) + 1);
    char *p = malloc(size);
    if (!p)
        abort();
    memset(p, 1, 64);
    return p;
}

int main(int argc, char **argv) {
    long live = argc > 1 ? atol(argv[1]) : 0;
    long steps = argc > 2 ? atol(argv[2]) : 200000;
    if (argc < 2 || argc > 3 || live < 1 || steps < 0) {
        fprintf(stderr, "usage: big_blocks LIVE [STEPS]\n");
        return 2;
    }
    char **blocks = mmap(NULL, (size_t)live * sizeof(char *), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (blocks == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (long i = 0; i < live; i++)
        blocks[i] = new_block(&s);
    double c0 = cpu_s(), t0 = now_s();
    for (long k = 0; k < steps; k++) {
        long i = (long)(next_rand(&s) % (uint64_t)live);
        free(blocks[i]);
        blocks[i] = new_block(&s);
    }
    double c1 = cpu_s(), t1 = now_s();
    for (long i = 0; i < live; i++)
        free(blocks[i]);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double per = steps ? 1e6 / (double)steps : 0.0;
    printf("big_blocks live=%ld steps=%ld us_per_replacement=%.3f cpu_us_per_replacement=%.3f "
           "minflt=%ld\n",
           live, steps, (t1 - t0) * per, (c1 - c0) * per, ru.ru_minflt);
    return 0;
}
