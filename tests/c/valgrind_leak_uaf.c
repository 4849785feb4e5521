/*
 * Two bugs for valgrind's memcheck to find in a program run with the
 * preload (tests/processes/valgrind.rs): 100 bytes leaked (the only pointer
 * to them overwritten) and a read of a 64-byte block after its free.
 * Without memcheck the program runs and exits 0 either way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

int main(void) {
    sink = malloc(100);
    if (!sink) return 1;
    memset(sink, 1, 100);
    sink = NULL; /* leaked: definitely lost */

    char *p = malloc(64);
    if (!p) return 1;
    strcpy(p, "freed too soon");
    free(p);
    char c = ((volatile char *)p)[10]; /* use after free */
    printf("read %d after free\n", c != 0);
    return 0;
}
