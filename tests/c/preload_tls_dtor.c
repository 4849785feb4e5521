/* malloc and free from pthread key destructors, which run at thread exit in
 * an order the allocator does not control: before or after its own
 * thread-exit cleanup. Each destructor checks and frees the thread's block,
 * allocates new ones, re-arms its key a few times (glibc runs up to
 * PTHREAD_DESTRUCTOR_ITERATIONS rounds) and hands one block to main, which
 * verifies and frees it after the thread is gone. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NTHREADS = 64, REARM = 2, HANDOFF_BYTES = 777 };

static pthread_key_t key_first, key_last;
static atomic_long allocated, freed;
static unsigned char *handed[NTHREADS][2 * (REARM + 1)];
static atomic_int handed_n[NTHREADS];

struct value {
    int thread;
    int round;
    size_t size;
    unsigned char data[];
};

static void die(const char *what) {
    fprintf(stderr, "FAIL: %s\n", what);
    exit(1);
}

static struct value *make(int thread, int round, size_t size) {
    struct value *v = malloc(sizeof *v + size);
    if (!v) die("malloc");
    atomic_fetch_add(&allocated, 1);
    v->thread = thread;
    v->round = round;
    v->size = size;
    for (size_t i = 0; i < size; i++) v->data[i] = (unsigned char)(thread * 7 + round + i);
    return v;
}

static void check_and_free(struct value *v) {
    for (size_t i = 0; i < v->size; i++)
        if (v->data[i] != (unsigned char)(v->thread * 7 + v->round + i)) die("key value changed");
    free(v);
    atomic_fetch_add(&freed, 1);
}

static void destructor(pthread_key_t key, void *arg) {
    struct value *v = arg;
    int thread = v->thread, round = v->round;
    check_and_free(v);
    /* Scratch allocations of many classes, freed at once. */
    void *scratch[40];
    for (int i = 0; i < 40; i++) {
        scratch[i] = malloc(8 + (size_t)i * 97 + (i == 39 ? 100000 : 0));
        if (!scratch[i]) die("scratch malloc in destructor");
        memset(scratch[i], i, 8);
    }
    for (int i = 0; i < 40; i++) free(scratch[i]);
    /* A block that outlives the thread: main frees it. */
    int slot = atomic_fetch_add(&handed_n[thread], 1);
    unsigned char *h = malloc(HANDOFF_BYTES);
    if (!h) die("handoff malloc");
    atomic_fetch_add(&allocated, 1);
    memset(h, thread + slot, HANDOFF_BYTES);
    handed[thread][slot] = h;
    if (round < REARM) pthread_setspecific(key, make(thread, round + 1, 50 + (size_t)round * 3000));
}

static void destroy_first(void *arg) { destructor(key_first, arg); }
static void destroy_last(void *arg) { destructor(key_last, arg); }

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    pthread_setspecific(key_first, make(t, 0, 24 + (size_t)t));
    pthread_setspecific(key_last, make(t, 0, 3000 + (size_t)t));
    void *p = malloc(1000);
    free(p);
    return NULL;
}

int main(void) {
    if (pthread_key_create(&key_first, destroy_first) != 0) die("key");
    /* Threads also allocate before the second key exists, so the allocator's
     * own key (if it makes one lazily) sits between ours. */
    void *warm = malloc(64);
    free(warm);
    if (pthread_key_create(&key_last, destroy_last) != 0) die("key");
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i += 8) {
        for (int k = i; k < i + 8; k++)
            if (pthread_create(&th[k], NULL, worker, (void *)(intptr_t)k) != 0) die("pthread_create");
        for (int k = i; k < i + 8; k++) pthread_join(th[k], NULL);
    }
    long handoffs = 0;
    for (int t = 0; t < NTHREADS; t++) {
        int n = atomic_load(&handed_n[t]);
        for (int s = 0; s < n; s++) {
            for (int i = 0; i < HANDOFF_BYTES; i++)
                if (handed[t][s][i] != (unsigned char)(t + s)) die("handed-off block changed");
            free(handed[t][s]);
            atomic_fetch_add(&freed, 1);
            handoffs++;
        }
    }
    printf("threads %d handoffs %ld allocated %ld freed %ld\n", NTHREADS, handoffs, atomic_load(&allocated),
           atomic_load(&freed));
    return atomic_load(&allocated) == atomic_load(&freed) ? 0 : 1;
}
