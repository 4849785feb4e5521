/* Every heap misuse the allocator must stop, as one program:
 *
 *     misuse CASE WHERE [OP]
 *
 * sets up CASE, prints the address it is about to misuse (`%p`, the first
 * line of stdout), then misuses it with OP; a process that gets past the
 * misuse prints "survived" (flushed at once: a stop at exit comes after
 * it). tests/processes/misuse.rs runs it with the
 * allocator preloaded and expects death by SIGABRT after one
 * "slubmalloc: " line that names the misuse and that address.
 *
 * WHERE is the allocator state the misuse meets:
 *   cold        the class is cold in the thread: its few blocks come from
 *               shared slabs under the node lock (`src/shared.rs`)
 *   warm        the thread first allocates WARM blocks of the class and
 *               keeps them, so the class has an owned active slab and the
 *               misuse meets the fast paths
 *   remote      as warm, but the misuse (the last free, or the free and the
 *               write after it) is done by another thread, one that has
 *               allocated before
 *   remote_new  as remote, by a thread whose first allocator call it is
 *   cancel      as remote_new, in a thread with a cancellation pending
 *               (the message is written, write(2) being a cancellation
 *               point, and the process stopped, not the thread cancelled)
 *   exiting     as warm, the whole case in a pthread key destructor of an
 *               exiting thread that runs after the allocator's own: its
 *               blocks come from the orphan heap, whose frees take the
 *               slow path
 *
 * OP is what is done to the misused pointer: `free` (the default),
 * `realloc` (realloc(p, n) with n the case's block size, in place if p
 * were valid, or 20), `usable` (malloc_usable_size), and for the
 * cases that corrupt a free list, `alloc` (allocate the class again until
 * the corrupted block comes up; the default there) or `trim`
 * (malloc_trim(0), which hands the thread's lists to the node lists),
 * and for the sheaf cases, after their last free: `alloc` (the default;
 * a block handed out twice is reported on stdout, "handed out ... twice"),
 * `trim`, `flush` (frees other blocks of the class, `old`, until the
 * sheaf overflows and flushes its oldest half), `exit` (exit(0) at once:
 * the check of the sheaves at process exit), `full` (frees as many
 * blocks as the sheaf holds, 32, before the last free, so that the block
 * of the active slab meets a full sheaf and goes into its slab).
 *
 * CASE (the block sizes are chosen so that a cold class stays cold: libc
 * and this program allocate few blocks of them):
 *   double_free            free(a); free(a)
 *   double_free_between    free(a); free(b); free(a)
 *   double_free_exit       free(a); free(a); exit(0) at once, "survived"
 *                          never printed: the second free must stop it
 *   double_free_after_remote   another thread frees a; then free(a)
 *   double_free_full_slab  a in a slab that filled up and left the heap
 *                          (warm: blocks are allocated until the next one
 *                          comes from another slab); free(a); free(a)
 *   double_free_flushed    free(a); malloc_trim(0) (a goes back to its
 *                          slab on the node list, b keeps the slab in use);
 *                          free(a) (warm: into the sheaf, which does not
 *                          read it; "survived", then the stop at exit)
 *   double_free_emptied    every block of a's slab freed, so that the slab
 *                          went back to its segment (cold: a and b, then
 *                          malloc_trim(0); warm: forty slabs' worth); free(a)
 *   double_free_large      a 1 MiB block (its own mapping) freed twice
 *   double_free_medium     a 100 KiB block (a medium block: a span of two
 *                          slabs of a segment) freed twice
 *   interior               p + 8 of malloc(64)
 *   double_free_active_slab    a of the active slab freed past a full
 *                          sheaf (into its slab), the sheaf filled again,
 *                          then free(a) (warm: past the full sheaf again)
 *   interior_active_slab   p + 8 of a block of the active slab (warm, OP
 *                          `full`: past a full sheaf, into its slab)
 *   interior_large         p + 4096 of malloc(1 MiB)
 *   interior_medium        p + 4096 of malloc(100 KiB), a medium block
 *   span_tail              p + 64 KiB of malloc(100 KiB): the start of
 *                          the medium block's second slab
 *   never_carved           p + 16384 for p = malloc(16): the start of a
 *                          slot of p's slab that was never carved (slabs
 *                          carve a page at a time), so never handed out
 *   stack, global          a stack array, a global array
 *   made_up                an unmapped address nobody allocated
 *   foreign_mmap           a page the program mapped itself
 *   overwritten_link       free(p); free(q); then p's first two words
 *                          (the free-list link, or the tag of a block in
 *                          a sheaf) overwritten with data; q, the list's
 *                          head, if handed out again, is reported on
 *                          stdout ("handed out")
 *   overflow               (SLUBMALLOC_DEBUG=1) p[24] written past
 *                          malloc(24), a block freed and allocated again:
 *                          the red zone
 *   overflow_size_word     (SLUBMALLOC_DEBUG=1) bytes 39..48 of
 *                          malloc(39) written with 0xff: the red zone and
 *                          the size word behind it, in a 48-byte slot
 *   write_after_free       (SLUBMALLOC_DEBUG=1) p[8] written after
 *                          free(p): the poison, checked on reuse
 *   zero_read, zero_write  *p read, or written, for p = malloc(0): a
 *                          zero-size block, whose memory is inaccessible
 *                          (src/zero.rs): death by SIGSEGV, no message
 *                          (warm: WARM zero-size blocks kept first)
 *   zero_double_free       p = malloc(0); free(p); free(p)
 *   zero_double_free_emptied   as zero_double_free, p's slab gone back
 *                          to its segment at the first free
 *   zero_interior          p + 16 of p = malloc(0)
 *   zero_ok                no misuse (a control): malloc(0), calloc of no
 *                          bytes, aligned_alloc(64, 0), realloc(NULL, 0)
 *                          are distinct live blocks of usable size 0; a
 *                          realloc from one works; they are freed; the
 *                          statistics agree with the walk
 *                          (slubmalloc_check_stats) throughout; prints
 *                          "survived" and exits 0
 *
 * The sheaf cases (src/sheaf.rs): a warm class's free of a block of any
 * slab but the thread's active one goes into the thread's sheaf, tagged
 * (bytes 8..16), unread; the checks come when the block leaves it. Their
 * blocks are 48 bytes: `target` and `old` are allocated first, then the
 * class until a block comes from another slab (warm: the slab of target
 * and old is FULL, not the active one; cold: target alone, no old):
 *   double_free_sheaf      free(a); free(a): the sheaf's top
 *   double_free_sheaf_between  free(a); free(b); free(a); OP
 *   double_free_sheaf_flushed  free(a); malloc_trim(0) (a flushed back to
 *                          its slab, onto a free list); free(a); OP
 *   double_free_other_sheaf    a, of this thread's active slab, freed by
 *                          a thread whose class is warm (into its sheaf)
 *                          that stays alive; then free(a) here (OP
 *                          `free`, or `full`: a full sheaf sends a into
 *                          its slab, which reads it)
 *   double_free_two_sheaves    as double_free_other_sheaf, a not of this
 *                          thread's active slab: free(a) here goes into this
 *                          thread's sheaf too (not stopped: the sheaf reads
 *                          nothing), malloc here hands a out ("malloc
 *                          returned it"), then the other thread allocates: its pop
 *                          meets a, whose tag the first pop cleared
 *   sheaf_tag_written      free(a); bytes 8..16 of a (its tag) written
 *                          (by another thread if WHERE says so); OP
 *   untouched              no misuse (a control): blocks that come back
 *                          off the free lists are freed without being
 *                          written, by their thread and by another one;
 *                          prints "survived" and exits 0 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define WARM 200
#define AGAIN 4096
#define EMPTIED (65 * 40) /* forty slabs of 1000-byte blocks */

