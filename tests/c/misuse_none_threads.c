/* A correct multithreaded program (the control case for the misuse tests):
 * four threads run a seeded mix of malloc, calloc, realloc, posix_memalign,
 * aligned_alloc, strdup and free, check every block's contents before
 * resizing or freeing it, use the whole malloc_usable_size, and hand blocks to
 * the next thread, which checks and frees them. The output depends only on
 * the seeds and on the contents read back, so it is the same under any
 * correct allocator, with or without its debug mode. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define OPS 30000
#define SLOTS 256
#define RING 64

struct block {
    unsigned char *p;
    size_t size;
    uint64_t id;
};

struct inbox {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct block ring[RING];
    unsigned head, tail; /* tail - head blocks queued */
    int sender_done;
};

struct worker {
    int index;
    uint64_t rng;
    unsigned long allocs, frees, sent, received;
    uint64_t checksum;
    unsigned long errors;
};

static struct inbox inboxes[THREADS];

static uint64_t next_rand(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static unsigned char pattern(uint64_t id, size_t i) {
    return (unsigned char)((id * 0x9E3779B97F4A7C15ULL + i * 0x2545F491ULL) >> 29);
}

static void fill(struct block *b, size_t from) {
    for (size_t i = from; i < b->size; i++)
        b->p[i] = pattern(b->id, i);
}

/* Checks the first `len` bytes; folds them into the checksum. */
static void check(struct worker *w, struct block *b, size_t len) {
    uint64_t h = b->id;
    for (size_t i = 0; i < len; i++) {
        if (b->p[i] != pattern(b->id, i)) {
            w->errors++;
            fprintf(stderr, "thread %d: block %llu byte %zu changed\n", w->index,
                    (unsigned long long)b->id, i);
            break;
        }
        h = (h ^ b->p[i]) * 0x100000001B3ULL;
    }
    w->checksum += h;
}

/* The bytes past the request, up to malloc_usable_size, are the program's
 * too: write them and check them before the block goes. */
static void fill_tail(struct block *b) {
    size_t usable = malloc_usable_size(b->p);
    if (usable < b->size) {
        fprintf(stderr, "usable size %zu below request %zu\n", usable, b->size);
        exit(4);
    }
    memset(b->p + b->size, 0xA5, usable - b->size);
}

static void check_tail(struct worker *w, struct block *b) {
    size_t usable = malloc_usable_size(b->p);
    for (size_t i = b->size; i < usable; i++)
        if (b->p[i] != 0xA5) {
            w->errors++;
            fprintf(stderr, "thread %d: tail byte %zu of block %llu changed\n", w->index, i,
                    (unsigned long long)b->id);
            return;
        }
}

static size_t random_size(uint64_t *s) {
    uint64_t r = next_rand(s) % 100;
    if (r < 60)
        return 1 + next_rand(s) % 128;
    if (r < 85)
        return 129 + next_rand(s) % 896;
    if (r < 97)
        return 1025 + next_rand(s) % 31744;
    return 32769 + next_rand(s) % 200000;
}

static void release(struct worker *w, struct block *b) {
    check(w, b, b->size);
    check_tail(w, b);
    free(b->p);
    b->p = NULL;
    w->frees++;
}

static void send_to_next(struct worker *w, struct block *b) {
    struct inbox *in = &inboxes[(w->index + 1) % THREADS];
    pthread_mutex_lock(&in->lock);
    while (in->tail - in->head == RING)
        pthread_cond_wait(&in->cond, &in->lock);
    in->ring[in->tail % RING] = *b;
    in->tail++;
    pthread_cond_broadcast(&in->cond);
    pthread_mutex_unlock(&in->lock);
    w->sent++;
    b->p = NULL;
}

/* Takes whatever is queued; with `wait`, until the sender is done. */
static void receive(struct worker *w, int wait) {
    struct inbox *in = &inboxes[w->index];
    pthread_mutex_lock(&in->lock);
    for (;;) {
        while (in->tail != in->head) {
            struct block b = in->ring[in->head % RING];
            in->head++;
            pthread_cond_broadcast(&in->cond);
            pthread_mutex_unlock(&in->lock);
            w->received++;
            release(w, &b);
            pthread_mutex_lock(&in->lock);
        }
        if (!wait || in->sender_done)
            break;
        pthread_cond_wait(&in->cond, &in->lock);
    }
    pthread_mutex_unlock(&in->lock);
}

static void *run(void *arg) {
    struct worker *w = arg;
    static __thread struct block slots[SLOTS];
    uint64_t next_id = (uint64_t)w->index << 40;
    for (int op = 0; op < OPS; op++) {
        struct block *b = &slots[next_rand(&w->rng) % SLOTS];
        uint64_t kind = next_rand(&w->rng) % 100;
        if (b->p && kind < 25) {
            release(w, b);
        } else if (b->p && kind < 45) {
            size_t old = b->size;
            size_t want = random_size(&w->rng);
            check(w, b, old);
            unsigned char *q = realloc(b->p, want);
            if (!q) {
                w->errors++;
                continue;
            }
            b->p = q;
            b->size = want;
            check(w, b, old < want ? old : want);
            fill(b, old < want ? old : want);
            fill_tail(b);
        } else if (b->p && kind < 55) {
            check(w, b, b->size);
            check_tail(w, b);
            send_to_next(w, b);
        } else if (!b->p) {
            size_t size = random_size(&w->rng);
            uint64_t how = next_rand(&w->rng) % 10;
            void *p = NULL;
            if (how < 5) {
                p = malloc(size);
            } else if (how < 7) {
                p = calloc(1, size);
                for (size_t i = 0; p && i < size; i++)
                    if (((unsigned char *)p)[i] != 0) {
                        w->errors++;
                        break;
                    }
            } else if (how < 8) {
                size_t align = (size_t)8 << (next_rand(&w->rng) % 10);
                if (posix_memalign(&p, align, size) != 0)
                    p = NULL;
                else if ((uintptr_t)p % align)
                    w->errors++;
            } else if (how < 9) {
                size_t align = (size_t)16 << (next_rand(&w->rng) % 8);
                size = (size + align - 1) / align * align;
                p = aligned_alloc(align, size);
                if (p && (uintptr_t)p % align)
                    w->errors++;
            } else {
                char text[64];
                size = (size_t)snprintf(text, sizeof text, "block %llu of thread %d",
                                        (unsigned long long)next_id, w->index) + 1;
                p = strdup(text);
                if (p && strcmp(p, text) != 0)
                    w->errors++;
            }
            if (!p) {
                w->errors++;
                continue;
            }
            b->p = p;
            b->size = size;
            b->id = next_id++;
            fill(b, 0);
            fill_tail(b);
            w->allocs++;
        }
        if (op % 64 == 0)
            receive(w, 0);
    }
    for (int i = 0; i < SLOTS; i++)
        if (slots[i].p)
            release(w, &slots[i]);
    struct inbox *down = &inboxes[(w->index + 1) % THREADS];
    pthread_mutex_lock(&down->lock);
    down->sender_done = 1;
    pthread_cond_broadcast(&down->cond);
    pthread_mutex_unlock(&down->lock);
    receive(w, 1);
    return NULL;
}

int main(void) {
    static struct worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        pthread_mutex_init(&inboxes[i].lock, NULL);
        pthread_cond_init(&inboxes[i].cond, NULL);
        workers[i].index = i;
        workers[i].rng = 0x853C49E6748FEA9BULL * (uint64_t)(i + 1);
    }
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, run, &workers[i]) != 0)
            return 3;
    unsigned long errors = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        struct worker *w = &workers[i];
        printf("thread %d: allocs %lu frees %lu sent %lu received %lu checksum %016llx\n", i,
               w->allocs, w->frees, w->sent, w->received, (unsigned long long)w->checksum);
        errors += w->errors;
    }
    printf("errors %lu\n", errors);
    return errors == 0 ? 0 : 1;
}
