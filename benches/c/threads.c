/*
 * threads: thread churn. TOTAL short-lived threads are created and joined in
 * waves of CONCURRENT (1: strictly one after another). Each thread allocates
 * ALLOCS blocks of random size 16..512, frees half of them itself and leaves
 * the other half to the main thread, which frees them after the join (frees
 * into the heap of a thread that has exited).
 *
 *   threads TOTAL [ALLOCS [CONCURRENT]]
 *
 * Prints resident memory after the first tenth of the threads and at the
 * end, to show whether memory grows with the number of threads ever started.
 */
#include "bench.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>

static long allocs = 100;

struct job {
    uint64_t seed;
    void **left; /* allocs/2 blocks handed to the main thread */
};

static void *worker(void *arg) {
    struct job *j = arg;
    uint64_t s = j->seed;
    void *mine[1024];
    long kept = 0, given = 0;
    for (long i = 0; i < allocs; i++) {
        next_rand(&s);
        size_t size = 16 + s % 497;
        char *p = malloc(size);
        if (!p)
            abort();
        p[0] = (char)i;
        p[size - 1] = (char)i;
        if (i & 1)
            j->left[given++] = p;
        else
            mine[kept++] = p;
    }
    for (long i = 0; i < kept; i++)
        free(mine[i]);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: threads TOTAL [ALLOCS [CONCURRENT]]\n");
        return 2;
    }
    long total = atol(argv[1]);
    allocs = argc > 2 ? atol(argv[2]) : 100;
    int wave = argc > 3 ? atoi(argv[3]) : 1;
    if (total < 1 || allocs < 0 || allocs > 2048 || wave < 1 || wave > 256) {
        fprintf(stderr, "threads: bad arguments\n");
        return 2;
    }
    pthread_t tid[256];
    struct job jobs[256];
    for (int w = 0; w < wave; w++)
        jobs[w].left = malloc(sizeof(void *) * (size_t)(allocs / 2 + 1));
    long started = 0, rss_early = -1;
    while (started < total) {
        int n = 0;
        for (; n < wave && started < total; n++, started++) {
            jobs[n].seed = 0x9e3779b97f4a7c15ull * (uint64_t)(started + 1);
            if (pthread_create(&tid[n], NULL, worker, &jobs[n]) != 0) {
                fprintf(stderr, "threads: pthread_create failed\n");
                return 1;
            }
        }
        for (int k = 0; k < n; k++) {
            pthread_join(tid[k], NULL);
            for (long i = 0; i < allocs / 2; i++)
                free(jobs[k].left[i]);
        }
        if (rss_early < 0 && started >= total / 10)
            rss_early = rss_kib();
    }
    for (int w = 0; w < wave; w++)
        free(jobs[w].left);
    printf("threads total=%ld allocs=%ld wave=%d rss_kib_after_10pct=%ld rss_kib_end=%ld\n", total,
           allocs, wave, rss_early, rss_kib());
    return 0;
}
