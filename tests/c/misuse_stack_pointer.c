/* Free of a stack address. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    char local[64];
    local[0] = 1;
    /* volatile laundering: the compiler must not see that it is the stack. */
    void *volatile p = local;
    printf("%p\n", p);
    fflush(stdout);
    free(p);
    puts("survived");
    return local[0] - 1;
}
