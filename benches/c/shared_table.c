/*
 * shared_table: THREADS threads swap blocks through one shared table of
 * SLOTS pointers. Each operation picks a random slot, allocates a block of
 * random size, writes the whole of it, exchanges it atomically with the
 * slot's block, and frees the old one, which any thread may have
 * allocated. Sizes run from 8 B to 4 KiB, in one of two mixes:
 * - `wide` (the default): one in 16 uniform over 8 B..4 KiB, the rest over
 *   8..512 B (a mean of about 370 B: about 3.7 MB live in 10,000 slots once
 *   the table is full);
 * - `eighth`: one in 8 uniform over 256 B..4 KiB, the rest over 8..255 B
 *   (a mean of about 390 B), more of the big classes' blocks in flight.
 * The live memory is small and constant; what the allocator keeps on top of
 * it, in per-thread caches and partly used slabs, is the point: peak RSS
 * (the runner reports it). OPS is the total, shared out among the threads.
 *
 *   shared_table THREADS OPS [SLOTS [wide|eighth]]
 *
 * Prints the time per operation, in wall time and in CPU time of the whole
 * process, and the bytes live in the table at the end:
 *   shared_table threads=.. ops=.. slots=.. ns_per_op=.. cpu_ns_per_op=.. live_bytes=..
 */
#include "bench.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int threads, eighth;
static long ops_per_thread, nslots;
/* Each block starts with its size (a size_t), checked when it is freed. */
static _Atomic(size_t *) *slots;

static size_t random_size(uint64_t *s) {
    uint64_t r = next_rand(s);
    size_t size;
    if (eighth)
        size = r % 8 == 0 ? 256 + (r >> 8) % 3841 : 8 + (r >> 8) % 248;
    else
        size = r % 16 == 0 ? 8 + (r >> 8) % 4089 : 8 + (r >> 8) % 505;
    return size & ~(size_t)7;
}

static void *worker(void *arg) {
    uint64_t s = 0x2545f4914f6cdd1dull * (uint64_t)((intptr_t)arg + 1);
    for (long i = 0; i < ops_per_thread; i++) {
        size_t size = random_size(&s);
        size_t *fresh = malloc(size);
        if (!fresh)
            abort();
        memset(fresh, 0x5a, size);
        fresh[0] = size;
        /* Seq-cst exchange: its release half publishes the bytes just
           written to whichever thread takes the block out (its acquire
           half, below, pairs the release of the thread that put `old` in). */
        size_t *old = atomic_exchange(&slots[next_rand(&s) % (uint64_t)nslots], fresh);
        if (old) {
            if (old[0] < 8 || old[0] > 4096)
                abort(); /* a block changed under its owner: the allocator's fault */
            free(old);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: shared_table THREADS(1..256) OPS [SLOTS [wide|eighth]]\n");
        return 2;
    }
    threads = atoi(argv[1]);
    long ops = atol(argv[2]);
    nslots = argc > 3 ? atol(argv[3]) : 10000;
    const char *mix = argc > 4 ? argv[4] : "wide";
    eighth = strcmp(mix, "eighth") == 0;
    if (threads < 1 || threads > 256 || ops < threads || nslots < 1 || (!eighth && strcmp(mix, "wide") != 0)) {
        fprintf(stderr, "shared_table: THREADS 1..256, OPS >= THREADS, SLOTS >= 1, MIX wide or eighth\n");
        return 2;
    }
    ops_per_thread = ops / threads;
    slots = calloc((size_t)nslots, sizeof *slots);
    if (!slots)
        abort();
    double c0 = cpu_s(), t0 = now_s();
    run_threads(threads, worker);
    double c1 = cpu_s(), t1 = now_s();
    size_t live = 0;
    for (long i = 0; i < nslots; i++) {
        size_t *p = atomic_load(&slots[i]);
        if (p) {
            live += p[0];
            free(p);
        }
    }
    free(slots);
    double per = 1e9 / ((double)ops_per_thread * threads);
    printf("shared_table threads=%d ops=%ld slots=%ld ns_per_op=%.1f cpu_ns_per_op=%.1f live_bytes=%zu\n", threads,
           ops_per_thread * threads, nslots, (t1 - t0) * per, (c1 - c0) * per, live);
    return 0;
}
