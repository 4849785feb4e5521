/* Double free of a small block with another free in between: free(a);
 * free(b); free(a). The second free of `a` must stop the process. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    /* volatile: keep the compiler from reasoning about the misuse. */
    char *volatile a = malloc(48);
    char *volatile b = malloc(48);
    if (!a || !b)
        return 2;
    a[0] = 1;
    b[0] = 2;
    printf("%p\n", (void *)a);
    fflush(stdout);
    free(a);
    free(b);
    free(a);
    puts("survived");
    return 0;
}
