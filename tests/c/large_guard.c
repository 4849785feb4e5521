/* A write one byte past a large block's usable size faults: every large
 * block's mapping ends with a guard page (src/large_map.rs).
 *
 *   large_guard MODE
 *
 * gets a block as MODE says, writes all of its malloc_usable_size bytes,
 * prints "block <address> <usable size>", maps the page just past them if
 * nothing holds it (so that a hole in the address space, which the next
 * mapping may fill, does not pass for a guard), then writes the byte just
 * past the block; it prints "survived" and exits 0 if that did not fault.
 *
 *   fresh           malloc(256 KiB): a mapping of its own, made for it
 *   cached          a block of 40 MiB freed and cached first (above 32
 *                   MiB, its free does not raise the threshold that would
 *                   make 256 KiB a medium block; the first is given back
 *                   at once, past the trim bound, and the second freed
 *                   soon after raises the bound), then malloc(256 KiB):
 *                   the head of the cached mapping, its rest left cached
 *   cached_whole    as cached, then malloc(40 MiB): the mapping whole
 *   cached_grown    as cached, then malloc(60 MiB): the cached mapping
 *                   grown with mremap
 *   merged          two blocks of 12 MiB freed (their mappings neighbours,
 *                   as the kernel places them: the cached pieces merge),
 *                   then malloc(20 MiB): the head of the merged piece, the
 *                   guard that was between the two inside it
 *
 * The modes from the cache print "cached <bytes>" (mallinfo2's keepcost:
 * the cached bytes) before they take their block.
 *   grown           malloc(256 KiB) grown by realloc to 2 MiB (mremap)
 *   shrunk          malloc(2 MiB) shrunk by realloc to 600 KiB (its tail
 *                   unmapped)
 *   aligned         aligned_alloc(64 KiB, 256 KiB): a fresh mapping
 *                   trimmed to the alignment
 *
 *   large_guard mappings
 *
 * holds 200 fresh blocks of 256 KiB, each written whole, and prints
 * "mappings <n>": the lines of /proc/self/maps they added. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static int is(const char *a, const char *b) { return strcmp(a, b) == 0; }

static char *must(char *p) {
    if (!p) {
        perror("malloc");
        exit(2);
    }
    return p;
}

/* Frees blocks of 40 MiB until one stays cached (see `cached`). */
static void cache_40_mib(void) {
    for (int i = 0; i < 2; i++)
        free(must(malloc(40 * MIB)));
    printf("cached %zu\n", mallinfo2().keepcost);
}

static int maps_lines(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) {
        perror("/proc/self/maps");
        exit(2);
    }
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* Writes the block whole, fills a hole after it, writes the byte past it. */
static void overflow(char *p) {
    size_t usable = malloc_usable_size(p);
    memset(p, 1, usable);
    printf("block %p %zu\n", (void *)p, usable);
    fflush(stdout);
    char *past = p + usable;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if ((uintptr_t)past % page == 0) {
        void *m = mmap(past, page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        /* A kernel before 4.17 takes the address as a hint only. */
        if (m != MAP_FAILED && m != past)
            munmap(m, page);
    }
    ((volatile char *)p)[usable] = 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: large_guard MODE\n");
        return 2;
    }
    const char *mode = argv[1];
    char *p;
    if (is(mode, "mappings")) {
        static char *held[200];
        int before = maps_lines();
        for (int i = 0; i < 200; i++)
            memset(held[i] = must(malloc(256 * KIB)), 1, 256 * KIB);
        printf("mappings %d\n", maps_lines() - before);
        return 0;
    }
    if (is(mode, "fresh")) {
        p = must(malloc(256 * KIB));
    } else if (is(mode, "cached")) {
        cache_40_mib();
        p = must(malloc(256 * KIB));
    } else if (is(mode, "cached_whole")) {
        cache_40_mib();
        p = must(malloc(40 * MIB));
    } else if (is(mode, "cached_grown")) {
        cache_40_mib();
        p = must(malloc(60 * MIB));
    } else if (is(mode, "merged")) {
        char *a = must(malloc(12 * MIB)), *b = must(malloc(12 * MIB));
        free(a);
        free(b);
        printf("cached %zu\n", mallinfo2().keepcost);
        p = must(malloc(20 * MIB));
    } else if (is(mode, "grown")) {
        p = must(realloc(must(malloc(256 * KIB)), 2 * MIB));
    } else if (is(mode, "shrunk")) {
        p = must(realloc(must(malloc(2 * MIB)), 600 * KIB));
    } else if (is(mode, "aligned")) {
        p = must(aligned_alloc(64 * KIB, 256 * KIB));
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    overflow(p);
    puts("survived");
    return 0;
}
