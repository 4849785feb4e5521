/* The C malloc contract, group by group: `preload_contract <group>` runs one
 * group of checks and prints "ok <group>" when all of them hold, or prints
 * "FAIL ..." on stderr and exits 1 at the first one that does not.  Every
 * group except the ones named slubmalloc-only in tests/processes/preload_contract.rs
 * must also pass on glibc's own malloc: the contract is glibc's.
 *
 * Every group first prints "malloc from <object>" (found with dladdr), so the
 * test knows which allocator the program really ran on. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...)                                                        \
    do {                                                                 \
        fprintf(stderr, "FAIL %s:%d: ", __func__, __LINE__);             \
        fprintf(stderr, __VA_ARGS__);                                    \
        fputc('\n', stderr);                                             \
        exit(1);                                                         \
    } while (0)
#define CHECK(cond, ...)            \
    do {                            \
        if (!(cond)) FAIL(__VA_ARGS__); \
    } while (0)

/* Hides a value from the optimiser, so that it can neither fold an
 * allocation of a constant impossible size nor drop an unused block. */
#define OPAQUE(x)                               \
    ({                                          \
        __typeof__((x) + 0) opaque_v_ = (x);          \
        __asm__ volatile("" : "+r"(opaque_v_)); \
        opaque_v_;                              \
    })

/* The entry points through volatile pointers, for the checks of errno: GCC
 * knows posix_memalign as a builtin that writes only *memptr, and from -O1 it
 * folds a read of errno after a direct call into the value stored before it
 * (measured: a direct call "kept" errno on glibc, which sets it to ENOMEM). */
static void *(*volatile v_malloc)(size_t) = malloc;
static void *(*volatile v_calloc)(size_t, size_t) = calloc;
static void *(*volatile v_realloc)(void *, size_t) = realloc;
static void *(*volatile v_reallocarray)(void *, size_t, size_t) = reallocarray;
static int (*volatile v_posix_memalign)(void **, size_t, size_t) = posix_memalign;
static void *(*volatile v_aligned_alloc)(size_t, size_t) = aligned_alloc;
static void *(*volatile v_memalign)(size_t, size_t) = memalign;
static void *(*volatile v_valloc)(size_t) = valloc;
static void *(*volatile v_pvalloc)(size_t) = pvalloc;
static void (*volatile v_free)(void *) = free;
static size_t (*volatile v_usable)(void *) = malloc_usable_size;

static const size_t HUGE_SIZES[] = {
    (size_t)PTRDIFF_MAX,
    (size_t)PTRDIFF_MAX + 1,
    (size_t)PTRDIFF_MAX + 4096,
    SIZE_MAX - 4096,
    SIZE_MAX - 16,
    SIZE_MAX,
};
#define NHUGE (sizeof HUGE_SIZES / sizeof HUGE_SIZES[0])

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed * 131 + i * 7 + (i >> 8))) return 0;
    return 1;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

static int aligned_to(const void *p, size_t align) { return ((uintptr_t)p & (align - 1)) == 0; }

/* malloc(0), calloc with a zero, realloc(NULL, 0): unique, non-NULL, freeable. */
static void malloc_zero(void) {
    enum { N = 3000 };
    static void *p[N];
    for (int i = 0; i < N; i++) {
        switch (i % 4) {
        case 0: p[i] = malloc(OPAQUE((size_t)0)); break;
        case 1: p[i] = calloc(OPAQUE((size_t)0), 8); break;
        case 2: p[i] = calloc(8, OPAQUE((size_t)0)); break;
        default: p[i] = realloc(NULL, OPAQUE((size_t)0)); break;
        }
        CHECK(p[i] != NULL, "zero-size allocation %d returned NULL", i);
    }
    static void *sorted[N];
    memcpy(sorted, p, sizeof p);
    qsort(sorted, N, sizeof sorted[0], cmp_ptr);
    for (int i = 1; i < N; i++) CHECK(sorted[i] != sorted[i - 1], "zero-size pointer %p handed out twice", sorted[i]);
    for (int i = 0; i < N; i += 2) free(p[i]);
    for (int i = 1; i < N; i += 2) free(p[i]);
}

