/*
 * idle_purge: is memory given back while the program is idle? THREADS
 * threads build MIB MiB (requested bytes) of small blocks (16..512 B),
 * writing each, free them all and exit. The main thread then makes no
 * further call into the allocator: it sleeps, reading /proc/self/statm
 * (open/read/close, no stdio) every 100 ms for IDLE_MS ms.
 *
 *   idle_purge [MIB [IDLE_MS [THREADS]]]
 *
 * Prints the samples and
 *   summary peak_kib=.. end_kib=.. end_over_peak=..
 * where peak is the resident size with every block live.
 */
#include "bench.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long mib = 512;
static int threads = 2;
static pthread_barrier_t built;
static long peak_kib;


static void *worker(void *arg) {
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(uintptr_t)arg + 1;
    size_t budget = ((size_t)mib << 20) / (size_t)threads;
    size_t cap = budget / 16 + 1, n = 0, used = 0;
    void **held = malloc(cap * sizeof(void *));
    if (!held)
        abort();
    while (used < budget && n < cap) {
        next_rand(&s);
        size_t size = 16 + s % 497;
        char *p = malloc(size);
        if (!p)
            abort();
        memset(p, 1, size);
        held[n++] = p;
        used += size;
    }
    if (pthread_barrier_wait(&built) == PTHREAD_BARRIER_SERIAL_THREAD)
        peak_kib = rss_kib();
    pthread_barrier_wait(&built);
    for (size_t i = 0; i < n; i++)
        free(held[i]);
    free(held);
    return NULL;
}

int main(int argc, char **argv) {
    mib = argc > 1 ? atol(argv[1]) : 512;
    long idle_ms = argc > 2 ? atol(argv[2]) : 1000;
    threads = argc > 3 ? atoi(argv[3]) : 2;
    if (mib < 1 || idle_ms < 0 || threads < 1 || threads > 64) {
        fprintf(stderr, "usage: idle_purge [MIB [IDLE_MS [THREADS]]]\n");
        return 2;
    }
    static char out[64 * 64];
    int len = 0;
    pthread_t tid[64];
    pthread_barrier_init(&built, NULL, (unsigned)threads);
    for (long t = 0; t < threads; t++)
        if (pthread_create(&tid[t], NULL, worker, (void *)(t + 1)) != 0)
            return 1;
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    /* From here on, no call into the allocator until the summary. */
    long last = rss_kib();
    len += snprintf(out + len, sizeof out - (size_t)len, "sample 0 %ld\n", last);
    for (long ms = 100; ms <= idle_ms; ms += 100) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        last = rss_kib();
        if (len < (int)sizeof out - 64)
            len += snprintf(out + len, sizeof out - (size_t)len, "sample %ld %ld\n", ms, last);
    }
    fputs(out, stdout);
    printf("summary peak_kib=%ld end_kib=%ld end_over_peak=%.3f\n", peak_kib, last,
           peak_kib > 0 ? (double)last / (double)peak_kib : 0.0);
    return 0;
}