static const char *where, *op;
static char *volatile target; /* the misused pointer */
static char *volatile second; /* overwritten_link: freed after it */
static size_t size;           /* its class's request size */
static char global_buffer[256];

static int is(const char *a, const char *b) { return strcmp(a, b) == 0; }

static int warm(void) { return !is(where, "cold"); }

static int remote(void) {
    return !is(where, "cold") && !is(where, "warm") && !is(where, "exiting");
}

static void *must_malloc(size_t n) {
    char *p = malloc(n);
    if (!p) {
        perror("malloc");
        exit(2);
    }
    p[0] = 1;
    return p;
}

/* WARM blocks of the misused class, kept: the class gets its own slab. */
void *kept[WARM];
static void warm_up(void) {
    if (!warm())
        return;
    for (int i = 0; i < WARM; i++)
        kept[i] = must_malloc(size);
}

/* Says the process got past its misuse, at once: a check that stops it
 * later, at exit, must not pass for one that stopped the misuse. */
static void survived(void) {
    puts("survived");
    fflush(stdout);
}

static void announce(void *p) {
    printf("%p\n", p);
    fflush(stdout);
}

/* Allocates the class again until the block at `target` would have come
 * up; reports `second` handed out, or `target` handed out twice. */
void *held[AGAIN];
static void allocate_again(void) {
    int target_seen = 0;
    for (int i = 0; i < AGAIN; i++) {
        held[i] = malloc(size);
        if ((second && held[i] == second) || (held[i] == target && ++target_seen == 2)) {
            printf("handed out %p%s\n", held[i], held[i] == target ? " twice" : "");
            fflush(stdout);
        }
    }
}