/* Sizes no process can have: NULL and ENOMEM from every entry point. */
static void huge_sizes(void) {
    for (size_t i = 0; i < NHUGE; i++) {
        size_t n = OPAQUE(HUGE_SIZES[i]);
        void *p;
        errno = 0;
        p = malloc(n);
        CHECK(p == NULL && errno == ENOMEM, "malloc(%zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = calloc(n, 1);
        CHECK(p == NULL && errno == ENOMEM, "calloc(%zu, 1) = %p, errno %d", n, p, errno);
        errno = 0;
        p = calloc(1, n);
        CHECK(p == NULL && errno == ENOMEM, "calloc(1, %zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = realloc(NULL, n);
        CHECK(p == NULL && errno == ENOMEM, "realloc(NULL, %zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = aligned_alloc(64, n);
        CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(64, %zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = memalign(4096, n);
        CHECK(p == NULL && errno == ENOMEM, "memalign(4096, %zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = valloc(n);
        CHECK(p == NULL && errno == ENOMEM, "valloc(%zu) = %p, errno %d", n, p, errno);
        errno = 0;
        p = pvalloc(n);
        CHECK(p == NULL && errno == ENOMEM, "pvalloc(%zu) = %p, errno %d", n, p, errno);
        p = (void *)0x1;
        int r = posix_memalign(&p, 64, n);
        CHECK(r == ENOMEM, "posix_memalign(64, %zu) returned %d", n, r);
        r = posix_memalign(&p, (size_t)1 << 20, n);
        CHECK(r == ENOMEM, "posix_memalign(1 MiB, %zu) returned %d", n, r);
    }
    /* The allocator still works afterwards. */
    char *q = malloc(OPAQUE((size_t)100));
    CHECK(q != NULL, "malloc(100) after huge requests");
    memset(q, 1, 100);
    free(q);
}

/* calloc overflow, and calloc really zeroes reused memory (small and large). */
static void calloc_contract(void) {
    static const size_t pairs[][2] = {
        {SIZE_MAX / 2 + 1, 2},
        {2, SIZE_MAX / 2 + 1},
        {(size_t)1 << 32, (size_t)1 << 32},
        {SIZE_MAX, SIZE_MAX},
        {SIZE_MAX / 3 + 1, 3},
        {(size_t)1 << 33, (size_t)1 << 31},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        size_t n = OPAQUE(pairs[i][0]), s = OPAQUE(pairs[i][1]);
        errno = 0;
        void *p = calloc(n, s);
        CHECK(p == NULL && errno == ENOMEM, "calloc(%zu, %zu) = %p, errno %d", n, s, p, errno);
    }
    static const size_t sizes[] = {1, 8, 24, 100, 512, 4000, 20000, 32768, 40000, 100000, 1 << 20, 8 << 20};
    enum { NS = sizeof sizes / sizeof sizes[0], ROUNDS = 4 };
    for (int round = 0; round < ROUNDS; round++) {
        void *dirty[NS];
        for (size_t i = 0; i < NS; i++) {
            dirty[i] = malloc(sizes[i]);
            CHECK(dirty[i] != NULL, "malloc(%zu)", sizes[i]);
            memset(dirty[i], 0xA5, sizes[i]);
        }
        for (size_t i = 0; i < NS; i++) free(dirty[i]);
        for (size_t i = 0; i < NS; i++) {
            unsigned char *c = calloc(1, sizes[i]);
            CHECK(c != NULL, "calloc(1, %zu)", sizes[i]);
            for (size_t k = 0; k < sizes[i]; k++)
                CHECK(c[k] == 0, "calloc(1, %zu) byte %zu is %#x, not zero", sizes[i], k, c[k]);
            dirty[i] = c;
        }
        for (size_t i = 0; i < NS; i++) {
            memset(dirty[i], 0x5A, sizes[i]);
            free(dirty[i]);
        }
    }
}

/* reallocarray: overflow is NULL/ENOMEM and leaves the block alone. */
static void reallocarray_contract(void) {
    errno = 0;
    void *p = reallocarray(NULL, OPAQUE(SIZE_MAX / 2 + 1), 2);
    CHECK(p == NULL && errno == ENOMEM, "reallocarray(NULL, overflow) = %p, errno %d", p, errno);
    static const size_t olds[] = {24, 3000, 200000};
    for (size_t i = 0; i < 3; i++) {
        unsigned char *b = malloc(olds[i]);
        CHECK(b != NULL, "malloc");
        fill(b, olds[i], 7);
        errno = 0;
        p = reallocarray(b, OPAQUE((size_t)1 << 33), (size_t)1 << 31);
        CHECK(p == NULL && errno == ENOMEM, "reallocarray(%zu-byte block, overflow) = %p, errno %d", olds[i], p,
              errno);
        CHECK(same(b, olds[i], 7), "reallocarray failure changed the old %zu-byte block", olds[i]);
        /* A legal reallocarray still works and keeps the contents. */
        unsigned char *g = reallocarray(b, 2, olds[i]);
        CHECK(g != NULL, "reallocarray(b, 2, %zu)", olds[i]);
        CHECK(same(g, olds[i], 7), "reallocarray growth lost contents of a %zu-byte block", olds[i]);
        free(g);
    }
}

/* realloc to an impossible size: NULL, ENOMEM, old block intact and usable. */
static void realloc_huge(void) {
    static const size_t olds[] = {1, 100, 4096, 32768, 50000, 1 << 20};
    for (size_t i = 0; i < sizeof olds / sizeof olds[0]; i++) {
        unsigned char *b = malloc(olds[i]);
        CHECK(b != NULL, "malloc(%zu)", olds[i]);
        fill(b, olds[i], (unsigned)i);
        for (size_t h = 0; h < NHUGE; h++) {
            errno = 0;
            void *p = realloc(b, OPAQUE(HUGE_SIZES[h]));
            CHECK(p == NULL && errno == ENOMEM, "realloc(%zu-byte block, %zu) = %p, errno %d", olds[i],
                  HUGE_SIZES[h], p, errno);
            CHECK(same(b, olds[i], (unsigned)i), "failed realloc to %zu changed the old %zu-byte block",
                  HUGE_SIZES[h], olds[i]);
        }
        b = realloc(b, olds[i] * 2);
        CHECK(b != NULL && same(b, olds[i], (unsigned)i), "realloc after a failed one");
        free(b);
    }
}

/* posix_memalign: EINVAL for anything but a power-of-two multiple of
 * sizeof(void *), with *memptr and errno untouched. */
static void posix_memalign_rejects(void) {
    static const size_t bad[] = {0, 1, 2, 3, 4, 5, 6, 7, 12, 24, 40, 48, 96, 100, 4097, 3 << 20,
                                 (size_t)PTRDIFF_MAX, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *p = (void *)&bad[i];
        errno = 4242;
        int r = v_posix_memalign(&p, bad[i], 64);
        CHECK(r == EINVAL, "posix_memalign(align %zu) returned %d, not EINVAL", bad[i], r);
        CHECK(p == (void *)&bad[i], "posix_memalign(align %zu) changed *memptr on failure", bad[i]);
        CHECK(errno == 4242, "posix_memalign(align %zu) changed errno to %d", bad[i], errno);
    }
}

/* posix_memalign: every power of two from 8 to 1 MiB, several sizes. */
static void posix_memalign_powers(void) {
    enum { MAXP = 64 * 7 };
    static void *live[MAXP];
    static size_t live_n[MAXP];
    int nlive = 0;
    for (size_t align = 8; align <= (1u << 20); align *= 2) {
        size_t sizes[] = {1, 7, align - 1, align, align + 1, 3 * align + 5, 100000};
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            void *p = NULL;
            errno = 4242;
            int r = v_posix_memalign(&p, align, sizes[s]);
            CHECK(r == 0 && p != NULL, "posix_memalign(%zu, %zu) returned %d", align, sizes[s], r);
            CHECK(errno == 4242, "posix_memalign(%zu, %zu) changed errno", align, sizes[s]);
            CHECK(aligned_to(p, align), "posix_memalign(%zu, %zu) = %p is misaligned", align, sizes[s], p);
            CHECK(malloc_usable_size(p) >= sizes[s], "posix_memalign(%zu, %zu): usable %zu", align, sizes[s],
                  malloc_usable_size(p));
            fill(p, sizes[s], (unsigned)(align + s));
            live[nlive] = p;
            live_n[nlive++] = sizes[s];
        }
    }
    for (int i = 0; i < nlive; i++) {
        size_t align = (size_t)8 << (i / 7);
        CHECK(same(live[i], live_n[i], (unsigned)(align + i % 7)), "aligned block %d lost its contents", i);
    }
    for (int i = nlive - 1; i >= 0; i -= 2) free(live[i]);
    for (int i = nlive - 2; i >= 0; i -= 2) free(live[i]);
}

/* aligned_alloc, memalign, valloc, pvalloc. */
static void aligned_family(void) {
    long page = sysconf(_SC_PAGESIZE);
    static const size_t sizes[] = {0, 1, 15, 16, 100, 4095, 4096, 5000, 40000, 300000};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    for (size_t align = 1; align <= (1u << 20); align *= 2) {
        for (size_t s = 0; s < NS; s++) {
            void *a = aligned_alloc(align, sizes[s]);
            CHECK(a != NULL && aligned_to(a, align), "aligned_alloc(%zu, %zu) = %p", align, sizes[s], a);
            CHECK(malloc_usable_size(a) >= sizes[s], "aligned_alloc(%zu, %zu) too small", align, sizes[s]);
            memset(a, 0x11, sizes[s]);
            void *m = memalign(align, sizes[s]);
            CHECK(m != NULL && aligned_to(m, align), "memalign(%zu, %zu) = %p", align, sizes[s], m);
            CHECK(malloc_usable_size(m) >= sizes[s], "memalign(%zu, %zu) too small", align, sizes[s]);
            memset(m, 0x22, sizes[s]);
            free(a);
            free(m);
        }
    }
    /* glibc rounds a memalign alignment that is not a power of two up to one. */
    static const size_t odd[][2] = {{24, 32}, {48, 64}, {100, 128}, {3000, 4096}, {5000, 8192}};
    for (size_t i = 0; i < 5; i++) {
        void *m = memalign(OPAQUE(odd[i][0]), 10);
        CHECK(m != NULL && aligned_to(m, odd[i][1]), "memalign(%zu, 10) = %p, not %zu-aligned", odd[i][0], m,
              odd[i][1]);
        free(m);
    }
    for (size_t s = 0; s < NS; s++) {
        void *v = valloc(sizes[s]);
        CHECK(v != NULL && aligned_to(v, (size_t)page), "valloc(%zu) = %p", sizes[s], v);
        CHECK(malloc_usable_size(v) >= sizes[s], "valloc(%zu) too small", sizes[s]);
        memset(v, 0x33, sizes[s]);
        void *pv = pvalloc(sizes[s]);
        size_t rounded = (sizes[s] + (size_t)page - 1) & ~((size_t)page - 1);
        CHECK(pv != NULL && aligned_to(pv, (size_t)page), "pvalloc(%zu) = %p", sizes[s], pv);
        CHECK(malloc_usable_size(pv) >= rounded, "pvalloc(%zu): usable %zu < %zu", sizes[s], malloc_usable_size(pv),
              rounded);
        memset(pv, 0x44, rounded); /* pvalloc promises whole pages */
        free(v);
        free(pv);
    }
}

/* free(NULL) is a no-op and free never changes errno, whatever it frees
 * (small, large, aligned) and whatever it does inside (slab and segment
 * release; the test runs this group with SLUBMALLOC_PURGE_DELAY_MS=0). */
static void free_contract(void) {
    errno = 4242;
    free(NULL);
    CHECK(errno == 4242, "free(NULL) changed errno to %d", errno);
    enum { N = 20000 };
    static void *p[N];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            size_t n = (i % 100 == 99) ? (size_t)40000 + (size_t)i * 97 : (size_t)(i % 64) * 48 + 1;
            if (i % 250 == 0) {
                CHECK(posix_memalign(&p[i], 8192, n) == 0, "posix_memalign");
            } else {
                p[i] = malloc(n);
            }
            CHECK(p[i] != NULL, "malloc(%zu)", n);
            memset(p[i], 0x77, n < 64 ? n : 64);
        }
        for (int i = 0; i < N; i++) {
            errno = 4242 + i;
            free(p[i]);
            CHECK(errno == 4242 + i, "free of block %d changed errno to %d", i, errno);
            errno = 4242;
            free(NULL);
            CHECK(errno == 4242, "free(NULL) changed errno");
        }
    }
    /* cfree is only a compatibility symbol in glibc; slubmalloc exports it. */
    void (*cfree_fn)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "cfree");
    if (cfree_fn) {
        errno = 99;
        cfree_fn(malloc(OPAQUE((size_t)10)));
        CHECK(errno == 99, "cfree changed errno");
    }
}

/* malloc_usable_size: 0 for NULL, at least the request, and the list of
 * "usable <request> <usable>" lines that the Rust test compares with
 * slubmalloc's class sizes. */
static void usable_size(void) {
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) = %zu", malloc_usable_size(NULL));
    for (size_t n = 0; n <= 70000; n += (n < 2100 ? 1 : n < 33000 ? 61 : 997)) {
        void *p = malloc(n);
        CHECK(p != NULL, "malloc(%zu)", n);
        size_t u = malloc_usable_size(p);
        CHECK(u >= n, "malloc_usable_size(malloc(%zu)) = %zu", n, u);
        memset(p, 0x5C, u); /* every usable byte is really usable */
        printf("usable %zu %zu\n", n, u);
        void *q = realloc(p, n + 1 + n / 2);
        CHECK(q != NULL && malloc_usable_size(q) >= n + 1 + n / 2, "usable size after realloc to %zu",
              n + 1 + n / 2);
        free(q);
    }
}

