/* Cross-thread frees with content checks. NTHREADS threads each allocate
 * PER_THREAD blocks (8 B to 200 KiB), fill them with a pattern derived from
 * (producer, sequence, size) and post each to the mailbox of a pseudo-random
 * other thread; every thread drains its mailbox, verifies every byte and
 * frees. Then a bulk phase: one thread frees a whole array that another
 * allocated while the allocator keeps serving the first. Prints
 * "verified <n>" and exits 1 at the first corrupted block. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NTHREADS = 4, PER_THREAD = 15000, BULK = 100000, BULK_ROUNDS = 3 };

struct msg {
    struct msg *next;
    uint32_t producer, seq;
    size_t size; /* of the whole block */
    unsigned char data[];
};

struct mailbox {
    pthread_mutex_t lock;
    struct msg *head;
} __attribute__((aligned(64)));

static struct mailbox box[NTHREADS];
static atomic_long verified;

static void die(const char *what, const void *p) {
    fprintf(stderr, "FAIL: %s (block %p)\n", what, p);
    exit(1);
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static unsigned char pattern(const struct msg *m, size_t i) {
    return (unsigned char)(m->producer * 31 + m->seq * 7 + m->size + i * 3 + (i >> 9));
}

static size_t pick_size(uint64_t *rng) {
    uint64_t r = next_rand(rng);
    size_t min = sizeof(struct msg);
    if (r % 100 == 0) return 32768 + r % 200000; /* large blocks */
    if (r % 10 == 0) return min + r % 32000;
    return min + r % 600;
}

static void verify_and_free(struct msg *m) {
    size_t n = m->size - sizeof *m;
    /* Check every byte of small blocks, the ends and a stride of big ones. */
    size_t step = n > 4096 ? 61 : 1;
    for (size_t i = 0; i < n; i += step)
        if (m->data[i] != pattern(m, i)) die("corrupted cross-thread block", m);
    if (n && m->data[n - 1] != pattern(m, n - 1)) die("corrupted end of block", m);
    if (malloc_usable_size(m) < m->size) die("usable size seen from another thread", m);
    free(m);
    atomic_fetch_add_explicit(&verified, 1, memory_order_relaxed);
}

static int drain(int me) {
    pthread_mutex_lock(&box[me].lock);
    struct msg *m = box[me].head;
    box[me].head = NULL;
    pthread_mutex_unlock(&box[me].lock);
    int n = 0;
    while (m) {
        struct msg *next = m->next;
        verify_and_free(m);
        m = next;
        n++;
    }
    return n;
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(me + 1);
    for (uint32_t seq = 0; seq < PER_THREAD; seq++) {
        size_t size = pick_size(&rng);
        struct msg *m = malloc(size);
        if (!m) die("malloc", NULL);
        m->producer = (uint32_t)me;
        m->seq = seq;
        m->size = size;
        for (size_t i = 0; i < size - sizeof *m; i++) m->data[i] = pattern(m, i);
        int to = (me + 1 + (int)(next_rand(&rng) % (NTHREADS - 1))) % NTHREADS;
        pthread_mutex_lock(&box[to].lock);
        m->next = box[to].head;
        box[to].head = m;
        pthread_mutex_unlock(&box[to].lock);
        if (seq % 64 == 0) drain(me);
    }
    while (atomic_load(&verified) < (long)NTHREADS * PER_THREAD) {
        if (drain(me) == 0) sched_yield();
    }
    return NULL;
}

/* Bulk phase: `owner` allocates arrays and hands them over; `freer` frees
 * them all while `owner` keeps allocating from the same classes. */
static uint64_t *volatile bulk_ready;
static atomic_int bulk_state; /* 0 empty, 1 full, 2 done */

static void *bulk_owner(void *arg) {
    (void)arg;
    for (int round = 0; round < BULK_ROUNDS; round++) {
        uint64_t **blocks = malloc(BULK * sizeof *blocks);
        if (!blocks) die("malloc", NULL);
        for (int i = 0; i < BULK; i++) {
            blocks[i] = malloc(8 * (size_t)(1 + i % 6));
            if (!blocks[i]) die("malloc", NULL);
            blocks[i][0] = (uint64_t)i * 2654435761u + (uint64_t)round;
        }
        while (atomic_load(&bulk_state) != 0) sched_yield();
        bulk_ready = (uint64_t *)blocks;
        atomic_store(&bulk_state, 1);
    }
    while (atomic_load(&bulk_state) != 0) sched_yield();
    atomic_store(&bulk_state, 2);
    return NULL;
}

static void *bulk_freer(void *arg) {
    (void)arg;
    int round = 0;
    for (;;) {
        int s;
        while ((s = atomic_load(&bulk_state)) == 0) sched_yield();
        if (s == 2) break;
        uint64_t **blocks = (uint64_t **)bulk_ready;
        for (int i = 0; i < BULK; i++) {
            if (blocks[i][0] != (uint64_t)i * 2654435761u + (uint64_t)round) die("bulk block changed", blocks[i]);
            free(blocks[i]);
        }
        free(blocks);
        atomic_fetch_add(&verified, BULK);
        round++;
        atomic_store(&bulk_state, 0);
    }
    return NULL;
}

int main(void) {
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) pthread_mutex_init(&box[i].lock, NULL);
    for (int i = 0; i < NTHREADS; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0) die("pthread_create", NULL);
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    long mailbox_blocks = atomic_load(&verified);
    pthread_t a, b;
    pthread_create(&a, NULL, bulk_owner, NULL);
    pthread_create(&b, NULL, bulk_freer, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("mailbox %ld bulk %ld\n", mailbox_blocks, atomic_load(&verified) - mailbox_blocks);
    return 0;
}
