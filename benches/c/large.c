/*
 * large: big blocks. Each of THREADS threads keeps LIVE blocks of random size
 * MIN_KIB..MAX_KIB and, ITERATIONS times, replaces a random one (free, then
 * malloc and write one byte per page, as a program that fills its buffers
 * would). Every fourth iteration also grows a buffer from 64 KiB to MAX_KIB
 * by realloc, doubling and writing the new part each time (a growing vector
 * or read buffer).
 *
 *   large ITERATIONS [MIN_KIB MAX_KIB [LIVE [THREADS]]]
 */
#include "bench.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long iterations;
static size_t min_bytes, max_bytes;
static int live;

static unsigned long touch(char *p, size_t from, size_t to) {
    unsigned long sum = 0;
    for (size_t i = from; i < to; i += 4096) {
        p[i] = (char)(i >> 12);
        sum += (unsigned char)p[i];
    }
    p[to - 1] = 1;
    return sum;
}

static void *oom(void) {
    fprintf(stderr, "large: out of memory\n");
    exit(1);
}

static void *worker(void *arg) {
    uint64_t seed = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    char **blocks = calloc((size_t)live, sizeof(char *));
    unsigned long sum = 0;
    for (long it = 0; it < iterations; it++) {
        int i = (int)(next_rand(&seed) % (uint64_t)live);
        free(blocks[i]);
        size_t size = min_bytes + next_rand(&seed) % (max_bytes - min_bytes + 1);
        blocks[i] = malloc(size);
        if (!blocks[i])
            oom();
        sum += touch(blocks[i], 0, size);
        if (it % 4 == 0) {
            size_t have = 64 * 1024;
            char *g = malloc(have);
            if (!g)
                oom();
            sum += touch(g, 0, have);
            while (have < max_bytes) {
                size_t want = have * 2 > max_bytes ? max_bytes : have * 2;
                g = realloc(g, want);
                if (!g)
                    oom();
                sum += touch(g, have, want);
                have = want;
            }
            free(g);
        }
    }
    for (int i = 0; i < live; i++)
        free(blocks[i]);
    free(blocks);
    return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: large ITERATIONS [MIN_KIB MAX_KIB [LIVE [THREADS]]]\n");
        return 2;
    }
    iterations = atol(argv[1]);
    min_bytes = (argc > 2 ? strtoul(argv[2], NULL, 10) : 128) * 1024;
    max_bytes = (argc > 3 ? strtoul(argv[3], NULL, 10) : 4096) * 1024;
    live = argc > 4 ? atoi(argv[4]) : 8;
    int threads = argc > 5 ? atoi(argv[5]) : 1;
    if (iterations < 1 || min_bytes < 4096 || max_bytes < min_bytes || live < 1 || threads < 1) {
        fprintf(stderr, "large: bad arguments\n");
        return 2;
    }
    pthread_t *tid = malloc(sizeof(pthread_t) * (size_t)threads);
    for (int t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, worker, (void *)(uintptr_t)t);
    unsigned long sum = 0;
    for (int t = 0; t < threads; t++) {
        void *r;
        pthread_join(tid[t], &r);
        sum += (unsigned long)(uintptr_t)r;
    }
    free(tid);
    printf("large iterations=%ld threads=%d sum=%lu\n", iterations, threads, sum);
    return 0;
}
