/* Free of an address nobody allocated (and that is not even mapped). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    void *volatile p = (void *)(uintptr_t)0x123456789000ULL;
    printf("%p\n", p);
    fflush(stdout);
    free(p);
    puts("survived");
    return 0;
}