/* Every block of 16 bytes or more is 16-aligned; smaller ones 8-aligned. */
static void alignment_16(void) {
    enum { BATCH = 64 };
    void *keep[BATCH];
    int k = 0;
    for (size_t n = 1; n <= 300000; n += (n < 4200 ? 1 : n < 70000 ? 37 : 4099)) {
        size_t want = n >= 16 ? 16 : 8;
        void *m = malloc(n);
        CHECK(m != NULL && aligned_to(m, want), "malloc(%zu) = %p, not %zu-aligned", n, m, want);
        void *c = calloc(1, n);
        CHECK(c != NULL && aligned_to(c, want), "calloc(1, %zu) = %p, not %zu-aligned", n, c, want);
        void *r = realloc(malloc(n / 2 + 1), n);
        CHECK(r != NULL && aligned_to(r, want), "realloc(_, %zu) = %p, not %zu-aligned", n, r, want);
        free(c);
        free(r);
        if (k == BATCH) {
            for (int i = 0; i < BATCH; i++) free(keep[i]);
            k = 0;
        }
        keep[k++] = m;
    }
    for (int i = 0; i < k; i++) free(keep[i]);
}

/* realloc(p, 0) frees p and returns NULL (glibc's choice). That p is really
 * freed is proven by `realloc_zero_then_free` aborting as a double free. */
