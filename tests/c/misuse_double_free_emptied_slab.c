/* Double free of a block whose slab emptied and went back to its segment:
 * forty slabs' worth of 1000-byte blocks are allocated and all freed, which
 * returns most of those slabs to their segment (a node keeps only a couple
 * of empty ones); then a block from the middle is freed again. Its slab is
 * free as a whole, and the second free must still be named a double free,
 * not an invalid pointer. */
#include <stdio.h>
#include <stdlib.h>

#define N (65 * 40)

int main(void) {
    static char *volatile blocks[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(1000);
        if (!blocks[i])
            return 2;
        blocks[i][0] = 1;
    }
    char *volatile a = blocks[N / 2];
    printf("%p\n", (void *)a);
    fflush(stdout);
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    free(a);
    puts("survived");
    return 0;
}
