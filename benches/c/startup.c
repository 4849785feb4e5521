/*
 * startup: the smallest program that uses the allocator, to see what it
 * costs a short command-line tool in resident memory: N malloc(SIZE) + free
 * pairs on one thread, then exit. Peak RSS is mostly what the allocator
 * touches to start (its tables, its first segment's header) and the one
 * slab or page of the size.
 *
 *   startup [N [SIZE]]
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
    pairs(n, size);
    return 0;
}
