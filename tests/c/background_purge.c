/*
 * The background purger, seen from a C program under the preload.
 *
 *   background_purge MODE [keeper]
 *
 * Every mode: two threads build 64 MiB of small blocks, free them and exit;
 * then the program makes no call into the allocator for 1 s (it sleeps,
 * reading /proc/self/statm with open/read/close). With `keeper`, one more
 * thread, started first (in "fork" mode, in the parent and in the child),
 * allocates a block and sleeps through the whole run: the program has
 * other threads while it is idle. Modes:
 *   idle         prints "peak_kib=P end_kib=E threads=T" (T: threads left
 *                after a further 0.5 s idle, from /proc/self/status)
 *   closefds     closes every file descriptor first; exit status 0 if
 *                resident fell below a quarter of the peak, 1 if not
 *   fork         first forks once with the purger running; the child does
 *                the same and prints as "idle" does
 *   pthread_exit the main thread ends with pthread_exit after the threads
 *                have freed: the process must still end
 *   fork_exit    forks while two other threads sleep; the child builds and
 *                frees as above (its purger starts), then its main thread
 *                ends with pthread_exit: the child must end within 2.5 s
 *                (exit status 5 if not)
 *   fork_small   the parent builds and frees (its purger runs, a purge is
 *                pending), forks; the child (its keeper started, if asked)
 *                allocates a few small blocks,
 *                frees nothing, waits 200 ms and prints "threads=T" (it has
 *                no reason for a purger of its own)
 *   late_free    the main thread alone: builds 64 MiB, pauses 300 ms (three
 *                purge delays) with nothing freed, then frees it all and
 *                makes no further call; prints as "idle" does
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_self.h"

static pthread_barrier_t built;
static long peak_kib;

/* `bytes` of small blocks (16..256 bytes, each written), in an array. */
static void **build(size_t bytes, size_t *n) {
    *n = bytes / 128;
    void **held = malloc(*n * sizeof(void *));
    for (size_t i = 0; i < *n; i++) {
        held[i] = malloc(16 + i % 241);
        memset(held[i], 1, 16);
    }
    return held;
}

static void free_all(void **held, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(held[i]);
    free(held);
}

static void *worker(void *arg) {
    (void)arg;
    size_t n;
    void **held = build(32u << 20, &n);
    if (pthread_barrier_wait(&built) == PTHREAD_BARRIER_SERIAL_THREAD)
        peak_kib = rss_kib();
    pthread_barrier_wait(&built);
    free_all(held, n);
    return NULL;
}

static void build_and_free(void) {
    pthread_t t[2];
    pthread_barrier_init(&built, NULL, 2);
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, worker, NULL))
            exit(3);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
}

static void idle_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The child's exit status, 4 if it did not exit. */
static int child_status(pid_t pid) {
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 4;
}

static void report(void) {
    idle_ms(1000);
    long end = rss_kib();
    idle_ms(500);
    long threads = thread_count();
    printf("peak_kib=%ld end_kib=%ld threads=%ld\n", peak_kib, end, threads);
}

static void *sleeper(void *arg) {
    (void)arg;
    char *volatile p = malloc(64);
    idle_ms(3000);
    free(p);
    return NULL;
}

/* The keeper: a thread with a heap, asleep until the process ends. */
static void *keeper(void *arg) {
    (void)arg;
    char *volatile p = malloc(64);
    p[0] = 1;
    idle_ms(60000);
    return NULL;
}

static int keep;

static void start_keeper(void) {
    pthread_t t;
    if (keep && pthread_create(&t, NULL, keeper, NULL))
        exit(3);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "idle";
    keep = argc > 2 && !strcmp(argv[2], "keeper");
    start_keeper();
    if (!strcmp(mode, "idle")) {
        build_and_free();
        report();
    } else if (!strcmp(mode, "closefds")) {
        for (int fd = 0; fd < 1024; fd++)
            close(fd);
        build_and_free();
        idle_ms(1000);
        return rss_kib() * 4 < peak_kib ? 0 : 1;
    } else if (!strcmp(mode, "fork")) {
        build_and_free(); /* the parent's purger runs now */
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            start_keeper();
            build_and_free();
            report();
            fflush(stdout);
            _exit(0);
        }
        return child_status(pid);
    } else if (!strcmp(mode, "fork_exit")) {
        pthread_t sleepers[2];
        for (int i = 0; i < 2; i++)
            if (pthread_create(&sleepers[i], NULL, sleeper, NULL))
                return 3;
        idle_ms(100); /* the sleepers have their heaps */
        pid_t pid = fork();
        if (pid == 0) {
            build_and_free();
            pthread_exit(NULL);
        }
        for (int waited = 0; waited < 2500; waited += 10) {
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid)
                return WIFEXITED(st) ? WEXITSTATUS(st) : 4;
            idle_ms(10);
        }
        kill(pid, SIGKILL);
        return 5;
    } else if (!strcmp(mode, "fork_small")) {
        build_and_free();
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            start_keeper();
            for (int i = 0; i < 100; i++) {
                char *volatile p = malloc(16 + i * 40);
                p[0] = 1; /* kept: the child frees nothing */
            }
            idle_ms(200);
            printf("threads=%ld\n", thread_count());
            fflush(stdout);
            _exit(0);
        }
        return child_status(pid);
    } else if (!strcmp(mode, "late_free")) {
        size_t n;
        void **held = build(64u << 20, &n);
        peak_kib = rss_kib();
        idle_ms(300);
        free_all(held, n);
        report();
    } else if (!strcmp(mode, "pthread_exit")) {
        build_and_free();
        pthread_exit(NULL);
    }
    return 0;
}
