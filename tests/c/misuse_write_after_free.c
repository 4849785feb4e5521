/* Write after free: free(p), then p[8] = 0x41 (past the free-list link, so
 * only poisoning can see it), then allocate the same size again until the
 * freed block would have been handed out. The debug mode must stop the
 * process when it reuses the block. */
#include <stdio.h>
#include <stdlib.h>

#define AGAIN 4096

int main(void) {
    char *volatile p = malloc(24);
    if (!p)
        return 2;
    printf("%p\n", (void *)p);
    fflush(stdout);
    free(p);
    p[8] = 0x41;
    static void *held[AGAIN];
    for (int i = 0; i < AGAIN; i++) {
        held[i] = malloc(24);
        if (!held[i])
            return 3;
    }
    puts("survived");
    for (int i = 0; i < AGAIN; i++)
        free(held[i]);
    return 0;
}
