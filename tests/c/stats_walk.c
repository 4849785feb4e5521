/* Counters that agree with a full walk after a concurrent workload under
 * LD_PRELOAD (tests/processes/stats_dump.rs).
 *
 * THREADS workers allocate blocks of many sizes (a few of them large) and
 * swap them through a shared mailbox, so most frees are of blocks another
 * thread allocated; each also keeps some blocks of its own. The allocator's
 * slubmalloc_check_stats() (0 when its counters equal a recount by walking)
 * is called three times, with no thread allocating:
 *   1. workers parked at a barrier, still alive, holding blocks, each having
 *      given its caches back first (slubmalloc_thread_idle);
 *   2. workers exited, leaving live blocks in the mailbox and their own;
 *   3. after main has freed every one of those blocks.
 * Exit status: 0 when every check returns 0, 77 when the symbol is missing
 * (not running under the slubmalloc preload), 1 otherwise (details on stderr). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int slubmalloc_check_stats(void) __attribute__((weak));
extern void slubmalloc_thread_idle(void) __attribute__((weak));

#define THREADS 4
#define OPS 20000
#define MAILBOX 512
#define OWN 128

static _Atomic(unsigned char *) mailbox[MAILBOX];
static unsigned char *own[THREADS][OWN];
static pthread_barrier_t parked, resumed;

static size_t pick_size(unsigned r) {
    switch (r % 16) {
    case 0:
        return 8 + (r >> 4) % 32761; /* up to the largest class */
    case 1:
        return (r >> 4) % 64 == 0 ? 32769 + (r >> 10) % 100000 : 100; /* rarely large */
    default:
        return 8 + (r >> 4) % 512;
    }
}

/* Every block is at least 8 bytes and its first word, where the allocator
 * keeps the link of a free block, gets the owner's tag. */
static unsigned char *make(size_t size, uint64_t tag) {
    unsigned char *p = malloc(size);
    if (p == NULL) {
        fprintf(stderr, "malloc(%zu) failed\n", size);
        exit(3);
    }
    memcpy(p, &tag, sizeof tag);
    return p;
}

static void *worker(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    unsigned seed = id * 2654435761u + 7;
    for (int i = 0; i < OPS; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned char *p = make(pick_size(seed >> 3), 0x5eed000000000000ull | id);
        if (seed & 0x40000000u) {
            /* Hand the block to whoever takes this mailbox slot next and free
             * what was there: usually another thread's block. */
            unsigned slot = (seed >> 12) % MAILBOX;
            unsigned char *old = atomic_exchange(&mailbox[slot], p);
            free(old);
        } else {
            unsigned slot = (seed >> 12) % OWN;
            free(own[id][slot]);
            own[id][slot] = p;
        }
    }
    slubmalloc_thread_idle();       /* as a pool's worker between tasks */
    pthread_barrier_wait(&parked);  /* main checks while we hold our blocks */
    pthread_barrier_wait(&resumed);
    for (int i = 0; i < OWN; i += 2) {  /* free half of our own, keep the rest */
        free(own[id][i]);
        own[id][i] = NULL;
    }
    return NULL;
}

static int check(const char *when) {
    int bad = slubmalloc_check_stats();
    if (bad != 0)
        fprintf(stderr, "stats_walk: %d classes disagree %s\n", bad, when);
    return bad;
}

int main(void) {
    if (slubmalloc_check_stats == NULL || slubmalloc_thread_idle == NULL) {
        fprintf(stderr, "stats_walk: slubmalloc_check_stats or slubmalloc_thread_idle not found (not under the preload?)\n");
        return 77;
    }
    pthread_barrier_init(&parked, NULL, THREADS + 1);
    pthread_barrier_init(&resumed, NULL, THREADS + 1);
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) {
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 3;
        }
    }
    pthread_barrier_wait(&parked);
    int bad = check("with the workers parked");
    pthread_barrier_wait(&resumed);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    bad += check("after the workers exited");
    for (int i = 0; i < MAILBOX; i++)
        free(atomic_exchange(&mailbox[i], NULL));
    for (int i = 0; i < THREADS; i++)
        for (int j = 0; j < OWN; j++)
            free(own[i][j]);
    bad += check("after main freed the exited workers' blocks");
    return bad == 0 ? 0 : 1;
}
