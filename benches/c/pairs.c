/*
 * pairs: N malloc + free pairs of one size, the loop ci/callgrind.sh counts
 * instructions of (an N and a 2N run: the difference over N is one pair),
 * with KEEP blocks of the size kept live around it (16 by default).
 *
 * With KEEP 0 it is also `startup` (ci/measure.py): the smallest program that
 * uses the allocator, to see what it costs a short command-line tool in
 * resident memory. Peak RSS is then mostly what the allocator touches to
 * start (its tables, its first segment's header) and the one slab or page
 * of the size.
 *
 *   pairs N [SIZE [KEEP]]
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
    int kept = argc > 3 ? atoi(argv[3]) : 16;
    if (kept < 0 || kept > 16)
        abort();
    /* Blocks of the same size kept live, so that no allocator sees its page or
       slab become empty at every free (mimalloc retires such a page). */
    void *keep[16];
    for (int i = 0; i < kept; i++)
        keep[i] = malloc(size);
    pairs(n, size);
    for (int i = 0; i < kept; i++)
        free(keep[i]);
    return 0;
}
