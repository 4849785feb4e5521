/* Misuse that must stop the process with a message, never crash inside the
 * allocator: `preload_invalid_free <case>` prints "pointer <p>" and then
 * passes p to free (or realloc / malloc_usable_size). */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define OPAQUE(x)                               \
    ({                                          \
        __typeof__((x) + 0) opaque_v_ = (x);    \
        __asm__ volatile("" : "+r"(opaque_v_)); \
        opaque_v_;                              \
    })

static char global_buffer[256];

static void announce(void *p) {
    printf("pointer %p\n", p);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    const char *c = argv[1];
    char stack_buffer[64];
    memset(stack_buffer, 1, sizeof stack_buffer);
    /* Warm the allocator up so that it has segments and large blocks. */
    void *warm = malloc(100), *warm_large = malloc(1 << 20);
    void *p;
    if (!strcmp(c, "stack") || !strcmp(c, "realloc_stack") || !strcmp(c, "usable_stack")) {
        p = stack_buffer + 16;
    } else if (!strcmp(c, "global")) {
        p = global_buffer;
    } else if (!strcmp(c, "wild")) {
        p = (void *)(uintptr_t)0x100000000000ull;
    } else if (!strcmp(c, "foreign_mmap")) {
        p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 2;
        p = (char *)p + 4096;
    } else if (!strcmp(c, "interior_small")) {
        p = (char *)malloc(64) + 16;
    } else if (!strcmp(c, "interior_large")) {
        p = (char *)malloc(1 << 20) + 4096;
    } else if (!strcmp(c, "double_small")) {
        p = malloc(48);
        free(p);
    } else if (!strcmp(c, "double_large")) {
        p = malloc(1 << 20);
        free(p);
    } else {
        return 2;
    }
    announce(p);
    if (!strcmp(c, "realloc_stack")) {
        p = realloc(OPAQUE(p), 1000);
    } else if (!strcmp(c, "usable_stack")) {
        printf("usable %zu\n", malloc_usable_size(OPAQUE(p)));
    } else {
        free(OPAQUE(p));
    }
    free(warm);
    free(warm_large);
    printf("survived\n");
    return 0;
}
