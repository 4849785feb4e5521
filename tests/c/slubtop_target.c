/* A process for slubtop to read from outside (tests/processes/slubtop.rs),
 * run under the preload library.
 *
 *   slubtop_target hold
 *     Allocates blocks of several classes and a few large ones, keeps one
 *     helper thread alive (blocked on a pipe) and lets another exit, then
 *     asks for its own statistics report with raise(SLUBMALLOC_STATS_SIGNAL)
 *     (the test sets SLUBMALLOC_STATS=json, so one JSON line on stderr),
 *     writes "ready" on stdout and reads stdin until EOF, allocating nothing
 *     in between: slubtop must then read exactly that report.
 *
 *   slubtop_target churn THREADS
 *     Rounds of THREADS short-lived threads that allocate, check and free
 *     blocks of many sizes, half of them freed by the next thread (remote
 *     frees), so heaps come, go and are reused all the time; each round
 *     also forks a child while its threads run. Writes "ready"
 *     after the first round, churns until stdin is closed, then prints each
 *     round's checksum (the same for every round: the work is seeded per
 *     thread) and exits 0 if every block kept its bytes.
 *
 *   slubtop_target loaded LIB
 *     Run without the preload: loads LIB (libslubmalloc.so) with dlopen,
 *     so that the allocator's anchor is mapped but glibc's malloc stays
 *     the program's, allocates and frees, writes "ready" and reads stdin
 *     until EOF. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void say_ready(void) {
    /* write(2): stdio would allocate its buffer after the report. */
    if (write(1, "ready\n", 6) != 6)
        exit(5);
}

/* ---- hold ---- */

static int helper_pipe[2], helper_done[2];

static void *helper(void *arg) {
    (void)arg;
    void *mine[300];
    for (int i = 0; i < 300; i++) {
        mine[i] = malloc(200);
        memset(mine[i], 1, 200);
    }
    for (int i = 0; i < 300; i += 2)
        free(mine[i]);
    if (write(helper_done[1], "d", 1) != 1)
        exit(5);
    char c;
    /* Blocked until main closes the pipe. */
    while (read(helper_pipe[0], &c, 1) > 0) {
    }
    for (int i = 1; i < 300; i += 2)
        free(mine[i]);
    return NULL;
}

static void *short_lived(void *arg) {
    (void)arg;
    void *v[100];
    for (int i = 0; i < 100; i++)
        v[i] = malloc(64 + i);
    for (int i = 0; i < 100; i++)
        free(v[i]);
    return malloc(3000); /* handed to main: a remote free later */
}

static int hold(void) {
    static void *small[2000], *mid[100], *large[3];
    for (int i = 0; i < 2000; i++)
        small[i] = malloc(48);
    for (int i = 0; i < 100; i++)
        mid[i] = malloc(20000);
    for (int i = 0; i < 3; i++)
        large[i] = malloc((size_t)(1 + i) << 20);
    for (int i = 0; i < 2000; i += 3)
        free(small[i]);
    free(mid[7]);
    free(large[1]);
    if (pipe(helper_pipe) != 0 || pipe(helper_done) != 0)
        return 3;
    pthread_t h, s;
    if (pthread_create(&h, NULL, helper, NULL) != 0 || pthread_create(&s, NULL, short_lived, NULL) != 0)
        return 3;
    void *from_thread;
    pthread_join(s, &from_thread);
    free(from_thread);
    char c;
    /* The helper has made its allocations and is about to block. */
    if (read(helper_done[0], &c, 1) != 1)
        return 3;
    raise(SIGUSR2);
    say_ready();
    while (read(0, &c, 1) > 0) {
    }
    close(helper_pipe[1]);
    pthread_join(h, NULL);
    return 0;
}

/* ---- churn ---- */

enum { PER_THREAD = 2000, MAX_THREADS = 16 };

static int nthreads;
/* Blocks each thread leaves for the next one to free. */
static unsigned char *handed[MAX_THREADS][PER_THREAD / 2];
static size_t handed_size[MAX_THREADS][PER_THREAD / 2];
static uint64_t sums[MAX_THREADS];
static volatile int corrupt;

