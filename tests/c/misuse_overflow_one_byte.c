/* One-byte heap overflow: malloc(24), write p[24], free. The default mode
 * cannot see it (the 32-byte class has room); the debug mode's red zone
 * must. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    char *volatile p = malloc(24);
    if (!p)
        return 2;
    for (int i = 0; i < 24; i++)
        p[i] = (char)i;
    printf("%p\n", (void *)p);
    fflush(stdout);
    p[24] = 1;
    free(p);
    puts("survived");
    return 0;
}
