/* glibc's introspection calls, answered by whichever malloc serves the
 * program: `glibc_introspection <group>` runs one group, prints what it
 * read, and prints "ok <group>" when its checks hold (they hold on glibc's
 * malloc too; tests/processes/glibc_introspection.rs runs both).
 *
 *   mallinfo2    1 MB live in 1000-byte blocks counts in uordblks, arena is
 *                uordblks + fordblks, a 1 MiB block counts in hblks/hblkhd;
 *                both drop once freed
 *   mallinfo     the int fields equal mallinfo2's; then 3 GiB live in big
 *                blocks: prints mallinfo's hblkhd (the Rust test judges it)
 *   malloc_info  the XML written to an open_memstream FILE (whose stdio
 *                allocates while malloc_info writes) after 64 MiB were
 *                mapped and given back, printed on stdout;
 *                options 1 returns EINVAL and leaves errno alone
 *   stats        malloc_stats with 1 MiB small and 1 MiB big live */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL 1000
#define COUNT 1024
#define LIVE ((size_t)SMALL * COUNT)
#define BIG ((size_t)1 << 20)

static int failed;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            printf("FAIL %s: ", #cond);                                                  \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
            failed = 1;                                                                  \
        }                                                                                \
    } while (0)

static void *blocks[COUNT];
static void *big;

static void hold(void) {
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = malloc(SMALL);
        memset(blocks[i], 1, SMALL);
    }
    big = malloc(BIG);
    memset(big, 1, BIG);
}

static void release(void) {
    for (int i = 0; i < COUNT; i++)
        free(blocks[i]);
    free(big);
}

static void show(const char *when, struct mallinfo2 m) {
    printf("%s arena=%zu ordblks=%zu smblks=%zu hblks=%zu hblkhd=%zu usmblks=%zu fsmblks=%zu "
           "uordblks=%zu fordblks=%zu keepcost=%zu\n",
           when, m.arena, m.ordblks, m.smblks, m.hblks, m.hblkhd, m.usmblks, m.fsmblks,
           m.uordblks, m.fordblks, m.keepcost);
}

static void group_mallinfo2(void) {
    struct mallinfo2 before = mallinfo2();
    hold();
    struct mallinfo2 live = mallinfo2();
    release();
    struct mallinfo2 after = mallinfo2();
    show("before", before);
    show("live", live);
    show("after", after);
    size_t grew = live.uordblks - before.uordblks;
    CHECK(live.uordblks >= before.uordblks && grew >= LIVE && grew <= LIVE / 4 * 5 + 65536,
          "uordblks grew by %zu for %zu bytes live", grew, LIVE);
    CHECK(live.arena == live.uordblks + live.fordblks, "arena is not uordblks + fordblks");
    CHECK(after.arena == after.uordblks + after.fordblks, "arena is not uordblks + fordblks");
    CHECK(live.uordblks - after.uordblks >= LIVE / 10 * 9, "uordblks did not drop after free");
    CHECK(live.hblks >= before.hblks + 1 && live.hblkhd >= before.hblkhd + BIG,
          "the 1 MiB block is not in hblks/hblkhd");
    CHECK(after.hblks == before.hblks && after.hblkhd == before.hblkhd,
          "hblks/hblkhd did not drop after free");
    CHECK(live.usmblks == 0, "usmblks is not 0");
}

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void group_mallinfo(void) {
    hold();
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo m = mallinfo();
    CHECK(m2.arena < 1u << 30 && (size_t)m.arena == m2.arena, "arena");
    CHECK((size_t)m.uordblks == m2.uordblks && (size_t)m.fordblks == m2.fordblks,
          "uordblks/fordblks");
    CHECK((size_t)m.hblks == m2.hblks && (size_t)m.hblkhd == m2.hblkhd, "hblks/hblkhd");
    CHECK((size_t)m.smblks == m2.smblks && (size_t)m.fsmblks == m2.fsmblks, "smblks/fsmblks");
    CHECK((size_t)m.ordblks == m2.ordblks && (size_t)m.keepcost == m2.keepcost,
          "ordblks/keepcost");
    release();
    void *huge[3];
    for (int i = 0; i < 3; i++) {
        huge[i] = malloc((size_t)1 << 30); /* never touched: no memory */
        CHECK(huge[i] != NULL, "malloc(1 GiB) failed");
    }
    printf("hblkhd2 %zu\n", mallinfo2().hblkhd);
    printf("hblkhd %d\n", mallinfo().hblkhd);
    for (int i = 0; i < 3; i++)
        free(huge[i]);
}

static void group_malloc_info(void) {
    hold();
    /* 64 MiB mapped and given back: the most mapped at once is above what
     * is mapped now. */
    void *volatile huge = malloc((size_t)64 << 20);
    free(huge);
    malloc_trim(0);
    char *xml = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&xml, &len);
    CHECK(f != NULL, "open_memstream");
    if (!f)
        return;
    int r = malloc_info(0, f);
    fclose(f);
    struct mallinfo2 m = mallinfo2();
    CHECK(r == 0, "malloc_info returned %d", r);
    printf("%s", xml);
    show("mallinfo2", m);
    free(xml);
    errno = 4242;
    r = malloc_info(1, stdout);
    CHECK(r == EINVAL && errno == 4242, "malloc_info(1) returned %d, errno %d", r, errno);
    release();
}

static void group_stats(void) {
    hold();
    fflush(stdout);
    malloc_stats();
    release();
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s mallinfo2|mallinfo|malloc_info|stats\n", argv[0]);
        return 2;
    }
    const char *g = argv[1];
    if (strcmp(g, "mallinfo2") == 0)
        group_mallinfo2();
    else if (strcmp(g, "mallinfo") == 0)
        group_mallinfo();
    else if (strcmp(g, "malloc_info") == 0)
        group_malloc_info();
    else if (strcmp(g, "stats") == 0)
        group_stats();
    else {
        fprintf(stderr, "unknown group %s\n", g);
        return 2;
    }
    if (failed)
        return 1;
    printf("ok %s\n", g);
    return 0;
}