static size_t size_of_block(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t r = *s >> 33;
    if (r % 50 == 0)
        return 70000 + r % 100000; /* large */
    if (r % 8 == 0)
        return 1024 + r % 30000;
    return 8 + r % 500;
}

static void *churner(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t seed = 12345 + (uint64_t)me * 977, sum = 0;
    unsigned char *mine[PER_THREAD];
    size_t sizes[PER_THREAD];
    for (int i = 0; i < PER_THREAD; i++) {
        sizes[i] = size_of_block(&seed);
        mine[i] = malloc(sizes[i]);
        memset(mine[i], (me + i) & 0xff, sizes[i]);
    }
    for (int i = 0; i < PER_THREAD; i++) {
        if (mine[i][0] != ((me + i) & 0xff) || mine[i][sizes[i] - 1] != ((me + i) & 0xff))
            corrupt = 1;
        sum += sizes[i] * (uint64_t)(i + 1);
        if (i % 2 == 0) {
            free(mine[i]);
        } else {
            handed[me][i / 2] = mine[i];
            handed_size[me][i / 2] = sizes[i];
        }
    }
    sums[me] = sum;
    return NULL;
}

void *freer(void *arg);

static uint64_t churn_round(void) {
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&t[i], NULL, churner, (void *)(intptr_t)i) != 0)
            exit(3);
    /* A fork while the threads run: the child repairs what they held
     * (src/fork.rs), allocates, and exits. */
    pid_t child = fork();
    if (child == 0) {
        void *p = malloc(100);
        free(p);
        _exit(0);
    }
    int status;
    if (child < 0 || waitpid(child, &status, 0) != child || status != 0)
        exit(6);
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    /* The next round's threads are new: hand each block to a freeing
     * thread of its own. */
    pthread_t f[MAX_THREADS];
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&f[i], NULL, freer, (void *)(intptr_t)i) != 0)
            exit(3);
    uint64_t total = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(f[i], NULL);
        total += sums[i];
    }
    return total;
}

void *freer(void *arg) {
    int from = ((int)(intptr_t)arg + 1) % nthreads;
    for (int i = 0; i < PER_THREAD / 2; i++) {
        unsigned char *b = handed[from][i];
        if (b[handed_size[from][i] / 2] != ((from + 2 * i + 1) & 0xff))
            corrupt = 1;
        free(b);
    }
    return NULL;
}

static volatile int stdin_closed;

static void *watch_stdin(void *arg) {
    (void)arg;
    char c;
    while (read(0, &c, 1) > 0) {
    }
    stdin_closed = 1;
    return NULL;
}

static int churn(int threads) {
    if (threads < 1 || threads > MAX_THREADS)
        return 2;
    nthreads = threads;
    static uint64_t results[100000];
    long rounds = 0;
    results[rounds++] = churn_round();
    say_ready();
    pthread_t w;
    if (pthread_create(&w, NULL, watch_stdin, NULL) != 0)
        return 3;
    while (!stdin_closed && rounds < 100000)
        results[rounds++] = churn_round();
    pthread_join(w, NULL);
    for (long i = 0; i < rounds; i++)
        printf("round %ld checksum %llu\n", i, (unsigned long long)results[i]);
    return corrupt ? 4 : 0;
}

/* ---- loaded ---- */

static int loaded(const char *lib) {
    if (!dlopen(lib, RTLD_NOW | RTLD_LOCAL)) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 3;
    }
    /* glibc's: the library's malloc is nobody's. */
    char *volatile p = malloc(100);
    free(p);
    say_ready();
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "hold") == 0)
        return hold();
    if (argc >= 3 && strcmp(argv[1], "churn") == 0)
        return churn(atoi(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "loaded") == 0)
        return loaded(argv[2]);
    fprintf(stderr, "usage: %s hold | churn THREADS | loaded LIB\n", argv[0]);
    return 2;
}