static void realloc_zero(void) {
    static const size_t sizes[] = {1, 16, 100, 2000, 32768, 40000, 1 << 20};
    for (int round = 0; round < 50; round++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            void *p = malloc(sizes[i]);
            CHECK(p != NULL, "malloc(%zu)", sizes[i]);
            memset(p, 0x66, sizes[i]);
            void *q = realloc(p, OPAQUE((size_t)0));
            CHECK(q == NULL, "realloc(%zu-byte block, 0) = %p, not NULL", sizes[i], q);
        }
    }
}

static void realloc_zero_then_free(size_t n) {
    void *p = malloc(n);
    CHECK(p != NULL, "malloc");
    memset(p, 0x66, n);
    void *q = realloc(p, OPAQUE((size_t)0));
    CHECK(q == NULL, "realloc(p, 0) = %p", q);
    printf("realloc(p, 0) returned NULL; freeing p again must abort\n");
    fflush(stdout);
    free(OPAQUE(p));
    FAIL("free after realloc(p, 0) did not abort: p was not freed");
}

/* Growing and shrinking keeps the contents, across classes, the small/large
 * boundary, mremap-sized blocks and aligned blocks. */
static void realloc_contents(void) {
    static const size_t steps[] = {1,     7,     8,     9,      16,      17,       100,     128,     129,
                                   1000,  1024,  4096,  4097,   32767,   32768,    32769,   40000,   65536,
                                   70000, 1 << 20, 5 << 20, 24 << 20, 3 << 20, 200000, 32769, 32768, 20000,
                                   4096,  129,   100,   16,     9,       1,        50000,   1 << 20, 31};
    enum { NSTEP = sizeof steps / sizeof steps[0] };
    for (int kind = 0; kind < 3; kind++) {
        unsigned char *p;
        if (kind == 0) {
            p = malloc(steps[0]);
        } else if (kind == 1) {
            p = calloc(1, steps[0]);
        } else {
            void *a;
            CHECK(posix_memalign(&a, 16, steps[0]) == 0, "posix_memalign");
            p = a;
        }
        CHECK(p != NULL, "first allocation");
        fill(p, steps[0], 0);
        for (size_t i = 1; i < NSTEP; i++) {
            size_t old = steps[i - 1], n = steps[i];
            /* A neighbour allocation between steps, so that in-place growth
             * cannot be taken for granted. */
            void *neighbour = malloc(old);
            unsigned char *q = realloc(p, n);
            CHECK(q != NULL, "realloc(%zu -> %zu)", old, n);
            size_t keep = old < n ? old : n;
            CHECK(same(q, keep, (unsigned)(i - 1)), "realloc(%zu -> %zu) lost contents (kind %d)", old, n, kind);
            CHECK(aligned_to(q, n >= 16 ? 16 : 8), "realloc(%zu -> %zu) misaligned", old, n);
            fill(q, n, (unsigned)i);
            free(neighbour);
            p = q;
        }
        CHECK(same(p, steps[NSTEP - 1], NSTEP - 1), "final contents");
        free(p);
    }
    /* Many blocks growing in turn, interleaved, as a string builder does. */
    enum { NB = 200 };
    static unsigned char *b[NB];
    static size_t bn[NB];
    for (int i = 0; i < NB; i++) {
        bn[i] = 1 + (size_t)i % 13;
        b[i] = malloc(bn[i]);
        fill(b[i], bn[i], (unsigned)i);
    }
    for (int round = 0; round < 12; round++) {
        for (int i = 0; i < NB; i++) {
            size_t n = bn[i] + bn[i] / 2 + (size_t)(i % 7) + 1;
            b[i] = realloc(b[i], n);
            CHECK(b[i] != NULL, "realloc grow");
            CHECK(same(b[i], bn[i], (unsigned)(i + round * NB)), "interleaved growth lost contents");
            bn[i] = n;
            fill(b[i], n, (unsigned)(i + (round + 1) * NB));
        }
    }
    for (int i = 0; i < NB; i++) free(b[i]);
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* malloc_trim gives freed memory back (resident size falls) and the heap
 * stays fully usable. Prints "trim_result <r>" for the Rust test. */
static void trim_contract(void) {
    enum { N = 200000, NL = 24 };
    static unsigned char *p[N];
    static unsigned char *l[NL];
    long base = rss_kib();
    for (int i = 0; i < N; i++) {
        p[i] = malloc(200 + (size_t)(i % 8) * 16); /* ~56 MiB of small blocks */
        CHECK(p[i] != NULL, "malloc");
        memset(p[i], (int)i, 200);
    }
    for (int i = 0; i < NL; i++) {
        l[i] = malloc((size_t)1 << 20);
        CHECK(l[i] != NULL, "malloc(1 MiB)");
        memset(l[i], i, (size_t)1 << 20);
    }
    long peak = rss_kib();
    for (int i = 0; i < N; i++) free(p[i]);
    for (int i = 0; i < NL; i++) free(l[i]);
    long freed = rss_kib();
    int r = malloc_trim(0);
    long trimmed = rss_kib();
    printf("rss_kib base %ld peak %ld after_free %ld after_trim %ld\n", base, peak, freed, trimmed);
    printf("trim_result %d\n", r);
    CHECK(r == 0 || r == 1, "malloc_trim returned %d", r);
    CHECK(peak - base > 50 * 1024, "allocating did not raise the resident size (%ld -> %ld KiB)", base, peak);
    CHECK(trimmed - base < (peak - base) / 4, "after malloc_trim %ld KiB of %ld are still resident",
          trimmed - base, peak - base);
    /* Everything works again afterwards, and a second trim is harmless. */
    for (int i = 0; i < N; i += 3) {
        p[i] = malloc(200 + (size_t)(i % 8) * 16);
        CHECK(p[i] != NULL, "malloc after trim");
        fill(p[i], 200, (unsigned)i);
    }
    for (int i = 0; i < NL; i++) {
        l[i] = malloc((size_t)1 << 20);
        CHECK(l[i] != NULL, "large malloc after trim");
        fill(l[i], (size_t)1 << 20, (unsigned)i);
    }
    for (int i = 0; i < N; i += 3) CHECK(same(p[i], 200, (unsigned)i), "block lost contents after trim");
    for (int i = 0; i < NL; i++) CHECK(same(l[i], (size_t)1 << 20, (unsigned)i), "large block after trim");
    int r2 = malloc_trim(0);
    CHECK(r2 == 0 || r2 == 1, "second malloc_trim returned %d", r2);
    for (int i = 0; i < N; i += 3) CHECK(same(p[i], 200, (unsigned)i), "live block changed by malloc_trim");
    for (int i = 0; i < N; i += 3) free(p[i]);
    for (int i = 0; i < NL; i++) free(l[i]);
}

/* errno after every entry point, on success and on failure: one line per
 * case, "errno_row <call> -> <block|NULL> ret <r> errno <unchanged|ENOMEM|
 * EINVAL|n>", errno being 4242 before each call. The Rust test runs the group
 * on glibc and preloaded and requires the same lines (that is the contract;
 * the group itself checks nothing). Every call goes through the v_ pointers
 * (see there). */
#define ERRNO_BEFORE 4242

static void errno_row(const char *call, const void *p, int r) {
    int e = errno;
    char name[16];
    if (e == ERRNO_BEFORE) snprintf(name, sizeof name, "unchanged");
    else if (e == ENOMEM) snprintf(name, sizeof name, "ENOMEM");
    else if (e == EINVAL) snprintf(name, sizeof name, "EINVAL");
    else snprintf(name, sizeof name, "%d", e);
    printf("errno_row %s -> %s ret %d errno %s\n", call, p ? "block" : "NULL", r, name);
}

/* One case: `expr` runs with errno = 4242 and yields a pointer (a block is
 * freed after the row is printed); `r_` is posix_memalign's return value. */
#define ERRNO_CASE(call, expr)                      \
    do {                                            \
        int r_ = 0;                                 \
        errno = ERRNO_BEFORE;                       \
        void *p_ = (expr);                          \
        errno_row(call, p_, r_);                    \
        v_free(p_);                                 \
    } while (0)

static void *pm(size_t align, size_t size, int *r) {
    void *p = (void *)&errno_row; /* must stay untouched on failure */
    *r = v_posix_memalign(&p, align, size);
    if (*r == 0) return p;
    if (p != (void *)&errno_row) FAIL("posix_memalign(%zu, %zu) failed but wrote *memptr", align, size);
    return NULL;
}

/* realloc or reallocarray of a fresh `old`-byte block to n * m bytes. A
 * failure other than to 0 bytes (which frees) leaves the old block, which is
 * freed here with errno kept (realloc_huge checks its contents). */
static void *grow(size_t old, size_t n, size_t m, int array) {
    void *b = v_malloc(old);
    if (!b) FAIL("malloc(%zu)", old);
    size_t bytes;
    int overflow = __builtin_mul_overflow(n, m, &bytes);
    errno = ERRNO_BEFORE;
    void *q = array ? v_reallocarray(b, n, m) : v_realloc(b, n * m);
    if (!q && (overflow || bytes != 0)) {
        int e = errno;
        v_free(b);
        errno = e;
    }
    return q;
}

static void errno_table(void) {
    const size_t H = (size_t)PTRDIFF_MAX + 1, X = SIZE_MAX, T = (size_t)1 << 62, TOP = (size_t)1 << 63;
    printf("glibc %s\n", gnu_get_libc_version());
    /* malloc, calloc, realloc, reallocarray */
    ERRNO_CASE("malloc(100)", v_malloc(100));
    ERRNO_CASE("malloc(0)", v_malloc(0));
    ERRNO_CASE("malloc(1 MiB)", v_malloc((size_t)1 << 20));
    ERRNO_CASE("malloc(PTRDIFF_MAX)", v_malloc((size_t)PTRDIFF_MAX));
    ERRNO_CASE("malloc(PTRDIFF_MAX + 1)", v_malloc(H));
    ERRNO_CASE("malloc(SIZE_MAX)", v_malloc(X));
    ERRNO_CASE("calloc(10, 10)", v_calloc(10, 10));
    ERRNO_CASE("calloc(0, 0)", v_calloc(0, 0));
    ERRNO_CASE("calloc(1, 16 MiB)", v_calloc(1, (size_t)16 << 20));
    ERRNO_CASE("calloc(PTRDIFF_MAX + 1, 1)", v_calloc(H, 1));
    ERRNO_CASE("calloc(SIZE_MAX / 2 + 1, 2) overflow", v_calloc(X / 2 + 1, 2));
    ERRNO_CASE("calloc(2^33, 2^31) overflow", v_calloc((size_t)1 << 33, (size_t)1 << 31));
    ERRNO_CASE("realloc(NULL, 100)", v_realloc(NULL, 100));
    ERRNO_CASE("realloc(NULL, PTRDIFF_MAX + 1)", v_realloc(NULL, H));
    ERRNO_CASE("realloc(100 B, 200)", grow(100, 200, 1, 0));
    ERRNO_CASE("realloc(100 B, 1 MiB)", grow(100, (size_t)1 << 20, 1, 0));
    ERRNO_CASE("realloc(1 MiB, 3 MiB)", grow((size_t)1 << 20, (size_t)3 << 20, 1, 0));
    ERRNO_CASE("realloc(1 MiB, 100)", grow((size_t)1 << 20, 100, 1, 0));
    ERRNO_CASE("realloc(100 B, 0)", grow(100, 0, 1, 0));
    ERRNO_CASE("realloc(100 B, PTRDIFF_MAX + 1)", grow(100, H, 1, 0));
    ERRNO_CASE("realloc(1 MiB, PTRDIFF_MAX + 1)", grow((size_t)1 << 20, H, 1, 0));
    ERRNO_CASE("realloc(1 MiB, SIZE_MAX)", grow((size_t)1 << 20, X, 1, 0));
    ERRNO_CASE("reallocarray(NULL, 10, 10)", v_reallocarray(NULL, 10, 10));
    ERRNO_CASE("reallocarray(NULL, SIZE_MAX / 2 + 1, 2) overflow", v_reallocarray(NULL, X / 2 + 1, 2));
    ERRNO_CASE("reallocarray(NULL, PTRDIFF_MAX + 1, 1)", v_reallocarray(NULL, H, 1));
    ERRNO_CASE("reallocarray(100 B, 2^33, 2^31) overflow", grow(100, (size_t)1 << 33, (size_t)1 << 31, 1));
    ERRNO_CASE("reallocarray(100 B, 300, 2)", grow(100, 300, 2, 1));
    /* posix_memalign: EINVAL is returned, never stored; ENOMEM is both. */
    ERRNO_CASE("posix_memalign(64, 100)", pm(64, 100, &r_));
    ERRNO_CASE("posix_memalign(8, 0)", pm(8, 0, &r_));
    ERRNO_CASE("posix_memalign(1 MiB, 1 MiB)", pm((size_t)1 << 20, (size_t)1 << 20, &r_));
    ERRNO_CASE("posix_memalign(64, PTRDIFF_MAX + 1)", pm(64, H, &r_));
    ERRNO_CASE("posix_memalign(1 MiB, PTRDIFF_MAX + 1)", pm((size_t)1 << 20, H, &r_));
    ERRNO_CASE("posix_memalign(64, SIZE_MAX)", pm(64, X, &r_));
    ERRNO_CASE("posix_memalign(2^62, 64)", pm(T, 64, &r_));
    ERRNO_CASE("posix_memalign(2^63, 64)", pm(TOP, 64, &r_));
    ERRNO_CASE("posix_memalign(0, 64)", pm(0, 64, &r_));
    ERRNO_CASE("posix_memalign(4, 64)", pm(4, 64, &r_));
    ERRNO_CASE("posix_memalign(24, 64)", pm(24, 64, &r_));
    ERRNO_CASE("posix_memalign(3, PTRDIFF_MAX + 1)", pm(3, H, &r_));
    ERRNO_CASE("posix_memalign(SIZE_MAX, 64)", pm(X, 64, &r_));
    /* aligned_alloc. Rows marked [c17] are glibc 2.36's: aligned_alloc is
     * memalign; glibc 2.38 rejects alignments that are not powers of two
     * (EINVAL), as C17 allows; the Rust test knows. */
    ERRNO_CASE("aligned_alloc(64, 100)", v_aligned_alloc(64, 100));
    ERRNO_CASE("aligned_alloc(1 MiB, 1 MiB)", v_aligned_alloc((size_t)1 << 20, (size_t)1 << 20));
    ERRNO_CASE("aligned_alloc(64, PTRDIFF_MAX + 1)", v_aligned_alloc(64, H));
    ERRNO_CASE("aligned_alloc(2^62, 64)", v_aligned_alloc(T, 64));
    ERRNO_CASE("aligned_alloc(2^63, 64)", v_aligned_alloc(TOP, 64));
    ERRNO_CASE("aligned_alloc(SIZE_MAX, 64)", v_aligned_alloc(X, 64));
    ERRNO_CASE("aligned_alloc(2^63 + 1, 64)", v_aligned_alloc(TOP + 1, 64));
    ERRNO_CASE("aligned_alloc(3, 64) [c17]", v_aligned_alloc(3, 64));
    ERRNO_CASE("aligned_alloc(0, 64) [c17]", v_aligned_alloc(0, 64));
    ERRNO_CASE("aligned_alloc(24, 64) [c17]", v_aligned_alloc(24, 64));
    ERRNO_CASE("aligned_alloc(3, PTRDIFF_MAX + 1) [c17]", v_aligned_alloc(3, H));
    ERRNO_CASE("aligned_alloc(2^62 + 1, 64) [c17]", v_aligned_alloc(T + 1, 64));
    /* memalign, valloc, pvalloc */
    ERRNO_CASE("memalign(64, 100)", v_memalign(64, 100));
    ERRNO_CASE("memalign(3, 64)", v_memalign(3, 64));
    ERRNO_CASE("memalign(0, 64)", v_memalign(0, 64));
    ERRNO_CASE("memalign(64, PTRDIFF_MAX + 1)", v_memalign(64, H));
    ERRNO_CASE("memalign(2^62, 64)", v_memalign(T, 64));
    ERRNO_CASE("memalign(2^62 + 1, 64)", v_memalign(T + 1, 64));
    ERRNO_CASE("memalign(2^63, 64)", v_memalign(TOP, 64));
    ERRNO_CASE("memalign(2^63 + 1, 64)", v_memalign(TOP + 1, 64));
    ERRNO_CASE("memalign(SIZE_MAX, 64)", v_memalign(X, 64));
    ERRNO_CASE("valloc(100)", v_valloc(100));
    ERRNO_CASE("valloc(0)", v_valloc(0));
    ERRNO_CASE("valloc(PTRDIFF_MAX + 1)", v_valloc(H));
    ERRNO_CASE("valloc(SIZE_MAX)", v_valloc(X));
    ERRNO_CASE("pvalloc(100)", v_pvalloc(100));
    ERRNO_CASE("pvalloc(0)", v_pvalloc(0));
    ERRNO_CASE("pvalloc(PTRDIFF_MAX + 1)", v_pvalloc(H));
    ERRNO_CASE("pvalloc(SIZE_MAX - 4095)", v_pvalloc(X - 4095));
    ERRNO_CASE("pvalloc(SIZE_MAX)", v_pvalloc(X));
    /* free and malloc_usable_size keep errno (NULL, small, large). */
    static const size_t kept[] = {0, 24, 5000, (size_t)1 << 20};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        void *b = kept[i] ? v_malloc(kept[i]) : NULL;
        char what[32], call[64];
        if (kept[i]) snprintf(what, sizeof what, "%zu B", kept[i]);
        else snprintf(what, sizeof what, "NULL");
        errno = ERRNO_BEFORE;
        size_t u = v_usable(b);
        snprintf(call, sizeof call, "malloc_usable_size(%s) covers it", what);
        errno_row(call, u >= kept[i] ? (void *)&errno_row : NULL, 0);
        errno = ERRNO_BEFORE;
        v_free(b);
        snprintf(call, sizeof call, "free(%s)", what);
        errno_row(call, NULL, 0);
    }
}

