/* Two threads free, at the same time, blocks that a third, live thread has
 * just allocated, so that both push onto the remote free list of a slab the
 * third thread still owns, and some of their compare-and-swaps must be
 * retried. Every block is freed exactly once: nothing may abort. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
enum { ROUNDS = 20000, N = 64 };
static void *blocks[N];
static pthread_barrier_t go, done;
static void *freer(void *arg) {
    long first = (long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&go);
        for (long i = first; i < N; i += 2) free(blocks[i]);
        pthread_barrier_wait(&done);
    }
    return NULL;
}
int main(void) {
    pthread_barrier_init(&go, NULL, 3);
    pthread_barrier_init(&done, NULL, 3);
    pthread_t a, b;
    pthread_create(&a, NULL, freer, (void *)0);
    pthread_create(&b, NULL, freer, (void *)1);
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++) blocks[i] = malloc(64);
        pthread_barrier_wait(&go);
        pthread_barrier_wait(&done);
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    puts("ok: every block freed once, no abort");
    return 0;
}
