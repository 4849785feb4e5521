/* Prints, one per line, what the SLUBMALLOC_* variables can change, as this
 * program sees it (tests/processes/secure_mode.rs; tests/programs/option_effects.rs
 * prints the same lines from Rust):
 *
 *   secure=S euid=U     getauxval(AT_SECURE) and the effective user id
 *   usable_100=N        malloc_usable_size of a 100-byte block: its class
 *                       (112), or 100 in debug mode (SLUBMALLOC_DEBUG)
 *   next_slot=N         of 24 consecutive 2500-byte blocks from a fresh
 *                       slab, how many came right after the one before
 *                       (24 unless SLUBMALLOC_FREELIST_RANDOM)
 *   usr2=default|handled
 *                       SIGUSR2's disposition (SLUBMALLOC_STATS_SIGNAL)
 *   purged=yes|no       whether 16 MiB of small blocks, built and freed by
 *                       two threads that then exit, went back to the kernel
 *                       within 3 s while the program made no allocator call
 *                       (SLUBMALLOC_PURGE_DELAY_MS, _BACKGROUND_PURGE; less
 *                       than the trim bound, 32 MiB, which would give it
 *                       back at free time whatever they say)
 *
 * It is linked with the library (-lslubmalloc), as /etc/ld.so.preload would
 * load it; a report or profile at exit is the library's own doing. */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "proc_self.h"

static pthread_barrier_t built;
static pthread_barrier_t measured;

static void *worker(void *arg) {
    (void)arg;
    size_t n = (8u << 20) / 128;
    void **held = malloc(n * sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        held[i] = malloc(16 + i % 241);
        memset(held[i], 1, 16);
    }
    pthread_barrier_wait(&built);
    pthread_barrier_wait(&measured);
    for (size_t i = 0; i < n; i++)
        free(held[i]);
    free(held);
    return NULL;
}

static int purged(void) {
    pthread_t t[2];
    pthread_barrier_init(&built, NULL, 3);
    pthread_barrier_init(&measured, NULL, 3);
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, worker, NULL))
            exit(3);
    pthread_barrier_wait(&built);
    long peak = rss_kib();
    pthread_barrier_wait(&measured);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int ms = 0; ms < 3000; ms += 10) {
        if (rss_kib() * 4 < peak)
            return 1;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

int main(void) {
    printf("secure=%lu euid=%d\n", getauxval(AT_SECURE), (int)geteuid());

    char *volatile small = malloc(100);
    printf("usable_100=%zu\n", malloc_usable_size(small));
    free(small);

    char *p[25];
    int next_slot = 0;
    for (int i = 0; i < 25; i++)
        p[i] = malloc(2500);
    for (int i = 1; i < 25; i++)
        next_slot += p[i] == p[i - 1] + 2560;
    for (int i = 0; i < 25; i++)
        free(p[i]);
    printf("next_slot=%d\n", next_slot);

    struct sigaction sa;
    sigaction(SIGUSR2, NULL, &sa);
    printf("usr2=%s\n", sa.sa_handler == SIG_DFL ? "default" : "handled");

    printf("purged=%s\n", purged() ? "yes" : "no");
    return 0;
}
