/*
 * larson: server-style churn in the manner of Larson and Krishnan's benchmark.
 * THREADS threads each own an array of BLOCKS live blocks of random size
 * MIN..MAX. In every generation each thread replaces OPS randomly chosen
 * blocks (free the old one, allocate a new one of random size). Between
 * generations the arrays move on to the next thread, so most frees hit blocks
 * that another thread allocated, as when a server hands requests between
 * worker threads.
 *
 *   larson THREADS BLOCKS OPS GENERATIONS [MIN MAX]
 */
#include "bench.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int threads;
static long blocks, ops, generations;
static size_t min_size, max_size;
static char ***arrays;
static pthread_barrier_t barrier;

static char *new_block(uint64_t *seed) {
    size_t size = min_size + next_rand(seed) % (max_size - min_size + 1);
    char *p = malloc(size);
    if (!p) {
        fprintf(stderr, "larson: out of memory\n");
        exit(1);
    }
    p[0] = 1;
    p[size - 1] = 2;
    return p;
}

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    uint64_t seed = 0x2545f4914f6cdd1dull * (uint64_t)(id + 1);
    char **mine = arrays[id];
    for (long i = 0; i < blocks; i++)
        mine[i] = new_block(&seed);
    pthread_barrier_wait(&barrier);
    for (long g = 0; g < generations; g++) {
        char **a = arrays[(id + g) % threads];
        for (long k = 0; k < ops; k++) {
            long i = (long)(next_rand(&seed) % (uint64_t)blocks);
            free(a[i]);
            a[i] = new_block(&seed);
        }
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: larson THREADS BLOCKS OPS GENERATIONS [MIN MAX]\n");
        return 2;
    }
    threads = atoi(argv[1]);
    blocks = atol(argv[2]);
    ops = atol(argv[3]);
    generations = atol(argv[4]);
    min_size = argc > 5 ? strtoul(argv[5], NULL, 10) : 16;
    max_size = argc > 6 ? strtoul(argv[6], NULL, 10) : 1024;
    if (threads < 1 || blocks < 1 || ops < 0 || generations < 0 || min_size < 2 || max_size < min_size) {
        fprintf(stderr, "larson: bad arguments\n");
        return 2;
    }
    arrays = malloc(sizeof(char **) * (size_t)threads);
    for (int t = 0; t < threads; t++)
        arrays[t] = malloc(sizeof(char *) * (size_t)blocks);
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);
    pthread_t *tid = malloc(sizeof(pthread_t) * (size_t)threads);
    for (int t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    unsigned long check = 0;
    for (int t = 0; t < threads; t++) {
        for (long i = 0; i < blocks; i++) {
            check += (unsigned char)arrays[t][i][0];
            free(arrays[t][i]);
        }
        free(arrays[t]);
    }
    free(arrays);
    free(tid);
    printf("larson threads=%d blocks=%ld ops=%ld generations=%ld check=%lu\n", threads, blocks, ops,
           generations, check);
    return 0;
}
