/* A freed big block faults when touched, as under glibc (which unmaps it):
 *
 *   large_after_free read|write KIB [split|fork]
 *
 * allocates KIB KiB, fills it, frees it, prints "freed" and then reads or
 * writes its middle; it prints "survived" and exits 0 if that did not fault.
 * split: the block freed is a 1 MiB block allocated after the KIB one was
 * freed (under slubmalloc the head of that cached mapping, written to check
 * that a piece handed out is accessible again). fork: a child forked after
 * the free touches the block; the parent prints "child signal N" (0 if the
 * child survived) and exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s read|write KIB [split|fork]\n", argv[0]);
        return 2;
    }
    int write = strcmp(argv[1], "write") == 0;
    size_t bytes = strtoul(argv[2], NULL, 10) * 1024;
    const char *how = argc > 3 ? argv[3] : "";
    char *p = malloc(bytes);
    if (!p)
        return 3;
    memset(p, 1, bytes);
    if (strcmp(how, "split") == 0) {
        free(p);
        bytes = 1 << 20;
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
