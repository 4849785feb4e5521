/*
 * random_table: one thread, a table of LIVE blocks of random size MIN..MAX
 * bytes, STEPS random replacements: `free(v[k]); v[k] = malloc(s);`, then
 * the new block's first cache line written (as a program fills a header).
 * The table is far bigger than the caches, so the freed block and the
 * block handed out are both cold: an allocator whose free and malloc touch
 * neither (a per-thread array of pointers) pays one miss per replacement,
 * the program's write; one that links free blocks through their first word
 * pays for the free's store into the freed block and the malloc's read of
 * the next link as well.
 *
 *   random_table LIVE STEPS [MIN MAX]
 *
 * With big sizes it is also `big_blocks` and `many_big_blocks`
 * (ci/measure.py): 1,000 or 16,000 live blocks of 128-180 KiB, whose cost
 * per replacement should not grow with LIVE.
 *
 * Prints the time per replacement, in wall time and in CPU time of the
 * process (steadier on a loaded machine), and the minor faults:
 *   random_table live=.. steps=.. ns_per_replacement=.. cpu_ns_per_replacement=.. minflt=.. check=..
 */
#include "bench.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

static size_t min_size, max_size;

static unsigned char *new_block(uint64_t *s) {
    size_t size = min_size + next_rand(s) % (max_size - min_size + 1);
    unsigned char *p = malloc(size);
    if (!p)
        abort();
    memset(p, (int)size, size < 64 ? size : 64);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: random_table LIVE STEPS [MIN MAX]\n");
        return 2;
    }
    long live = atol(argv[1]);
    long steps = atol(argv[2]);
    min_size = argc > 3 ? strtoul(argv[3], NULL, 10) : 16;
    max_size = argc > 4 ? strtoul(argv[4], NULL, 10) : 1024;
    if (live < 1 || steps < 0 || min_size < 1 || max_size < min_size) {
        fprintf(stderr, "random_table: LIVE >= 1, STEPS >= 0, 1 <= MIN <= MAX\n");
        return 2;
    }
    /* The table from mmap, so that it is not one of the measured heap's
       blocks. */
    unsigned char **v = mmap(NULL, (size_t)live * sizeof *v, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    uint64_t s = 0x2545f4914f6cdd1dull;
    for (long i = 0; i < live; i++)
        v[i] = new_block(&s);
    double c0 = cpu_s(), t0 = now_s();
    for (long i = 0; i < steps; i++) {
        long k = (long)(next_rand(&s) % (uint64_t)live);
        free(v[k]);
        v[k] = new_block(&s);
    }
    double c1 = cpu_s(), t1 = now_s();
    /* Reading every block's first byte keeps the writes from being
       optimised away. */
    unsigned check = 0;
    for (long i = 0; i < live; i++) {
        check += v[i][0];
        free(v[i]);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double per = steps ? 1e9 / (double)steps : 0.0;
    printf("random_table live=%ld steps=%ld ns_per_replacement=%.1f cpu_ns_per_replacement=%.1f minflt=%ld "
           "check=%u\n",
           live, steps, (t1 - t0) * per, (c1 - c0) * per, ru.ru_minflt, check);
    return 0;
}