/* Blocks of the sheaf cases: `target` and `old`, then the class until a
 * block comes from another slab, so that (warm) theirs is not the active
 * slab and their frees go into the sheaf. */
#define OLD 64
/* size_class::SHEAF_CAP of the 48-byte class: the most its sheaf holds,
 * which it reaches at its first overflow after the thread allocated from
 * its slab (sheaf_budget: a miss, then an overflow). */
#define SHEAF_CAP 32
static char *old[OLD];
static void leave_active_slab(void) {
    size = 48;
    warm_up();
    target = must_malloc(size);
    if (!warm())
        return; /* a cold class stays cold: no old blocks */
    for (int i = 0; i < OLD; i++)
        old[i] = must_malloc(size);
    uintptr_t slab = (uintptr_t)target >> 16;
    for (int i = 0; i < OLD; i++)
        if ((uintptr_t)old[i] >> 16 != slab) {
            fprintf(stderr, "setup: the old blocks span two slabs\n");
            exit(5);
        }
    for (int i = 0; i < 4 * 65536 / 48; i++)
        if ((uintptr_t)must_malloc(size) >> 16 != slab)
            return;
    fprintf(stderr, "setup: the slab never filled up\n");
    exit(5);
}

/* OP `flush`: the old blocks but the first (`b` of the cases), more than
 * a sheaf holds. */
static void free_old(void) {
    for (int i = 1; i < OLD; i++)
        free(old[i]);
}

/* OP `full`: the sheaf emptied (as many blocks allocated, and kept, as it
 * holds), then as many old blocks freed into it as it holds. */
static char *emptied[SHEAF_CAP];
static void fill_sheaf(void) {
    for (int i = 0; i < SHEAF_CAP; i++)
        emptied[i] = must_malloc(size);
    for (int i = 0; i < SHEAF_CAP; i++)
        free(old[i]);
}

/* OP, on `target`. */
static void do_op(void) {
    if (is(op, "free")) {
        free(target);
    } else if (is(op, "realloc")) {
        /* A block's own size stays in its class: realloc in place. */
        target = realloc(target, size ? size : 20);
    } else if (is(op, "usable")) {
        printf("usable %zu\n", malloc_usable_size(target));
    } else if (is(op, "alloc")) {
        allocate_again();
    } else if (is(op, "trim")) {
        malloc_trim(0);
    } else if (is(op, "flush")) {
        free_old();
    } else if (is(op, "exit")) {
        exit(0);
    } else if (is(op, "full")) {
        fill_sheaf();
        free(target);
    } else {
        fprintf(stderr, "unknown op %s\n", op);
        exit(2);
    }
}

static void (*thread_step)(void);

static void *thread_main(void *arg) {
    (void)arg;
    /* This thread has a heap now; 400 bytes, a class main has a slab of
     * (`main`), so that no slab is taken that a case has just freed. */
    if (is(where, "remote"))
        free(must_malloc(400));
    if (is(where, "cancel"))
        pthread_cancel(pthread_self()); /* deferred: pending until write(2) */
    thread_step();
    return NULL;
}

/* `step` in another thread if `thread` (`where` says which kind), else in
 * this one. */
static void in_thread(void (*step)(void), int thread) {
    if (!thread) {
        step();
        return;
    }
    thread_step = step;
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0)
        exit(3);
    pthread_join(t, NULL);
}

static void free_target(void) { free(target); }

static void free_target_and_exit(void) {
    free(target);
    exit(0);
}

static void free_and_overwrite_target(void) {
    free(target);
    free(second); /* the list's head now, the target behind it */
    /* The first two words: the link of a block on a free list, the tag
     * of a block in a sheaf (src/sheaf.rs). */
    uint64_t data[2] = {0x4141414141414141ull, 0x4141414141414141ull};
    memcpy(target, data, sizeof data);
}

/* The last free of a sheaf case, then OP. */
static void free_target_then_op(void) {
    free(target);
    do_op();
}

/* sheaf_tag_written: bytes 8..16 of the freed target. */
static void write_target_tag(void) {
    memset(target + 8, 0x41, 8);
}

