/*
 * fork_cost: time of one fork, from the parent's call until the child has
 * allocated, freed and exited and the parent has reaped it, while THREADS
 * other threads allocate and free without pause (0: a single-threaded
 * process). The parent holds LIVE_MIB MiB of small blocks, so the child has
 * a heap to copy and to repair.
 *
 *   fork_cost THREADS [FORKS [LIVE_MIB]]
 *
 * Prints the median and the 90th percentile in microseconds.
 */
#include "bench.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;

static void *churner(void *arg) {
    uint64_t s = 0x9e3779b97f4a7c15ull * (1 + (uintptr_t)arg);
    void *slot[256] = {0};
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int i = (int)(s % 256);
        free(slot[i]);
        slot[i] = malloc(16 + (s >> 32) % 2000);
    }
    for (int i = 0; i < 256; i++) free(slot[i]);
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    int forks = argc > 2 ? atoi(argv[2]) : 500;
    long live_mib = argc > 3 ? atol(argv[3]) : 64;
    long nlive = live_mib * 1024 * 1024 / 64;
    void **live = malloc(sizeof(void *) * nlive);
    for (long i = 0; i < nlive; i++) {
        live[i] = malloc(48);
        memset(live[i], 1, 48);
    }
    pthread_t th[64];
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, churner, (void *)(intptr_t)i);
    double *us = malloc(sizeof(double) * forks);
    for (int k = 0; k < forks; k++) {
        double t0 = (now_s() * 1e6);
        pid_t pid = fork();
        if (pid == 0) {
            void *p = malloc(100);
            free(p);
            _exit(p == NULL);
        }
        int status;
        waitpid(pid, &status, 0);
        us[k] = (now_s() * 1e6) - t0;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    qsort(us, forks, sizeof(double), cmp);
    printf("threads %d forks %d live %ld MiB: median %.0f us, p90 %.0f us\n", threads, forks,
           live_mib, us[forks / 2], us[forks * 9 / 10]);
    for (long i = 0; i < nlive; i++) free(live[i]);
    free(live);
    free(us);
    return 0;
}
