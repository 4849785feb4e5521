/*
 * msgpass: a userspace hackbench. PAIRS producer/consumer pairs; each
 * producer allocates MESSAGES messages of random size MIN..MAX bytes, fills
 * them and passes them through a bounded single-producer single-consumer ring;
 * its consumer reads and frees them. Every free is a free of a block that
 * another thread allocated (a remote free).
 *
 *   msgpass PAIRS MESSAGES [MIN MAX [RING]]
 *
 * Prints a checksum so that the work cannot be optimised away.
 */
#include "bench.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ring {
    _Alignas(64) _Atomic size_t head; /* next slot the consumer reads */
    _Alignas(64) _Atomic size_t tail; /* next slot the producer writes */
    _Alignas(64) size_t cap;          /* power of two */
    void **slots;
    long messages;
    size_t min, max;
    uint64_t seed;
    uint64_t sum;
};

static void *producer(void *arg) {
    struct ring *r = arg;
    uint64_t seed = r->seed;
    size_t tail = 0;
    for (long i = 0; i < r->messages; i++) {
        size_t size = r->min + next_rand(&seed) % (r->max - r->min + 1);
        unsigned char *m = malloc(size);
        if (!m) {
            fprintf(stderr, "msgpass: out of memory\n");
            exit(1);
        }
        m[0] = (unsigned char)size;
        m[size - 1] = (unsigned char)i;
        memset(m + 1, 0x5a, size < 64 ? size - 1 : 63);
        while (tail - atomic_load_explicit(&r->head, memory_order_acquire) == r->cap)
            sched_yield();
        r->slots[tail & (r->cap - 1)] = m;
        atomic_store_explicit(&r->tail, ++tail, memory_order_release);
    }
    return NULL;
}

static void *consumer(void *arg) {
    struct ring *r = arg;
    size_t head = 0;
    uint64_t sum = 0;
    for (long i = 0; i < r->messages; i++) {
        while (atomic_load_explicit(&r->tail, memory_order_acquire) == head)
            sched_yield();
        unsigned char *m = r->slots[head & (r->cap - 1)];
        atomic_store_explicit(&r->head, ++head, memory_order_release);
        sum += m[0] + m[1];
        free(m);
    }
    r->sum = sum;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: msgpass PAIRS MESSAGES [MIN MAX [RING]]\n");
        return 2;
    }
    int pairs = atoi(argv[1]);
    long messages = atol(argv[2]);
    size_t min = argc > 3 ? strtoul(argv[3], NULL, 10) : 16;
    size_t max = argc > 4 ? strtoul(argv[4], NULL, 10) : 512;
    size_t cap = argc > 5 ? strtoul(argv[5], NULL, 10) : 1024;
    if (pairs < 1 || messages < 1 || min < 2 || max < min || cap == 0 || (cap & (cap - 1))) {
        fprintf(stderr, "msgpass: bad arguments\n");
        return 2;
    }
    struct ring *rings = aligned_alloc(64, sizeof(struct ring) * (size_t)pairs);
    pthread_t *t = malloc(sizeof(pthread_t) * 2 * (size_t)pairs);
    for (int p = 0; p < pairs; p++) {
        struct ring *r = &rings[p];
        memset(r, 0, sizeof *r);
        r->cap = cap;
        r->slots = calloc(cap, sizeof(void *));
        r->messages = messages;
        r->min = min;
        r->max = max;
        r->seed = 0x9e3779b97f4a7c15ull * (uint64_t)(p + 1);
        pthread_create(&t[2 * p], NULL, consumer, r);
        pthread_create(&t[2 * p + 1], NULL, producer, r);
    }
    uint64_t sum = 0;
    for (int p = 0; p < pairs; p++) {
        pthread_join(t[2 * p], NULL);
        pthread_join(t[2 * p + 1], NULL);
        sum += rings[p].sum;
        free(rings[p].slots);
    }
    free(t);
    free(rings);
    printf("msgpass pairs=%d messages=%ld checksum=%llu\n", pairs, messages, (unsigned long long)sum);
    return 0;
}
