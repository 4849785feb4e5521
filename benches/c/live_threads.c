/*
 * live_threads: per-thread memory cost. THREADS threads are alive at once;
 * each allocates BLOCKS blocks of each of eight sizes (16 B .. 9 KB, 13.5 KB
 * per round of eight), writes every byte, and waits until all threads have
 * done so; then each frees its blocks and exits. Peak resident memory
 * against the live bytes shows what each thread costs beyond what it holds.
 *
 *   live_threads THREADS [BLOCKS]
 *
 * Prints live bytes, resident memory with every thread holding its blocks,
 * and after the threads have exited.
 */
#include "bench.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const size_t sizes[8] = {16, 48, 128, 320, 800, 1600, 3500, 9000};
static long blocks = 4;
static pthread_barrier_t all_allocated, measured;


static void *worker(void *arg) {
    (void)arg;
    void *held[8 * 64];
    long n = 0;
    for (long b = 0; b < blocks; b++)
        for (int s = 0; s < 8; s++) {
            char *p = malloc(sizes[s]);
            if (!p)
                abort();
            memset(p, (int)n, sizes[s]);
            held[n++] = p;
        }
    pthread_barrier_wait(&all_allocated);
    pthread_barrier_wait(&measured);
    for (long i = 0; i < n; i++)
        free(held[i]);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: live_threads THREADS [BLOCKS]\n");
        return 2;
    }
    long threads = atol(argv[1]);
    blocks = argc > 2 ? atol(argv[2]) : 4;
    if (threads < 1 || threads > 100000 || blocks < 1 || blocks > 64) {
        fprintf(stderr, "live_threads: bad arguments\n");
        return 2;
    }
    pthread_t *tid = malloc(sizeof(pthread_t) * (size_t)threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    pthread_barrier_init(&all_allocated, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&measured, NULL, (unsigned)threads + 1);
    for (long t = 0; t < threads; t++)
        if (pthread_create(&tid[t], &attr, worker, NULL) != 0) {
            fprintf(stderr, "live_threads: pthread_create failed at %ld\n", t);
            return 1;
        }
    pthread_barrier_wait(&all_allocated);
    long held = rss_kib();
    pthread_barrier_wait(&measured);
    for (long t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    size_t live = 0;
    for (int s = 0; s < 8; s++)
        live += sizes[s];
    live *= (size_t)blocks * (size_t)threads;
    printf("live_threads threads=%ld blocks=%ld live_kib=%zu rss_kib_held=%ld rss_kib_after_exit=%ld\n",
           threads, blocks, live >> 10, held, rss_kib());
    free(tid);
    return 0;
}
