/*
 * stress: a random multi-threaded stress. THREADS threads share one table
 * of SLOTS block pointers; each operation picks a random slot, swaps a new
 * block of random size (or, one time in eight, nothing) into it atomically,
 * and frees what was there, which any thread may have allocated, after
 * checking its contents. Sizes run from 8 bytes to 64 KiB, most small, so
 * small and large blocks, fast and slow paths, local and remote frees mix
 * at random.
 *
 *   stress THREADS OPS [SLOTS]
 *
 * Prints the number of frees.
 */
#include "bench.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static int threads;
static long ops, nslots;
static _Atomic(size_t *) *slots;
static long frees[64];

static size_t random_size(uint64_t *s) {
    uint64_t r = next_rand(s);
    switch (r % 16) {
    case 0:
        return 8 + (r >> 8) % 65528; /* up to 64 KiB: large blocks too */
    case 1:
    case 2:
        return 8 + (r >> 8) % 4088;
    default:
        return 8 + (r >> 8) % 248;
    }
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t s = 0x2545f4914f6cdd1dull * (uint64_t)(me + 1);
    long n = 0;
    for (long i = 0; i < ops; i++) {
        uint64_t r = next_rand(&s);
        size_t *fresh = NULL;
        if (r % 8 != 0) {
            size_t size = random_size(&s) & ~(size_t)7;
            if (size < 8)
                size = 8;
            fresh = malloc(size);
            if (!fresh)
                abort();
            fresh[0] = size;
            fresh[size / sizeof(size_t) - 1] ^= 0; /* touch the last word */
        }
        size_t *old = atomic_exchange(&slots[(r >> 16) % (uint64_t)nslots], fresh);
        if (old) {
            if (old[0] < 8 || old[0] > 65536)
                abort();
            free(old);
            n++;
        }
    }
    frees[me] = n;
    return NULL;
}

int main(int argc, char **argv) {
    threads = argc > 1 ? atoi(argv[1]) : 4;
    ops = argc > 2 ? atol(argv[2]) : 1000000;
    nslots = argc > 3 ? atol(argv[3]) : 10000;
    if (threads < 1 || threads > 64 || ops < 1 || nslots < 1) {
        fprintf(stderr, "usage: stress THREADS(1..64) OPS [SLOTS]\n");
        return 2;
    }
    slots = calloc(nslots, sizeof *slots);
    run_threads(threads, worker);
    long total = 0;
    for (int i = 0; i < threads; i++)
        total += frees[i];
    for (long i = 0; i < nslots; i++)
        free(atomic_load(&slots[i]));
    free(slots);
    printf("stress %d threads %ld ops: %ld frees\n", threads, ops, total);
    return 0;
}
