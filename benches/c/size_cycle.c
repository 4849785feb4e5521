/*
 * size_cycle: one thread that moves from size to size, as a short program
 * moves from phase to phase: a ring of LIVE blocks in which each malloc
 * replaces the oldest block; round r allocates LIVE blocks of size
 * sizes[r % NSIZES], where the NSIZES sizes step evenly from 8 to MAX
 * bytes. So at every moment LIVE blocks are live, of at most two sizes, and
 * every size's blocks are all freed before its next round. An allocator
 * that keeps a size's emptied memory for that size alone (until a timer
 * gives it back) grows with the number of sizes; one that hands it to the
 * next size stays at about LIVE blocks.
 *
 *   size_cycle [ROUNDS [LIVE [NSIZES [MAX]]]]     (defaults 300 1000 64 560)
 */
#include "bench.h"
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 300;
    long live = argc > 2 ? atol(argv[2]) : 1000;
    long nsizes = argc > 3 ? atol(argv[3]) : 64;
    long max = argc > 4 ? atol(argv[4]) : 560;
    if (rounds < 1 || live < 1 || nsizes < 1 || max < 8)
        return 2;
    char **ring = calloc((size_t)live, sizeof *ring);
    if (!ring)
        abort();
    unsigned long sum = 0;
    long slot = 0;
    for (long r = 0; r < rounds; r++) {
        long k = r % nsizes;
        size_t size = (size_t)(8 + (nsizes > 1 ? (max - 8) * k / (nsizes - 1) : 0));
        for (long i = 0; i < live; i++) {
            free(ring[slot]);
            char *p = malloc(size);
            if (!p)
                abort();
            memset(p, (int)i, size);
            sum += (unsigned char)p[size - 1];
            ring[slot] = p;
            slot = slot + 1 == live ? 0 : slot + 1;
        }
    }
    for (long i = 0; i < live; i++)
        free(ring[i]);
    free(ring);
    return sum == 1 ? 3 : 0; /* uses sum: the stores cannot be dropped */
}
