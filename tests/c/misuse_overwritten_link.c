/* Write after free over the free-list link: free(p), then overwrite p's
 * first word (where the link lives) with data, then allocate the same size
 * again. In the default mode the allocation that pops p must find the link
 * leading out of p's slab and stop the process ("corrupted free list"),
 * rather than hand out the address the data decodes to. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    /* Warm up the class, so that the allocations below take the fast path
     * (a refill's pop checks the link too, so without this the test would
     * pass with the fast path's check gone). */
    static void *warm[64];
    for (int i = 0; i < 64; i++)
        warm[i] = malloc(24);
    for (int i = 0; i < 64; i++)
        free(warm[i]);
    char *volatile p = malloc(24);
    if (!p)
        return 2;
    printf("%p\n", (void *)p);
    fflush(stdout);
    free(p);
    uint64_t data = 0x4141414141414141ull;
    memcpy(p, &data, sizeof data);
    void *volatile q = malloc(24);
    void *volatile r = malloc(24);
    printf("survived %p %p\n", q, r);
    return 0;
}
