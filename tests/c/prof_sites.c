/* Heap profile workloads (tests/processes/heap_profile.rs), run under the preload
 * with SLUBMALLOC_PROF=1 and a small SLUBMALLOC_PROF_RATE. Two call sites
 * whose live bytes are in a known ratio:
 *   two      site_a keeps 60000 x 64 B (3,840,000 B), site_b 320 x 4 KiB
 *            (1,310,720 B), and site_b allocates and frees 20000 more: 3:1.
 *   fork     the parent keeps site_a's blocks and forks; the child keeps
 *            site_b's, 3x site_a's bytes, and exits (its own profile); the
 *            parent then exits (a profile without site_b).
 *   threads  4 threads keep 15000 x 64 B each from site_a and exit; main
 *            frees every other one (frees of sampled blocks from another
 *            thread), then keeps site_b's 320 x 4 KiB: 1,920,000 : 1,310,720.
 *   signal   as `two`, then raise(SIGUSR2) (a profile), then frees site_a's
 *            blocks and exits (a profile without them).
 *   medium   site_a keeps 40 x 96 KiB (medium blocks: spans of a segment's
 *            slabs); site_b allocates 20 x 48 KiB that grow() reallocates
 *            to 96 KiB, then 20 x 96 KiB freed at once: site_a : grow is
 *            2:1, and site_b keeps nothing (realloc moved the bytes, free
 *            took the rest).
 *   large    as medium with 1.5 MiB and 768 KiB (large blocks: mappings
 *            of their own).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) void *site_a(size_t n) {
    char *p = malloc(n);
    if (!p) abort();
    memset(p, 1, n);
    return p;
}

__attribute__((noinline)) void *site_b(size_t n) {
    char *p = malloc(n);
    if (!p) abort();
    memset(p, 2, n);
    return p;
}

__attribute__((noinline)) void *grow(void *p, size_t n) {
    p = realloc(p, n);
    if (!p) abort();
    return p;
}

static void *a[60000], *b[960];

static void keep_b(int n) {
    for (int i = 0; i < n; i++) b[i] = site_b(4096);
}

static void *thread_main(void *arg) {
    void **mine = arg;
    for (int i = 0; i < 15000; i++) mine[i] = site_a(64);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "two";
    if (!strcmp(mode, "two") || !strcmp(mode, "signal")) {
        for (int i = 0; i < 60000; i++) a[i] = site_a(64);
        keep_b(320);
        for (int i = 0; i < 20000; i++) free(site_b(4096));
        if (!strcmp(mode, "signal")) {
            raise(SIGUSR2);
            for (int i = 0; i < 60000; i++) free(a[i]);
        }
    } else if (!strcmp(mode, "fork")) {
        for (int i = 0; i < 15000; i++) a[i] = site_a(64);
        pid_t pid = fork();
        if (pid < 0) abort();
        if (pid == 0) {
            keep_b(720); /* 2,949,120 B against site_a's 960,000: about 3:1 */
            exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) abort();
        printf("child %d\n", (int)pid);
    } else if (!strcmp(mode, "threads")) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            if (pthread_create(&t[i], NULL, thread_main, &a[i * 15000])) abort();
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < 60000; i += 2) free(a[i]);
        keep_b(320);
    } else if (!strcmp(mode, "medium") || !strcmp(mode, "large")) {
        size_t kib = !strcmp(mode, "medium") ? 96 : 1536;
        for (int i = 0; i < 40; i++) a[i] = site_a(kib * 1024);
        for (int i = 0; i < 20; i++) {
            b[i] = grow(site_b(kib / 2 * 1024), kib * 1024);
        }
        for (int i = 0; i < 20; i++) free(site_b(kib * 1024));
    } else {
        fprintf(stderr, "prof_sites: unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
