/*
 * own_table: THREADS threads, each replacing random slots of its own table
 * of 1,024 blocks: `free(v[k]); v[k] = malloc(s); memset(v[k], .., s);`,
 * ITERS times per thread. Sizes run from 4 B to 32 KiB with an
 * inverse-square density (P(size > s) falls as 1/s: half the blocks are
 * under 8 B, one in 260 over 1 KiB; a mean of about 36 B), and every byte
 * of the new block is written. No block ever leaves its thread: the shape
 * of a program that replaces its own blocks at random, where a free-list
 * allocator hands back the block freed last in the class and a per-thread
 * array of freed blocks is only as good as the way it stays away from its
 * empty and full edges.
 *
 *   own_table THREADS ITERS
 *
 * Prints the iterations of all threads per second and the time, in wall
 * time and CPU time of the whole process (the runner measures the process
 * from outside as well):
 *   own_table threads=.. iters=.. iters_per_s=.. wall_s=.. cpu_s=.. check=..
 */
#include "bench.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 1024
#define MIN_SIZE 4.0
#define MAX_SIZE 32768.0

static long iters;

/* A size of MIN_SIZE..MAX_SIZE with density proportional to 1/s^2: the
   inverse of its distribution function, F(s) = (1/MIN - 1/s) / (1/MIN -
   1/MAX), at a uniform u in [0, 1). */
static size_t random_size(uint64_t *s) {
    double u = (double)(next_rand(s) >> 11) * 0x1.0p-53;
    double inv = 1.0 / MIN_SIZE - u * (1.0 / MIN_SIZE - 1.0 / MAX_SIZE);
    size_t size = (size_t)(1.0 / inv);
    return size < 4 ? 4 : size > 32768 ? 32768 : size;
}

static unsigned char *new_block(uint64_t *s) {
    size_t size = random_size(s);
    unsigned char *p = malloc(size);
    if (!p)
        abort();
    memset(p, (int)size, size);
    return p;
}

static void *worker(void *arg) {
    uint64_t s = 0x2545f4914f6cdd1dull * (uint64_t)((intptr_t)arg + 1);
    unsigned char **v = malloc(SLOTS * sizeof *v);
    if (!v)
        abort();
    for (long i = 0; i < SLOTS; i++)
        v[i] = new_block(&s);
    for (long i = 0; i < iters; i++) {
        long k = (long)(next_rand(&s) % SLOTS);
        free(v[k]);
        v[k] = new_block(&s);
    }
    /* Reading every block's first byte keeps the writes from being
       optimised away. */
    uintptr_t check = 0;
    for (long i = 0; i < SLOTS; i++) {
        check += v[i][0];
        free(v[i]);
    }
    free(v);
    return (void *)check;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: own_table THREADS ITERS\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    iters = atol(argv[2]);
    if (threads < 1 || threads > 1024 || iters < 0) {
        fprintf(stderr, "own_table: 1 <= THREADS <= 1024, ITERS >= 0\n");
        return 2;
    }
    pthread_t tid[1024];
    double c0 = cpu_s(), t0 = now_s();
    for (int i = 0; i < threads; i++)
        if (pthread_create(&tid[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    uintptr_t check = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(tid[i], &r);
        check += (uintptr_t)r;
    }
    double c1 = cpu_s(), t1 = now_s();
    double total = (double)iters * threads;
    printf("own_table threads=%d iters=%ld iters_per_s=%.0f wall_s=%.3f cpu_s=%.3f check=%lu\n", threads, iters,
           t1 > t0 ? total / (t1 - t0) : 0.0, t1 - t0, c1 - c0, (unsigned long)check);
    return 0;
}
