/*
 * batch: one thread allocates a batch of blocks of one size and frees them
 * in the order it allocated them, over and over: batches of 25, 100, 400
 * and 1600 blocks of 16, 64, 256 and 1024 bytes, in the main thread, then
 * the same in a second thread (the shape where a sheaf of 32 blocks
 * overflows 50 times a batch).
 *
 *   batch ROUNDS
 *
 * Each round runs every batch size at every block size once. Prints the
 * time per malloc + free pair of each thread's part.
 */
#include "bench.h"
#include <pthread.h>

static const size_t SIZES[] = {16, 64, 256, 1024};
static const long BATCHES[] = {25, 100, 400, 1600};
static void *blocks[1600];
static long rounds;

/* The rounds, in the calling thread: the pairs made. */
NOINLINE static long run(void) {
    long pairs = 0;
    for (long r = 0; r < rounds; r++) {
        for (int s = 0; s < 4; s++) {
            for (int b = 0; b < 4; b++) {
                for (long i = 0; i < BATCHES[b]; i++) {
                    char *p = malloc(SIZES[s]);
                    ESCAPE(p);
                    p[0] = (char)i;
                    blocks[i] = p;
                }
                for (long i = 0; i < BATCHES[b]; i++)
                    free(blocks[i]);
                pairs += BATCHES[b];
            }
        }
    }
    return pairs;
}

static void *second(void *out) {
    *(long *)out = run();
    return NULL;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 1000;
    double t0 = now_s();
    long pairs = run();
    double t1 = now_s();
    pthread_t th;
    long pairs2 = 0;
    pthread_create(&th, NULL, second, &pairs2);
    pthread_join(th, NULL);
    double t2 = now_s();
    printf("batch: main %.2f ns/pair, second thread %.2f ns/pair\n", (t1 - t0) * 1e9 / pairs,
           (t2 - t1) * 1e9 / pairs2);
    return 0;
}
