/*
 * churn: a server's mixed-size churn with frees across more than two
 * threads. THREADS workers each keep a table of LIVE blocks (a connection's
 * state: mostly small, some of a few KiB, a few of up to 32 KiB). Each
 * operation replaces a random block of its table, and every fourth one also
 * sends a freshly allocated request to the next worker round the ring
 * through a mutex-protected mailbox (a request that finds it full is freed
 * by its sender); each worker frees what it receives after checking it. So frees land on blocks allocated by other threads, in
 * a ring of THREADS, with sizes that span many classes.
 *
 *   churn THREADS OPS [LIVE]
 *
 * Prints a checksum of the messages received.
 */
#include "bench.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { MAILBOX = 256 };

struct mailbox {
    pthread_mutex_t lock;
    size_t *slots[MAILBOX];
    int count;
};

static int threads;
static long ops, live;
static struct mailbox *boxes;
static uint64_t checksums[64];

/* Mostly small, a quarter of a few KiB, one in 64 up to 32 KiB. */
static size_t mixed_size(uint64_t *s) {
    uint64_t r = next_rand(s);
    if (r % 64 == 0)
        return 4096 + (r >> 8) % 28672;
    if (r % 4 == 0)
        return 256 + (r >> 8) % 3840;
    return 16 + (r >> 8) % 241;
}

static size_t *make(uint64_t *s) {
    size_t size = mixed_size(s) & ~(size_t)7;
    if (size < 16)
        size = 16;
    size_t *p = malloc(size);
    if (!p)
        abort();
    p[0] = size;
    p[size / sizeof(size_t) - 1] = ~size;
    return p;
}

static uint64_t check_and_free(size_t *p) {
    size_t size = p[0];
    if (p[size / sizeof(size_t) - 1] != ~size)
        abort();
    free(p);
    return size;
}

/* Takes everything in worker `w`'s mailbox and frees it. */
static uint64_t drain(int w) {
    struct mailbox *b = &boxes[w];
    size_t *got[MAILBOX];
    pthread_mutex_lock(&b->lock);
    int n = b->count;
    memcpy(got, b->slots, n * sizeof got[0]);
    b->count = 0;
    pthread_mutex_unlock(&b->lock);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        sum += check_and_free(got[i]);
    return sum;
}

/* Posts `p` to worker `w`; false if its mailbox is full. */
static int post(int w, size_t *p) {
    struct mailbox *b = &boxes[w];
    pthread_mutex_lock(&b->lock);
    int ok = b->count < MAILBOX;
    if (ok)
        b->slots[b->count++] = p;
    pthread_mutex_unlock(&b->lock);
    return ok;
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    size_t **table = malloc(live * sizeof *table);
    if (!table)
        abort();
    for (long i = 0; i < live; i++)
        table[i] = make(&s);
    uint64_t sum = 0;
    int next = (me + 1) % threads;
    for (long i = 0; i < ops; i++) {
        long k = (long)(next_rand(&s) % (uint64_t)live);
        check_and_free(table[k]);
        table[k] = make(&s);
        if (i % 4 == 0) {
            /* A full mailbox (its worker is slow or done): the request is
               dropped, freed here. */
            size_t *msg = make(&s);
            if (!post(next, msg))
                sum += check_and_free(msg);
        }
        if (i % 64 == 0)
            sum += drain(me);
    }
    for (long i = 0; i < live; i++)
        check_and_free(table[i]);
    free(table);
    checksums[me] = sum;
    return NULL;
}

int main(int argc, char **argv) {
    threads = argc > 1 ? atoi(argv[1]) : 4;
    ops = argc > 2 ? atol(argv[2]) : 1000000;
    live = argc > 3 ? atol(argv[3]) : 2000;
    if (threads < 2 || threads > 64 || ops < 1 || live < 1) {
        fprintf(stderr, "usage: churn THREADS(2..64) OPS [LIVE]\n");
        return 2;
    }
    boxes = calloc(threads, sizeof *boxes);
    for (int i = 0; i < threads; i++)
        pthread_mutex_init(&boxes[i].lock, NULL);
    run_threads(threads, worker);
    uint64_t sum = 0;
    for (int i = 0; i < threads; i++)
        sum += checksums[i] + drain(i);
    printf("churn %d threads %ld ops: checksum %llu\n", threads, ops, (unsigned long long)sum);
    free(boxes);
    return 0;
}
