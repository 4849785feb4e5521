/* C23's sized frees under the preload library:
 *
 *     sized_free CASE
 *
 * CASE `right` frees every block with the size (and alignment) it was
 * asked for: every size up to 66,000 bytes from malloc and from calloc
 * (free_sized with the product), sizes moved and kept in place by
 * realloc (free_sized with the new size), large blocks, aligned_alloc's
 * blocks at every alignment up to a page with free_aligned_sized, null;
 * then prints "survived". The other cases print the block's address (`%p`,
 * the first line of stdout), then free it with a wrong size or
 * alignment, and print "survived" if that returns:
 *   smaller           malloc(100), free_sized(p, 20)
 *   bigger            malloc(100), free_sized(p, 300)
 *   large_as_small    malloc(1 MiB), free_sized(p, 100)
 *   small_as_large    malloc(100), free_sized(p, 1 MiB)
 *   aligned_as_plain  aligned_alloc(4096, 100), free_sized(p, 100)
 *   wrong_alignment   aligned_alloc(16, 100), free_aligned_sized(p, 4096, 100)
 * tests/processes/misuse.rs expects death by SIGABRT after one
 * "slubmalloc: " line naming "dealloc with the wrong layout" and that
 * address. glibc 2.36 has neither function: without them (weak symbols,
 * null unless the preload library defines them) the program exits 77.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void free_sized(void *p, size_t size) __attribute__((weak));
extern void free_aligned_sized(void *p, size_t align, size_t size) __attribute__((weak));

static void *must(void *p) {
    if (!p) {
        perror("allocation");
        exit(2);
    }
    return p;
}

static void right(void) {
    for (size_t n = 0; n <= 66000; n++) {
        char *p = must(malloc(n ? n : 1));
        p[0] = 1;
        free_sized(p, n ? n : 1);
        p = must(calloc(1, n ? n : 1));
        free_sized(p, n ? n : 1);
    }
    for (size_t n = 1; n <= 4096; n++) {
        char *p = must(calloc(n, 3));
        free_sized(p, 3 * n);
        size_t sizes[] = {n / 2 + 1, n + 1, n - 1 ? n - 1 : 1, 2 * n + 1};
        for (int i = 0; i < 4; i++) {
            p = must(malloc(n));
            p = must(realloc(p, sizes[i]));
            free_sized(p, sizes[i]);
        }
    }
    size_t large[] = {65537, 100000, 1 << 20, (1 << 20) + 1, 4 << 20};
    for (int i = 0; i < 5; i++) {
        char *p = must(malloc(large[i]));
        memset(p, 1, large[i]);
        free_sized(p, large[i]);
        /* Shrunk in place (more than half of its mapping), then freed. */
        p = must(malloc(large[i]));
        p = must(realloc(p, large[i] / 2 + 4096));
        free_sized(p, large[i] / 2 + 4096);
    }
    for (size_t align = 1; align <= 4096; align *= 2) {
        for (size_t n = align; n <= 70000; n += n / 3 + align) {
            size_t asked = (n + align - 1) / align * align;
            char *p = must(aligned_alloc(align, asked));
            if ((uintptr_t)p % align) {
                printf("aligned_alloc(%zu, %zu) misaligned\n", align, asked);
                exit(3);
            }
            free_aligned_sized(p, align, asked);
        }
    }
    free_sized(NULL, 100);
    free_aligned_sized(NULL, 64, 100);
}

int main(int argc, char **argv) {
    if (!free_sized || !free_aligned_sized) {
        puts("no free_sized");
        return 77;
    }
    const char *c = argc > 1 ? argv[1] : "right";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strcmp(c, "right")) {
        right();
        puts("survived");
        return 0;
    }
    char *p;
    if (!strcmp(c, "large_as_small"))
        p = must(malloc(1 << 20));
    else if (!strcmp(c, "aligned_as_plain"))
        p = must(aligned_alloc(4096, 100));
    else if (!strcmp(c, "wrong_alignment"))
        p = must(aligned_alloc(16, 100));
    else
        p = must(malloc(100));
    printf("%p\n", (void *)p);
    if (!strcmp(c, "smaller"))
        free_sized(p, 20);
    else if (!strcmp(c, "bigger"))
        free_sized(p, 300);
    else if (!strcmp(c, "large_as_small") || !strcmp(c, "aligned_as_plain"))
        free_sized(p, 100);
    else if (!strcmp(c, "small_as_large"))
        free_sized(p, 1 << 20);
    else if (!strcmp(c, "wrong_alignment"))
        free_aligned_sized(p, 4096, 100);
    else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    puts("survived");
    return 0;
}
