/*
 * prodcons: persistent producer-consumer. PAIRS pairs of threads; in each,
 * the producer only allocates (blocks of random size MIN..MAX bytes, the
 * first cache line written) and the consumer only frees, without reading
 * the block: every free is of a block another thread allocated moments
 * before, and each thread only ever allocates or only ever frees. The
 * blocks pass through a bounded single-producer single-consumer ring of
 * RING slots whose indices are published once per 8 blocks (one line of
 * slots) and read only when a side's cached copy says the ring is full or
 * empty, so the hand-off costs a few cache lines per 8 blocks and the
 * allocator's own cross-thread traffic dominates (msgpass's ring publishes
 * and reads an index at every message). At most RING blocks per pair are
 * in flight. A pair's threads are pinned to two different CPUs when the
 * process may use two.
 *
 *   prodcons PAIRS MESSAGES [MIN MAX [RING]]     (MESSAGES per pair)
 *
 * Prints the time per message (a malloc on one side, a free on the other),
 * in wall time and in CPU time of the whole process (waits included: a side
 * that catches up spins briefly, then yields):
 *   prodcons pairs=.. messages=.. ns_per_message=.. cpu_ns_per_message=..
 */
#include "bench.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Blocks per published index: a cache line of slots. */
#define BATCH 8

struct ring {
    /* Each side's index, and its copy of the other's, on lines of their
       own. */
    _Alignas(64) _Atomic size_t head; /* slots the consumer has read */
    _Alignas(64) _Atomic size_t tail; /* slots the producer has written */
    _Alignas(64) void **slots;
    size_t cap; /* a power of two, at least BATCH */
    long messages;
    size_t min, max;
    uint64_t seed;
    int cpu[2]; /* the producer's and the consumer's CPU, -1: any */
};

/* Pins the calling thread to `cpu` (if not -1). */
static void pin(int cpu) {
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Waiting: a short spin, then the processor handed over (a 2-core machine
   shared with builds must not lose a core to a spinning thread). */
static void wait_a_little(unsigned *spins) {
    if (++*spins < 64)
        __builtin_ia32_pause();
    else
        sched_yield();
}

static void *producer(void *arg) {
    struct ring *r = arg;
    pin(r->cpu[0]);
    uint64_t seed = r->seed;
    size_t tail = 0, head_seen = 0;
    for (long i = 0; i < r->messages; i++) {
        size_t size = r->min + next_rand(&seed) % (r->max - r->min + 1);
        unsigned char *m = malloc(size);
        if (!m) {
            fprintf(stderr, "prodcons: out of memory\n");
            exit(1);
        }
        memset(m, (int)i, size < 64 ? size : 64);
        unsigned spins = 0;
        while (tail - head_seen == r->cap) {
            /* Release: the slots written so far before the index (pairs the
               consumer's acquire), published before waiting so that the
               consumer cannot wait on a full ring too. */
            atomic_store_explicit(&r->tail, tail, memory_order_release);
            /* Acquire: pairs the consumer's release of head (its slot reads
               done before the slots are written again). */
            head_seen = atomic_load_explicit(&r->head, memory_order_acquire);
            if (tail - head_seen == r->cap)
                wait_a_little(&spins);
        }
        r->slots[tail & (r->cap - 1)] = m;
        if (++tail % BATCH == 0)
            atomic_store_explicit(&r->tail, tail, memory_order_release); /* pairs the consumer's acquire */
    }
    atomic_store_explicit(&r->tail, tail, memory_order_release); /* pairs the consumer's acquire */
    return NULL;
}

static void *consumer(void *arg) {
    struct ring *r = arg;
    pin(r->cpu[1]);
    size_t head = 0, tail_seen = 0;
    for (long i = 0; i < r->messages; i++) {
        unsigned spins = 0;
        while (head == tail_seen) {
            /* Release: the slots read so far before the index (pairs the
               producer's acquire), published before waiting so that the
               producer cannot wait on an empty ring too. */
            atomic_store_explicit(&r->head, head, memory_order_release);
            /* Acquire: pairs the producer's release of tail (the slots and
               the blocks' bytes written before it). */
            tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
            if (head == tail_seen)
                wait_a_little(&spins);
        }
        void *m = r->slots[head & (r->cap - 1)];
        if (++head % BATCH == 0)
            atomic_store_explicit(&r->head, head, memory_order_release); /* pairs the producer's acquire */
        free(m);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 5 && argc != 6) {
        fprintf(stderr, "usage: prodcons PAIRS MESSAGES [MIN MAX [RING]]\n");
        return 2;
    }
    int pairs = atoi(argv[1]);
    long messages = atol(argv[2]);
    size_t min = argc > 3 ? strtoul(argv[3], NULL, 10) : 16;
    size_t max = argc > 4 ? strtoul(argv[4], NULL, 10) : 512;
    size_t cap = argc > 5 ? strtoul(argv[5], NULL, 10) : 1024;
    if (pairs < 1 || pairs > 32 || messages < 1 || min < 1 || max < min || cap < BATCH || (cap & (cap - 1))) {
        fprintf(stderr, "prodcons: PAIRS 1..32, MESSAGES >= 1, 1 <= MIN <= MAX, RING a power of two >= 8\n");
        return 2;
    }
    struct ring *rings = aligned_alloc(64, sizeof(struct ring) * (size_t)pairs);
    /* The process's CPUs: with two or more, a pair's two threads are
       pinned to two different ones, so that every free is a cross-CPU
       free; unpinned on a loaded machine, the scheduler often runs both on
       one CPU by turns, and the ring then batches 1,024 blocks at a time
       through one cache (a different shape, 5-20x faster). */
    cpu_set_t allowed;
    int cpus[CPU_SETSIZE], ncpus = 0;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &allowed))
                cpus[ncpus++] = c;
    pthread_t th[64];
    double c0 = cpu_s(), t0 = now_s();
    for (int p = 0; p < pairs; p++) {
        struct ring *r = &rings[p];
        memset(r, 0, sizeof *r);
        r->slots = calloc(cap, sizeof(void *));
        r->cap = cap;
        r->messages = messages;
        r->min = min;
        r->max = max;
        r->seed = 0x9e3779b97f4a7c15ull * (uint64_t)(p + 1);
        r->cpu[0] = ncpus >= 2 ? cpus[(2 * p) % ncpus] : -1;
        r->cpu[1] = ncpus >= 2 ? cpus[(2 * p + 1) % ncpus] : -1;
        pthread_create(&th[2 * p], NULL, producer, r);
        pthread_create(&th[2 * p + 1], NULL, consumer, r);
    }
    for (int i = 0; i < 2 * pairs; i++)
        pthread_join(th[i], NULL);
    double c1 = cpu_s(), t1 = now_s();
    for (int p = 0; p < pairs; p++)
        free(rings[p].slots);
    free(rings);
    double per = 1e9 / ((double)messages * pairs);
    printf("prodcons pairs=%d messages=%ld ns_per_message=%.1f cpu_ns_per_message=%.1f\n", pairs, messages,
           (t1 - t0) * per, (c1 - c0) * per);
    return 0;
}
