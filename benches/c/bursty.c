/*
 * bursty: does resident memory come down after a burst?
 *
 *   bursty MIB [LIGHT_MS [SAMPLE_MS [MAX_SIZE]]]
 *
 * Allocates MIB MiB (requested bytes) of small blocks of random size
 * 16..MAX_SIZE, writing each, then frees them all, then keeps running lightly
 * for LIGHT_MS ms (every millisecond: replace 64 blocks of a 1,000-block
 * working set, then sleep). A sampler thread reads /proc/self/statm every
 * SAMPLE_MS ms from start to end. Prints
 *   event NAME T_MS            (allocated, freed, end)
 *   sample T_MS RSS_KIB        (one per sample, plus one at each event)
 *   summary peak_kib=.. end_kib=.. end_over_peak=..
 */
#include "bench.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 4096
static long sample_ms[MAX_SAMPLES], sample_kib[MAX_SAMPLES];
static atomic_int nsamples;
static atomic_int stop;
static long sample_period_ms = 100;
static double t0;

static long elapsed_ms(void) {
    return (long)((now_s() - t0) * 1000);
}

static void take_sample(void) {
    int i = atomic_fetch_add(&nsamples, 1);
    if (i < MAX_SAMPLES) {
        sample_ms[i] = elapsed_ms();
        sample_kib[i] = rss_kib();
    }
}

static void *sampler(void *arg) {
    (void)arg;
    long next = 0;
    while (!atomic_load(&stop)) {
        take_sample();
        next += sample_period_ms;
        long now = elapsed_ms();
        if (next > now)
            sleep_ms(next - now);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bursty MIB [LIGHT_MS [SAMPLE_MS [MAX_SIZE]]]\n");
        return 2;
    }
    long mib = atol(argv[1]);
    long light_ms = argc > 2 ? atol(argv[2]) : 2000;
    sample_period_ms = argc > 3 ? atol(argv[3]) : 100;
    size_t max = argc > 4 ? strtoul(argv[4], NULL, 10) : 256;
    if (mib < 1 || light_ms < 0 || sample_period_ms < 1 || max < 16) {
        fprintf(stderr, "bursty: bad arguments\n");
        return 2;
    }
    t0 = now_s();
    pthread_t tid;
    pthread_create(&tid, NULL, sampler, NULL);

    /* The burst: blocks chained through their first word, so no side array. */
    uint64_t seed = 0x243f6a8885a308d3ull;
    size_t want = (size_t)mib << 20, got = 0;
    void *head = NULL;
    while (got < want) {
        size_t size = 16 + next_rand(&seed) % (max - 15);
        char *p = malloc(size);
        if (!p) {
            fprintf(stderr, "bursty: out of memory\n");
            return 1;
        }
        *(void **)p = head;
        p[size - 1] = 1;
        head = p;
        got += size;
    }
    long t_alloc = elapsed_ms();
    take_sample(); /* the peak, which the sampler may fall just short of */
    while (head) {
        void *next = *(void **)head;
        free(head);
        head = next;
    }
    long t_freed = elapsed_ms();
    take_sample();

    /* Light use: a small working set, touched every millisecond. */
    enum { WORKING_SET = 1000, PER_TICK = 64 };
    static void *ws[WORKING_SET];
    for (int i = 0; i < WORKING_SET; i++)
        ws[i] = malloc(16 + next_rand(&seed) % (max - 15));
    while (elapsed_ms() - t_freed < light_ms) {
        for (int k = 0; k < PER_TICK; k++) {
            int i = (int)(next_rand(&seed) % WORKING_SET);
            free(ws[i]);
            size_t size = 16 + next_rand(&seed) % (max - 15);
            ws[i] = malloc(size);
            ((char *)ws[i])[0] = 1;
        }
        sleep_ms(1);
    }
    long t_end = elapsed_ms();
    atomic_store(&stop, 1);
    pthread_join(tid, NULL);
    take_sample();
    for (int i = 0; i < WORKING_SET; i++)
        free(ws[i]);

    int n = nsamples < MAX_SAMPLES ? nsamples : MAX_SAMPLES;
    long peak = 0;
    for (int i = 0; i < n; i++)
        if (sample_kib[i] > peak)
            peak = sample_kib[i];
    printf("event allocated %ld\nevent freed %ld\nevent end %ld\n", t_alloc, t_freed, t_end);
    for (int i = 0; i < n; i++)
        printf("sample %ld %ld\n", sample_ms[i], sample_kib[i]);
    long end = sample_kib[n - 1];
    printf("summary peak_kib=%ld end_kib=%ld end_over_peak=%.3f\n", peak, end,
           peak > 0 ? (double)end / (double)peak : 0.0);
    return 0;
}
