/*
 * A single-threaded program stays single-threaded under the allocator, and
 * still gets its memory back when it goes idle. Each mode prints one line;
 * "threads=T" is /proc/self/status's count at the end.
 *
 *   single_threaded unshare      32 MiB of 64 KB blocks allocated and
 *                                freed, 0.3 s without a call, then
 *                                unshare(CLONE_NEWUSER) (what bubblewrap,
 *                                `unshare -U` and rootless containers do; the
 *                                kernel refuses it to a multi-threaded
 *                                process): "unshare=ok threads=T", or
 *                                "unshare=failed errno=E (TEXT) threads=T"
 *                                and exit status 1
 *   single_threaded flag         100 MiB allocated and freed (small blocks,
 *                                then 1 MiB blocks), 0.3 s without a call:
 *                                "single_threaded=F threads=T", F glibc's
 *                                __libc_single_threaded
 *   single_threaded idle         512 MiB of small blocks (16..512 bytes)
 *                                allocated, written and freed, then 1 s
 *                                without a call: "peak_kib=P end_kib=E
 *                                threads=T"
 *   single_threaded churn        6 rounds of 96 MiB of small blocks
 *                                allocated, written and freed: "rounds=6"
 *   single_threaded forksignal   glibc's malloc/tst-mallocfork2 shape: two
 *                                other processes send SIGUSR1 as fast as
 *                                they can while the program mallocs and
 *                                frees blocks of up to 70,000 bytes; the
 *                                handler forks (the child _exits at once).
 *                                Runs 3 s: "forks=N rounds=R threads=T"
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/single_threaded.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc_self.h"


static void idle_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Allocates `total` bytes in blocks of `size(i)` bytes, each written, and
 * frees them all; returns the resident size with all of them live. The
 * array of pointers is mapped apart: the frees are of the blocks only. */
static long alloc_free(size_t total, size_t (*size)(size_t)) {
    size_t cap = total / 64 + 1, n = 0, used = 0; /* mean sizes are over 64 */
    void **held = mmap(NULL, cap * sizeof(void *), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (held == MAP_FAILED)
        exit(3);
    while (used < total && n < cap) {
        size_t sz = size(n);
        char *p = malloc(sz);
        if (!p)
            exit(3);
        memset(p, 1, sz);
        held[n++] = p;
        used += sz;
    }
    long peak = rss_kib();
    for (size_t i = 0; i < n; i++)
        free(held[i]);
    munmap(held, cap * sizeof(void *));
    return peak;
}

static size_t size_64k(size_t i) { (void)i; return 64 << 10; }
static size_t size_1m(size_t i) { (void)i; return 1 << 20; }
static size_t size_small(size_t i) {
    uint64_t x = i * 0x9e3779b97f4a7c15ull;
    return 16 + (x >> 32) % 497;
}

static volatile sig_atomic_t forks;

static void on_usr1(int sig) {
    (void)sig;
    int saved = errno;
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    if (pid > 0)
        forks++;
    errno = saved;
}

static int fork_from_signal(void) {
    /* The children of the handler are reaped by the kernel. */
    signal(SIGCHLD, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    pid_t me = getpid(), senders[2];
    for (int i = 0; i < 2; i++) {
        senders[i] = fork();
        if (senders[i] < 0)
            return 3;
        if (senders[i] == 0) {
            for (;;) {
                if (kill(me, SIGUSR1) != 0)
                    _exit(0);
                usleep(200);
            }
        }
    }
    enum { SLOTS = 100 };
    void *slot[SLOTS] = {0};
    uint64_t s = 88172645463325252ull;
    long rounds = 0;
    double end = now_s() + 3;
    while (now_s() < end) {
        for (int i = 0; i < 1000; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            int k = (int)(s % SLOTS);
            free(slot[k]);
            size_t sz = (size_t)(s >> 20) % 70001;
            slot[k] = malloc(sz);
            if (sz && !slot[k])
                return 3;
            if (sz)
                ((char *)slot[k])[sz - 1] = 1;
        }
        rounds++;
    }
    for (int i = 0; i < 2; i++) {
        kill(senders[i], SIGKILL);
        waitpid(senders[i], NULL, 0);
    }
    for (int k = 0; k < SLOTS; k++)
        free(slot[k]);
    printf("forks=%ld rounds=%ld threads=%ld\n", (long)forks, rounds, thread_count());
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "unshare")) {
        alloc_free(32u << 20, size_64k);
        idle_ms(300);
        long t = thread_count();
        if (unshare(CLONE_NEWUSER) != 0) {
            int e = errno;
            printf("unshare=failed errno=%d (%s) threads=%ld\n", e, strerror(e), t);
            return 1;
        }
        printf("unshare=ok threads=%ld\n", t);
    } else if (!strcmp(mode, "flag")) {
        alloc_free(50u << 20, size_small);
        alloc_free(50u << 20, size_1m);
        idle_ms(300);
        printf("single_threaded=%d threads=%ld\n", (int)__libc_single_threaded, thread_count());
    } else if (!strcmp(mode, "idle")) {
        long peak = alloc_free(512u << 20, size_small);
        idle_ms(1000);
        long end = rss_kib();
        printf("peak_kib=%ld end_kib=%ld threads=%ld\n", peak, end, thread_count());
    } else if (!strcmp(mode, "churn")) {
        for (int i = 0; i < 6; i++)
            alloc_free(96u << 20, size_small);
        printf("rounds=6\n");
    } else if (!strcmp(mode, "forksignal")) {
        return fork_from_signal();
    } else {
        fprintf(stderr, "single_threaded: unknown mode '%s'\n", mode);
        return 2;
    }
    return 0;
}