/* malloc_stats prints the statistics table on stderr while blocks are live:
 * 7 blocks of 100 bytes and 5 of 20000. */
static void stats_contract(void) {
    void *a[7], *b[5];
    for (int i = 0; i < 7; i++) a[i] = malloc(OPAQUE((size_t)100));
    for (int i = 0; i < 5; i++) b[i] = malloc(OPAQUE((size_t)20000));
    fflush(stdout);
    malloc_stats();
    for (int i = 0; i < 7; i++) free(a[i]);
    for (int i = 0; i < 5; i++) free(b[i]);
}

/* malloc_stats in a thread with a cancellation pending (deferred, the
 * default) returns, with its report whole: glibc writes it with
 * cancellation off. The thread is then cancelled at its next cancellation
 * point, which shows the cancellation was pending all along and that the
 * state was put back. */
static volatile int stats_returned;

static void *stats_with_cancel_pending(void *arg) {
    (void)arg;
    int type;
    pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &type);
    pthread_cancel(pthread_self());
    malloc_stats();
    stats_returned = 1;
    pthread_testcancel();
    return NULL;
}

static void stats_cancel(void) {
    fflush(stdout);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, stats_with_cancel_pending, NULL) == 0, "pthread_create");
    void *ret;
    CHECK(pthread_join(t, &ret) == 0, "pthread_join");
    CHECK(stats_returned, "the thread was cancelled inside malloc_stats");
    CHECK(ret == PTHREAD_CANCELED, "the pending cancellation was lost (returned %p)", ret);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <group>\n", argv[0]);
        return 2;
    }
    Dl_info info;
    void *fn = dlsym(RTLD_DEFAULT, "malloc");
    if (fn && dladdr(fn, &info) && info.dli_fname)
        printf("malloc from %s\n", info.dli_fname);
    else
        printf("malloc from unknown\n");
    const char *g = argv[1];
    if (!strcmp(g, "malloc_zero")) malloc_zero();
    else if (!strcmp(g, "huge_sizes")) huge_sizes();
    else if (!strcmp(g, "calloc")) calloc_contract();
    else if (!strcmp(g, "reallocarray")) reallocarray_contract();
    else if (!strcmp(g, "realloc_huge")) realloc_huge();
    else if (!strcmp(g, "posix_memalign_rejects")) posix_memalign_rejects();
    else if (!strcmp(g, "posix_memalign_powers")) posix_memalign_powers();
    else if (!strcmp(g, "aligned_family")) aligned_family();
    else if (!strcmp(g, "free")) free_contract();
    else if (!strcmp(g, "usable_size")) usable_size();
    else if (!strcmp(g, "alignment_16")) alignment_16();
    else if (!strcmp(g, "realloc_zero")) realloc_zero();
    else if (!strcmp(g, "realloc_zero_then_free_small")) realloc_zero_then_free(64);
    else if (!strcmp(g, "realloc_zero_then_free_large")) realloc_zero_then_free(1 << 20);
    else if (!strcmp(g, "realloc_contents")) realloc_contents();
    else if (!strcmp(g, "trim")) trim_contract();
    else if (!strcmp(g, "stats")) stats_contract();
    else if (!strcmp(g, "errno")) errno_table();
    else if (!strcmp(g, "stats_cancel")) stats_cancel();
    else {
        fprintf(stderr, "unknown group %s\n", g);
        return 2;
    }
    printf("ok %s\n", g);
    return 0;
}
