/* Allocation before main and after it: a constructor that mallocs (and uses
 * dlopen/dlsym/dlerror, which allocate inside libc and the dynamic linker),
 * an atexit handler and a destructor that malloc and free, and blocks made
 * before main freed after it. Prints "usable_before_main <n>" (the usable
 * size of a 100-byte block allocated in the constructor) so the test can see
 * which allocator served it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NEARLY = 200 };
static unsigned char *early[NEARLY];
static char *early_dup;
static char early_dlerror[256];
static size_t usable_before_main;
static double (*early_cos)(double);
static int constructor_ran;

static void die(const char *what) {
    fprintf(stderr, "FAIL: %s\n", what);
    fflush(stderr);
    _exit(1);
}

static size_t early_size(int i) { return 1 + (size_t)i * 211 % 50000; }

static void fill(unsigned char *p, size_t n, int seed) {
    for (size_t k = 0; k < n; k++) p[k] = (unsigned char)(seed + k * 13);
}

static int same(const unsigned char *p, size_t n, int seed) {
    for (size_t k = 0; k < n; k++)
        if (p[k] != (unsigned char)(seed + k * 13)) return 0;
    return 1;
}

__attribute__((constructor(101))) static void before_main(void) {
    for (int i = 0; i < NEARLY; i++) {
        early[i] = malloc(early_size(i));
        if (!early[i]) die("malloc in constructor");
        fill(early[i], early_size(i), i);
    }
    void *probe = malloc(100);
    usable_before_main = malloc_usable_size(probe);
    free(probe);
    early_dup = strdup("allocated by strdup in a constructor");
    /* The dynamic linker allocates for dlopen, and libc for dlerror's message;
     * those blocks are freed by glibc itself, through our free. */
    void *libm = dlopen("libm.so.6", RTLD_NOW);
    if (!libm) die("dlopen libm");
    early_cos = (double (*)(double))dlsym(libm, "cos");
    if (!early_cos) die("dlsym cos");
    if (dlsym(RTLD_DEFAULT, "slubmalloc_no_such_symbol") != NULL) die("dlsym found a missing symbol");
    const char *e = dlerror();
    if (!e) die("dlerror gave no message");
    snprintf(early_dlerror, sizeof early_dlerror, "%s", e);
    constructor_ran = 1;
}

static void at_exit_handler(void) {
    /* Runs inside exit(): allocate, use and free. */
    char *s = malloc(4000);
    if (!s) die("malloc in atexit handler");
    memset(s, 'x', 3999);
    s[3999] = 0;
    if (strlen(s) != 3999) die("atexit block");
    s = realloc(s, 100000);
    if (!s || s[3998] != 'x') die("realloc in atexit handler");
    free(s);
}

__attribute__((destructor)) static void after_main(void) {
    for (int i = 0; i < NEARLY; i += 2) {
        if (!same(early[i], early_size(i), i)) die("a block from before main changed");
        free(early[i]);
    }
    void *blocks[100];
    for (int i = 0; i < 100; i++) {
        blocks[i] = calloc(1, 16 + (size_t)i * 40);
        if (!blocks[i]) die("calloc in destructor");
    }
    for (int i = 0; i < 100; i++) free(blocks[i]);
    free(early_dup);
    const char msg[] = "destructor ok\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(1);
}

int main(void) {
    if (!constructor_ran) die("constructor did not run");
    if (strcmp(early_dup, "allocated by strdup in a constructor") != 0) die("strdup block changed");
    if (!strstr(early_dlerror, "slubmalloc_no_such_symbol")) die("dlerror message");
    if (early_cos(0.0) != 1.0) die("cos from dlsym");
    for (int i = 1; i < NEARLY; i += 2) {
        if (!same(early[i], early_size(i), i)) die("a block from before main changed");
        early[i] = realloc(early[i], early_size(i) * 3);
        if (!early[i] || !same(early[i], early_size(i), i)) die("realloc of a block from before main");
        free(early[i]);
    }
    if (atexit(at_exit_handler) != 0) die("atexit");
    printf("usable_before_main %zu\n", usable_before_main);
    printf("dlerror: %s\n", early_dlerror);
    printf("main ok\n");
    fflush(stdout);
    return 0;
}
