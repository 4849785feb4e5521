/* Double free of a large block (1 MiB, its own mapping). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    char *volatile a = malloc(1 << 20);
    if (!a)
        return 2;
    memset(a, 0x5a, 1 << 20);
    printf("%p\n", (void *)a);
    fflush(stdout);
    free(a);
    free(a);
    puts("survived");
    return 0;
}