/* double_free_other_sheaf: a thread whose class is warm frees the target
 * into its sheaf, says so, and waits for the process to end (its exit
 * would flush the sheaf). */
static int other_sheaf_pipe[2], go_pipe[2];
void *other_kept[WARM];
static void *free_into_other_sheaf(void *arg) {
    (void)arg;
    for (int i = 0; i < WARM; i++)
        other_kept[i] = must_malloc(size);
    free(target);
    if (write(other_sheaf_pipe[1], "x", 1) != 1)
        exit(3);
    char x;
    /* double_free_two_sheaves: told to, allocates once, from its sheaf. */
    if (read(go_pipe[0], &x, 1) == 1) {
        if (malloc(size) == target) {
            printf("handed out %p twice\n", target);
            fflush(stdout);
        }
        if (write(other_sheaf_pipe[1], "x", 1) != 1)
            exit(3);
    }
    for (;;)
        pause();
    return NULL;
}

/* Starts the thread of double_free_other_sheaf and waits for its free. */
static int free_in_other_sheaf(void) {
    if (pipe(other_sheaf_pipe) != 0 || pipe(go_pipe) != 0)
        return 3;
    pthread_t t;
    if (pthread_create(&t, NULL, free_into_other_sheaf, NULL) != 0)
        return 3;
    char x;
    if (read(other_sheaf_pipe[0], &x, 1) != 1)
        return 3;
    return 0;
}

/* Blocks reused off the free lists, freed unwritten (the `untouched`
 * control): a stale link left in one would look like a free block. */
static void *reused[WARM];
static void free_reused(void) {
    for (int i = 0; i < WARM; i++)
        free(reused[i]);
}

