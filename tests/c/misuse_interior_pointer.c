/* Free of a pointer into the middle of a live block: p + 8 of malloc(64). */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    char *volatile p = malloc(64);
    if (!p)
        return 2;
    p[0] = 1;
    char *volatile q = p + 8;
    printf("%p\n", (void *)q);
    fflush(stdout);
    free(q);
    puts("survived");
    return 0;
}
