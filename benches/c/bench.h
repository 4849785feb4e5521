/*
 * What the C workloads share: xorshift random numbers, monotonic time,
 * resident memory, sleeping, and the two macros that keep a measured loop
 * from being optimised away. Included first by every workload here
 * (ci/measure.py builds them with -I benches/c).
 */
#ifndef SLUBMALLOC_BENCH_H
#define SLUBMALLOC_BENCH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
/* Makes `p` escape, so that the compiler cannot elide a malloc/free pair. */
#define ESCAPE(p) __asm__ volatile("" ::"r"(p) : "memory")

/* xorshift64: the next pseudo-random number of the sequence in *s (not 0). */
static inline uint64_t next_rand(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Seconds on CLOCK_MONOTONIC. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds of CPU time of the whole process (every thread, the kernel's
   work on its behalf included): on a loaded machine, steadier than wall
   time. */
static inline double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* This process's resident memory in KiB (/proc/self/statm), -1 if unknown.
   No allocation: safe in a thread that samples while others allocate. */
static inline long rss_kib(void) {
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    long size = 0, resident = 0;
    sscanf(buf, "%ld %ld", &size, &resident);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Runs fn(i) on n threads (n at most 256), i = 0..n-1, and joins them. */
#include <pthread.h>
static inline void run_threads(int n, void *(*fn)(void *)) {
    pthread_t th[256];
    if (n > 256)
        abort();
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, fn, (void *)(intptr_t)i);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

#endif