/* The zero-size cases (`zero_*`). */
extern int slubmalloc_check_stats(void) __attribute__((weak));
static void *zero_kept[WARM];
static void zero_fail(const char *what) {
    fprintf(stderr, "zero_ok: %s\n", what);
    exit(1);
}
static void zero_check_stats(void) {
    if (!slubmalloc_check_stats)
        zero_fail("slubmalloc_check_stats not found (not under the preload?)");
    if (slubmalloc_check_stats() != 0)
        zero_fail("the statistics disagree with the walk");
}
static void read_target(void) { printf("read %d\n", *(volatile char *)target); }
static void write_target(void) { *(volatile char *)target = 5; }
static void zero_ok(void) {
    enum { N = 8 };
    char *z[N];
    for (int i = 0; i < N - 4; i++)
        z[i] = malloc(0);
    z[N - 4] = calloc(0, 16);
    z[N - 3] = aligned_alloc(64, 0);
    z[N - 2] = realloc(NULL, 0);
    z[N - 1] = target;
    for (int i = 0; i < N; i++) {
        if (!z[i])
            zero_fail("a zero-size allocation returned null");
        if (malloc_usable_size(z[i]) != 0)
            zero_fail("a zero-size block's usable size is not 0");
        for (int k = 0; k < WARM; k++)
            if (zero_kept[k] == z[i])
                zero_fail("a live zero-size block handed out twice");
        for (int j = 0; j < i; j++)
            if (z[j] == z[i])
                zero_fail("two live zero-size blocks share an address");
    }
    if ((uintptr_t)z[N - 3] % 64 != 0)
        zero_fail("aligned_alloc(64, 0) is not 64-byte aligned");
    zero_check_stats();
    char *grown = realloc(z[0], 100);
    if (!grown)
        zero_fail("realloc from a zero-size block returned null");
    memset(grown, 7, 100);
    free(grown);
    for (int i = 1; i < N; i++)
        free(z[i]);
    zero_check_stats();
}
static int zero_case(const char *c) {
    if (warm())
        for (int i = 0; i < WARM; i++)
            zero_kept[i] = malloc(0);
    target = malloc(0);
    void (*misuse)(void) = free_target;
    if (is(c, "zero_read")) {
        misuse = read_target;
    } else if (is(c, "zero_write")) {
        misuse = write_target;
    } else if (is(c, "zero_double_free")) {
        free(target);
    } else if (is(c, "zero_double_free_emptied")) {
        /* target first in a slab of its own, the block before it in
         * another: that one's free lists its slab, so target's slab, empty
         * at target's free, goes back to its segment. */
        char *before;
        do {
            before = target;
            target = malloc(0);
        } while (!before || ((uintptr_t)target & 0xffff) != 0);
        announce(target);
        free(before);
        free(target);
    } else if (is(c, "zero_interior")) {
        target += 16;
    } else if (is(c, "zero_ok")) {
        misuse = zero_ok;
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    if (!is(c, "zero_ok") && !is(c, "zero_double_free_emptied"))
        announce(target);
    in_thread(misuse, remote());
    survived();
    return 0;
}

/* Sets up case `c` and commits its misuse; returns the exit status. */
static int run_case(const char *c, int argc) {
    void (*misuse)(void) = do_op; /* the last step, in another thread if remote */
    if (strncmp(c, "zero_", 5) == 0)
        return zero_case(c);
    if (is(c, "double_free") || is(c, "double_free_exit")) {
        size = 48;
        warm_up();
        target = must_malloc(size);
        announce(target);
        free(target);
        if (is(c, "double_free_exit"))
            misuse = free_target_and_exit;
    } else if (is(c, "double_free_between")) {
        size = 48;
        warm_up();
        target = must_malloc(size);
        char *b = must_malloc(size);
        announce(target);
        free(target);
        free(b);
    } else if (is(c, "double_free_after_remote")) {
        size = 3000;
        warm_up();
        target = must_malloc(size);
        must_malloc(size); /* keeps the slab in use */
        announce(target);
        /* The first free from a thread of its own: cold or warm, the block
         * sits on a list of a slab this thread did not free it into. */
        const char *w = where;
        where = "remote";
        in_thread(free_target, 1);
        where = w;
    } else if (is(c, "double_free_full_slab")) {
        size = 48;
        warm_up();
        target = must_malloc(size);
        if (warm()) {
            uintptr_t slab = (uintptr_t)target >> 16;
            for (int i = 0; i < 4 * 65536 / 48; i++)
                if ((uintptr_t)must_malloc(size) >> 16 != slab)
                    break;
        }
        announce(target);
        free(target);
    } else if (is(c, "double_free_flushed")) {
        size = 48;
        warm_up();
        target = must_malloc(size);
        must_malloc(size); /* keeps the slab in use */
        announce(target);
        free(target);
        malloc_trim(0);
    } else if (is(c, "double_free_emptied")) {
        size = 1000;
        static char *blocks[EMPTIED];
        int n = warm() ? EMPTIED : 2;
        for (int i = 0; i < n; i++)
            blocks[i] = must_malloc(size);
        target = blocks[n / 2];
        announce(target);
        for (int i = 0; i < n; i++)
            free(blocks[i]);
        malloc_trim(0);
    } else if (is(c, "double_free_large")) {
        size = 1 << 20;
        target = must_malloc(size);
        announce(target);
        free(target);
    } else if (is(c, "double_free_medium")) {
        size = 100 << 10;
        target = must_malloc(size);
        announce(target);
        free(target);
    } else if (is(c, "interior_medium") || is(c, "span_tail")) {
        size = 100 << 10;
        target = (char *)must_malloc(size) + (is(c, "span_tail") ? 64 << 10 : 4096);
        announce(target);
    } else if (is(c, "interior")) {
        size = 64;
        warm_up();
        target = (char *)must_malloc(size) + 8;
        announce(target);
    } else if (is(c, "double_free_active_slab")) {
        leave_active_slab();
        target = must_malloc(size); /* warm: of the active slab */
        announce(target);
        fill_sheaf();
        free(target); /* past the full sheaf, into its slab */
        /* The sheaf made room by flushing its older half: full again. */
        for (int i = SHEAF_CAP; i < SHEAF_CAP + SHEAF_CAP / 2; i++)
            free(old[i]);
    } else if (is(c, "interior_active_slab")) {
        leave_active_slab();
        target = (char *)must_malloc(size) + 8; /* warm: of the active slab */
        announce(target);
    } else if (is(c, "interior_large")) {
        size = 1 << 20;
        target = (char *)must_malloc(size) + 4096;
        announce(target);
    } else if (is(c, "never_carved")) {
        size = 16;
        warm_up();
        target = (char *)must_malloc(size) + 16384;
        announce(target);
    } else if (is(c, "stack")) {
        char stack_buffer[64];
        memset(stack_buffer, 1, sizeof stack_buffer);
        target = stack_buffer + 16;
        announce(target);
        in_thread(misuse, remote());
        survived();
        return stack_buffer[0] - 1;
    } else if (is(c, "global")) {
        target = global_buffer;
        announce(target);
    } else if (is(c, "made_up")) {
        target = (char *)(uintptr_t)0x123456789000ull;
        announce(target);
    } else if (is(c, "foreign_mmap")) {
        char *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return 2;
        target = m + 4096;
        announce(target);
    } else if (is(c, "overwritten_link")) {
        size = 24;
        if (argc <= 3)
            op = "alloc";
        warm_up();
        target = must_malloc(size);
        second = must_malloc(size);
        announce(target);
        /* Remote: another thread frees them and overwrites the link; this
         * thread's refill then takes them off the slab's remote list. */
        in_thread(free_and_overwrite_target, remote());
        do_op();
        survived();
        return 0;
    } else if (is(c, "overflow")) {
        size = 24;
        warm_up();
        /* A block reused off a free list, its first word left as the
         * allocator leaves it: a stale link there would look free to the
         * red-zone check, which leaves free blocks to the double-free one. */
        free(must_malloc(size));
        target = malloc(size);
        if (!target)
            return 2;
        announce(target);
        target[24] = 1;
    } else if (is(c, "overflow_size_word")) {
        size = 39;
        warm_up();
        target = must_malloc(size);
        announce(target);
        memset(target + 39, 0xff, 48 - 39);
    } else if (is(c, "write_after_free")) {
        size = 24;
        op = "alloc";
        warm_up();
        target = must_malloc(size);
        announce(target);
        free(target);
        target[8] = 0x41;
        do_op();
        survived();
        return 0;
    } else if (is(c, "double_free_sheaf")) {
        leave_active_slab();
        announce(target);
        free(target);
    } else if (is(c, "double_free_sheaf_between")) {
        if (argc <= 3)
            op = "alloc";
        leave_active_slab();
        announce(target);
        free(target);
        free(old[0]);
        misuse = free_target_then_op;
    } else if (is(c, "double_free_sheaf_flushed")) {
        if (argc <= 3)
            op = "alloc";
        leave_active_slab();
        announce(target);
        free(target);
        malloc_trim(0);
        misuse = free_target_then_op;
    } else if (is(c, "double_free_other_sheaf")) {
        leave_active_slab();
        target = must_malloc(size); /* warm: of the active slab */
        announce(target);
        if (free_in_other_sheaf() != 0)
            return 3;
    } else if (is(c, "double_free_two_sheaves")) {
        leave_active_slab();
        announce(target);
        if (free_in_other_sheaf() != 0)
            return 3;
        free(target); /* warm: into this thread's sheaf, unread */
        char *p = malloc(size);
        printf("%s\n", p == target ? "malloc returned it" : "malloc did not return it");
        fflush(stdout);
        /* The other thread's allocation pops it from its own sheaf. */
        char x;
        if (write(go_pipe[1], "x", 1) != 1 || read(other_sheaf_pipe[0], &x, 1) != 1)
            return 3;
        survived();
        return 0;
    } else if (is(c, "sheaf_tag_written")) {
        if (argc <= 3)
            op = "alloc";
        leave_active_slab();
        announce(target);
        free(target);
        in_thread(write_target_tag, remote());
        do_op();
        survived();
        return 0;
    } else if (is(c, "untouched")) {
        size = 48;
        warm_up();
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < WARM; i++)
                reused[i] = malloc(size);
            if (round == 0)
                free_reused();
        }
        in_thread(free_reused, remote());
        survived();
        return 0;
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    in_thread(misuse, remote());
    survived();
    return 0;
}

static const char *exiting_case;
static int exiting_argc;

static void run_while_exiting(void *value) {
    (void)value;
    exit(run_case(exiting_case, exiting_argc));
}

static void *exiting_thread(void *key) {
    free(must_malloc(400)); /* a heap, for the allocator's destructor */
    /* Any value but null: the destructor runs at this thread's exit. */
    pthread_setspecific(*(pthread_key_t *)key, key);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    where = argv[2];
    op = argc > 3 ? argv[3] : "free";
    /* This thread's heap, created by its first allocation, which the heap
     * profile does not sample: the blocks of the case may be sampled. */
    free(must_malloc(400));
    if (!is(where, "exiting"))
        return run_case(argv[1], argc);
    /* The allocator created its thread-exit key at its first call, just
     * now, before this one: its destructor runs first in each round. */
    static pthread_key_t key;
    exiting_case = argv[1];
    exiting_argc = argc;
    if (pthread_key_create(&key, run_while_exiting) != 0)
        return 3;
    pthread_t t;
    if (pthread_create(&t, NULL, exiting_thread, &key) != 0)
        return 3;
    pthread_join(t, NULL);
    return 4; /* run_while_exiting exits */
}
