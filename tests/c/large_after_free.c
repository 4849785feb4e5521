/* A freed big block faults when touched, as under glibc (which unmaps it):
 *
 *   large_after_free read|write KIB [split|fork|then KIB2]
 *
 * allocates KIB KiB, fills it, frees it, prints "freed" and then reads or
 * writes its middle; it prints "survived" and exits 0 if that did not fault.
 * split: the block freed is a 1 MiB block allocated after the KIB one was
 * freed (under slubmalloc the head of that cached mapping, written to check
 * that a piece handed out is accessible again). fork: a child forked after
 * the free touches the block; the parent prints "child signal N" (0 if the
 * child survived) and exits 0. then KIB2: the block freed and touched is one
 * of KIB2 KiB allocated after the KIB one was freed (glibc's threshold, and
 * slubmalloc's, rose on that first free: a block no bigger is reused
 * accessible, a bigger one still faults).
 *
 *   large_after_free limit
 *
 * frees an 8 MiB block, then makes mappings until the kernel refuses more
 * (vm.max_map_count), and asks for 1 MiB: the head of the cached 8 MiB
 * mapping would need one more kernel mapping to become accessible. malloc
 * must return NULL with ENOMEM or a block it can write ("limit NULL" or
 * "limit written"); after the mappings go, 1 MiB is served and written
 * ("after written"). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* Volatile accesses: the compiler may not drop a touch of freed memory. */
static int touch(volatile char *p, size_t bytes, int write) {
    if (write) {
        p[bytes / 2] = 0x41;
        return 0;
    }
    return p[bytes / 2];
}

#define MAX_FILLERS (1 << 20)
static void *fillers[MAX_FILLERS];

static int at_the_mapping_limit(void) {
    char *p = malloc(8 << 20);
    if (!p)
        return 3;
    memset(p, 1, 8 << 20);
    free(p);
    printf("filling\n");
    fflush(stdout);
    /* One page each, alternately readable and not: neighbours never merge. */
    int n = 0;
    while (n < MAX_FILLERS) {
        void *m = mmap(NULL, 4096, n % 2 ? PROT_READ : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                       0);
        if (m == MAP_FAILED)
            break;
        fillers[n++] = m;
    }
    errno = 0;
    char *q = malloc(1 << 20);
    int e = errno;
    if (q)
        memset(q, 2, 1 << 20);
    for (int i = 0; i < n; i++)
        munmap(fillers[i], 4096);
    if (q)
        printf("limit written (%d mappings made)\n", n);
    else
        printf("limit NULL errno %s (%d mappings made)\n", e == ENOMEM ? "ENOMEM" : "other", n);
    free(q);
    char *r = malloc(1 << 20);
    if (!r)
        return 4;
    memset(r, 3, 1 << 20);
    printf("after written\n");
    free(r);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "limit") == 0)
        return at_the_mapping_limit();
    if (argc < 3) {
        fprintf(stderr, "usage: %s read|write KIB [split|fork|then KIB2]\n", argv[0]);
        return 2;
    }
    int write = strcmp(argv[1], "write") == 0;
    size_t bytes = strtoul(argv[2], NULL, 10) * 1024;
    const char *how = argc > 3 ? argv[3] : "";
    char *p = malloc(bytes);
    if (!p)
        return 3;
    memset(p, 1, bytes);
    if (strcmp(how, "split") == 0 || strcmp(how, "then") == 0) {
        free(p);
        bytes = strcmp(how, "split") == 0 ? 1 << 20 : strtoul(argc > 4 ? argv[4] : "0", NULL, 10) * 1024;
        p = malloc(bytes);
        if (!p)
            return 3;
        memset(p, 2, bytes);
        printf("piece %p written\n", (void *)p);
    }
    free(p);
    printf("freed %p\n", (void *)p);
    fflush(stdout);
    if (strcmp(how, "fork") == 0) {
        pid_t child = fork();
        if (child < 0)
            return 4;
        if (child == 0) {
            _exit(touch(p, bytes, write) == 0x7f);
        }
        int status;
        if (waitpid(child, &status, 0) != child)
            return 5;
        printf("child signal %d\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        return 0;
    }
    printf("survived (read %d)\n", touch(p, bytes, write));
    return 0;
}
