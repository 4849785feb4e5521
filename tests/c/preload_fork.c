/* fork while other threads allocate: NTHREADS threads malloc, realloc and
 * free without pause, and trade blocks through a shared array (so frees
 * cross threads), while main forks NFORKS children. The fork catches those
 * threads anywhere in the allocator, locks held or not. Each child checks a
 * block made before the fork, frees every block left in the shared array
 * after checking its contents, allocates and frees many blocks with their
 * contents checked (some from a new thread) and zero-size blocks (usable
 * size 0: src/zero.rs, whose slabs' list a child may rebuild), and exits;
 * a child that hangs or crashes fails the run. Prints "forks <n> ok". */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NTHREADS = 3, NFORKS = 300, SLOTS = 512, SHARED = 256, KEEP = 2000 };

static atomic_int stop;
/* Blocks made by one thread and freed by another; each starts with its size
 * and the size's complement. */
static _Atomic(size_t *) shared[SHARED];
/* Zero-size blocks made by one thread and freed by another. */
static _Atomic(void *) shared_zero[SHARED];
static atomic_long churn;
static unsigned char *before_fork;

static void *churner(void *arg) {
    uint64_t s = 88172645463325252ull + (uintptr_t)arg;
    void *slot[SLOTS] = {0};
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int i = (int)(s % SLOTS);
        size_t n = (s >> 20) % 64 == 0 ? 40000 + (s >> 32) % 300000 : 1 + (s >> 32) % 3000;
        if (slot[i] && (s & 1)) {
            slot[i] = realloc(slot[i], n);
        } else {
            free(slot[i]);
            if ((s >> 50) % 8 == 0)
                n = 0; /* a zero-size block */
            slot[i] = (s & 2) ? malloc(n) : calloc(1, n);
        }
        if (!slot[i]) abort();
        memset(slot[i], (int)i, n < 32 ? n : 32);
        if ((s >> 40) % 4 == 0) {
            size_t m = 16 + (s >> 44) % 2000;
            size_t *b = malloc(m);
            if (!b) abort();
            b[0] = m;
            b[1] = ~m;
            free(atomic_exchange(&shared[(s >> 8) % SHARED], b));
        }
        if ((s >> 52) % 8 == 0) {
            void *z = malloc(0);
            if (!z) abort();
            free(atomic_exchange(&shared_zero[(s >> 24) % SHARED], z));
        }
        atomic_fetch_add_explicit(&churn, 1, memory_order_relaxed);
    }
    for (int i = 0; i < SLOTS; i++) free(slot[i]);
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        void *p = malloc(16 + (size_t)i * 7);
        if (!p) return (void *)1;
        free(p);
    }
    return NULL;
}

static int child(int k) {
    for (int i = 0; i < 4096; i++)
        if (before_fork[i] != (unsigned char)(i * 5)) return 3;
    free(before_fork);
    for (int i = 0; i < SHARED; i++) {
        size_t *b = atomic_load(&shared[i]);
        if (b && (b[0] < 16 || b[1] != ~b[0])) return 7;
        free(b);
        void *z = atomic_load(&shared_zero[i]);
        if (z && malloc_usable_size(z) != 0) return 11;
        free(z);
    }
    static unsigned char *keep[KEEP];
    for (int i = 0; i < KEEP; i++) {
        size_t n = 8 + (size_t)(i * 37) % 5000;
        keep[i] = malloc(n);
        if (!keep[i]) return 8;
        memset(keep[i], i & 0xff, n);
    }
    for (int i = 0; i < KEEP; i++) {
        size_t n = 8 + (size_t)(i * 37) % 5000;
        for (size_t j = 0; j < n; j += 61)
            if (keep[i][j] != (unsigned char)(i & 0xff)) return 9;
        free(keep[i]);
    }
    void *p[200];
    for (int i = 0; i < 200; i++) {
        p[i] = malloc(i % 50 == 0 ? 100000 : 8 + (size_t)i * 24);
        if (!p[i]) return 4;
        memset(p[i], i, 8);
    }
    for (int i = 0; i < 200; i++) free(p[i]);
    for (int i = 0; i < 200; i++) {
        p[i] = malloc(0);
        if (!p[i] || malloc_usable_size(p[i]) != 0) return 10;
        for (int j = 0; j < i; j++)
            if (p[j] == p[i]) return 12;
    }
    for (int i = 0; i < 200; i++) free(p[i]);
    if (k % 10 == 0) {
        pthread_t t;
        void *r;
        if (pthread_create(&t, NULL, child_thread, NULL) != 0) return 5;
        pthread_join(t, &r);
        if (r) return 6;
    }
    return 0;
}

int main(void) {
    before_fork = malloc(4096);
    for (int i = 0; i < 4096; i++) before_fork[i] = (unsigned char)(i * 5);
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) pthread_create(&th[i], NULL, churner, (void *)(intptr_t)i);
    int failures = 0;
    for (int k = 0; k < NFORKS; k++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            int rc = child(k);
            /* Half the children run exit handlers too. */
            if (k % 2) exit(rc);
            _exit(rc);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid) {
            perror("waitpid");
            return 1;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d failed: status %#x\n", k, status);
            failures++;
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < SHARED; i++) {
        free(atomic_load(&shared[i]));
        free(atomic_load(&shared_zero[i]));
    }
    free(before_fork);
    if (failures) return 1;
    printf("forks %d ok, parent threads made %ld allocations meanwhile\n", NFORKS, atomic_load(&churn));
    return 0;
}
