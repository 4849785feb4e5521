/* Out of memory under RLIMIT_AS: every entry point fails with NULL/ENOMEM,
 * and after some frees, allocation works again. Prints "ok" on success. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL %s:%d %s\n", __FILE__, __LINE__, #c); return 1; } } while (0)

static size_t vm_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (f) { if (fscanf(f, "%lu", &pages) != 1) pages = 0; fclose(f); }
    return pages * 4096;
}

int main(void) {
    static void *big[4096], *small[1 << 20];
    struct rlimit rl = { vm_bytes() + (96 << 20), vm_bytes() + (96 << 20) };
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0);

    size_t nbig = 0;
    for (; nbig < 4096; nbig++) {
        errno = 0;
        big[nbig] = malloc(1 << 20);
        if (!big[nbig]) { CHECK(errno == ENOMEM); break; }
        memset(big[nbig], 1, 1 << 20);
    }
    CHECK(nbig > 10 && nbig < 4096);

    size_t nsmall = 0;
    for (; nsmall < (1 << 20); nsmall++) {
        errno = 0;
        small[nsmall] = malloc(96);
        if (!small[nsmall]) { CHECK(errno == ENOMEM); break; }
        memset(small[nsmall], 2, 96);
    }
    CHECK(nsmall < (1 << 20));

    /* Every entry point fails cleanly now. */
    errno = 0; CHECK(malloc(1 << 20) == NULL && errno == ENOMEM);
    errno = 0; CHECK(calloc(1, 1 << 20) == NULL && errno == ENOMEM);
    void *p = NULL;
    CHECK(posix_memalign(&p, 4096, 1 << 20) == ENOMEM);
    errno = 0; CHECK(aligned_alloc(1 << 16, 1 << 20) == NULL && errno == ENOMEM);
    char *keep = small[0];
    errno = 0; CHECK(realloc(keep, 8 << 20) == NULL && errno == ENOMEM);
    for (int i = 0; i < 96; i++) CHECK(keep[i] == 2); /* old block intact */

    /* Free every other small block: small allocations succeed again from free space. */
    for (size_t i = 1; i < nsmall; i += 2) free(small[i]);
    for (size_t i = 1; i < nsmall; i += 2) {
        small[i] = malloc(96);
        CHECK(small[i] != NULL);
        memset(small[i], 3, 96);
    }
    /* Free some big blocks: big allocations succeed again. */
    for (size_t i = 0; i < nbig / 2; i++) free(big[i]);
    void *again = malloc(1 << 20);
    CHECK(again != NULL);
    memset(again, 4, 1 << 20);
    free(again);
    for (size_t i = 0; i < nsmall; i++) free(small[i]);
    for (size_t i = nbig / 2; i < nbig; i++) free(big[i]);
    printf("ok %zu big %zu small\n", nbig, nsmall);
    return 0;
}
