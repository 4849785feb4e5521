/*
 * pairs: N malloc + free pairs of one size, the loop ci/callgrind.sh counts
 * instructions of (an N and a 2N run: the difference over N is one pair).
 *
 *   pairs N [SIZE]
 */
#include "bench.h"
#include <stdlib.h>

NOINLINE static void pairs(long n, size_t size) {
    for (long i = 0; i < n; i++) {
        char *p = malloc(size);
        if (!p)
            abort();
        *(volatile char *)p = 1;
        ESCAPE(p);
        free(p);
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 64;
    /* Blocks of the same size kept live, so that no allocator sees its page or
       slab become empty at every free (mimalloc retires such a page). */
    void *keep[16];
    for (int i = 0; i < 16; i++)
        keep[i] = malloc(size);
    pairs(n, size);
    for (int i = 0; i < 16; i++)
        free(keep[i]);
    return 0;
}
