/*
 * fastpath: single-thread malloc/free loops, the allocator's fast paths.
 *
 *   fastpath ITERATIONS [BATCH [MAX_SIZE]]
 *
 * Four phases, each doing ITERATIONS malloc/free pairs; all but the first on
 * sizes drawn from a fixed table of random sizes 8..MAX_SIZE:
 *   fp_fixed       malloc(32) then free at once (the plain fast path);
 *   fp_pairs       malloc then free at once;
 *   fp_batch_lifo  BATCH mallocs, then the BATCH frees newest first;
 *   fp_batch_fifo  BATCH mallocs, then the BATCH frees oldest first.
 * Prints the time per pair of each phase. The fp_base_* functions repeat
 * the loops with a stand-in allocator that does nothing, so that
 * callgrind's inclusive instruction count of fp_X minus fp_base_X, over
 * ITERATIONS, is what one malloc + free costs (ci/bench.sh does this with
 * CALLGRIND=1).
 */
#include "bench.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NSIZES 4096
static size_t sizes[NSIZES];
static void **slots;
static char dummy[1 << 16];

NOINLINE static void *fake_malloc(size_t n) {
    __asm__ volatile("" ::"r"(n) : "memory");
    return dummy;
}

NOINLINE static void fake_free(void *p) {
    __asm__ volatile("" ::"r"(p) : "memory");
}

#define PHASES(NAME_FIXED, NAME_PAIRS, NAME_LIFO, NAME_FIFO, MALLOC, FREE)                     \
    NOINLINE static unsigned long NAME_FIXED(long iters, size_t size) {                        \
        unsigned long sum = 0;                                                                 \
        for (long i = 0; i < iters; i++) {                                                     \
            char *p = MALLOC(size);                                                            \
            ESCAPE(p);                                                                         \
            p[0] = (char)i;                                                                    \
            sum += (unsigned char)p[0];                                                        \
            FREE(p);                                                                           \
        }                                                                                      \
        return sum;                                                                            \
    }                                                                                          \
    NOINLINE static unsigned long NAME_PAIRS(long iters) {                                     \
        unsigned long sum = 0;                                                                 \
        for (long i = 0; i < iters; i++) {                                                     \
            char *p = MALLOC(sizes[i & (NSIZES - 1)]);                                         \
            ESCAPE(p);                                                                         \
            p[0] = (char)i;                                                                    \
            sum += (unsigned char)p[0];                                                        \
            FREE(p);                                                                           \
        }                                                                                      \
        return sum;                                                                            \
    }                                                                                          \
    NOINLINE static unsigned long NAME_LIFO(long iters, long batch) {                          \
        unsigned long sum = 0;                                                                 \
        for (long done = 0; done < iters; done += batch) {                                     \
            for (long k = 0; k < batch; k++) {                                                 \
                char *p = MALLOC(sizes[(done + k) & (NSIZES - 1)]);                            \
                ESCAPE(p);                                                                     \
                p[0] = (char)k;                                                                \
                slots[k] = p;                                                                  \
            }                                                                                  \
            for (long k = batch - 1; k >= 0; k--) {                                            \
                sum += *(unsigned char *)slots[k];                                             \
                FREE(slots[k]);                                                                \
            }                                                                                  \
        }                                                                                      \
        return sum;                                                                            \
    }                                                                                          \
    NOINLINE static unsigned long NAME_FIFO(long iters, long batch) {                          \
        unsigned long sum = 0;                                                                 \
        for (long done = 0; done < iters; done += batch) {                                     \
            for (long k = 0; k < batch; k++) {                                                 \
                char *p = MALLOC(sizes[(done + k) & (NSIZES - 1)]);                            \
                ESCAPE(p);                                                                     \
                p[0] = (char)k;                                                                \
                slots[k] = p;                                                                  \
            }                                                                                  \
            for (long k = 0; k < batch; k++) {                                                 \
                sum += *(unsigned char *)slots[k];                                             \
                FREE(slots[k]);                                                                \
            }                                                                                  \
        }                                                                                      \
        return sum;                                                                            \
    }

PHASES(fp_fixed, fp_pairs, fp_batch_lifo, fp_batch_fifo, malloc, free)
PHASES(fp_base_fixed, fp_base_pairs, fp_base_batch_lifo, fp_base_batch_fifo, fake_malloc, fake_free)

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fastpath ITERATIONS [BATCH [MAX_SIZE]]\n");
        return 2;
    }
    long iters = atol(argv[1]);
    long batch = argc > 2 ? atol(argv[2]) : 1000;
    size_t max = argc > 3 ? strtoul(argv[3], NULL, 10) : 512;
    int base = getenv("FASTPATH_BASELINE") != NULL;
    if (iters < 1 || batch < 1 || max < 8 || max > sizeof dummy) {
        fprintf(stderr, "fastpath: bad arguments\n");
        return 2;
    }
    iters = (iters + batch - 1) / batch * batch;
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < NSIZES; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        sizes[i] = 8 + s % (max - 7);
    }
    slots = malloc(sizeof(void *) * (size_t)batch);
    unsigned long sum = 0;
    /* Warm-up, outside the counted phases: the first slabs of every class. */
    for (long k = 0; k < batch; k++) {
        slots[k] = malloc(k & 1 ? 32 : sizes[k & (NSIZES - 1)]);
        ESCAPE(slots[k]);
    }
    for (long k = 0; k < batch; k++)
        free(slots[k]);
    double t[5];
    t[0] = now_s();
    sum += fp_fixed(iters, 32);
    t[1] = now_s();
    sum += fp_pairs(iters);
    t[2] = now_s();
    sum += fp_batch_lifo(iters, batch);
    t[3] = now_s();
    sum += fp_batch_fifo(iters, batch);
    t[4] = now_s();
    if (base) {
        sum += fp_base_fixed(iters, 32);
        sum += fp_base_pairs(iters);
        sum += fp_base_batch_lifo(iters, batch);
        sum += fp_base_batch_fifo(iters, batch);
    }
    free(slots);
    printf("fastpath iterations=%ld batch=%ld max=%zu sum=%lu\n", iters, batch, max, sum);
    printf("ns per pair: fixed %.2f pairs %.2f batch_lifo %.2f batch_fifo %.2f\n",
           (t[1] - t[0]) * 1e9 / (double)iters, (t[2] - t[1]) * 1e9 / (double)iters,
           (t[3] - t[2]) * 1e9 / (double)iters, (t[4] - t[3]) * 1e9 / (double)iters);
    return 0;
}
