/* A process that is not slubmalloc but exports a `slubmalloc_anchor` of its
 * own making, laid out as version 5 of src/anchor.rs, over an empty registry
 * (no live heap, zero counters, no per-CPU sheaves): what slubtop does when the anchor says
 * something it must refuse (tests/processes/slubtop.rs).
 *
 *   slubtop_crafted_anchor still     generation even and still: a valid,
 *                                    empty snapshot
 *   slubtop_crafted_anchor odd       generation odd for good (a registry
 *                                    change that never ends)
 *   slubtop_crafted_anchor racing    a thread changes the registry without
 *                                    end: odd, threads_alive 7, even 0
 *                                    (7 is only ever seen mid-change)
 *   slubtop_crafted_anchor loop      the live list leads back to itself (as
 *                                    a heap reused while it is walked may)
 *   slubtop_crafted_anchor v999      layout version 999 (a newer slubmalloc)
 *
 * Writes "ready", then reads stdin until EOF. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

enum { CLASSES = 64, EVENTS = 25, CLASS_HEAP = 576 };

struct registry {
    void *live;
    uint64_t retired[CLASSES][EVENTS];
    uint64_t threads_alive, threads_exited;
};

struct anchor {
    char magic[8];
    uint32_t version, bytes, num_classes, events;
    uint64_t slab_bytes, segment_bytes;
    const uint32_t *class_bytes;
    _Atomic uint64_t *generation;
    struct registry *registry;
    uint32_t registry_live, registry_retired, registry_threads_alive, registry_threads_exited;
    void **orphan_heap, **prof_heap;
    uint32_t heap_next, class_heap_bytes, class_heap_counters, node_bytes;
    void *nodes;
    uint32_t node_fields[9];
    uint64_t *globals[19];
    void **cpu_regions;
    uint64_t *cpu_bound;
    const uint32_t *cpu_class_begin;
    uint32_t cpu_region_capacity;
};

_Static_assert(sizeof(struct anchor) == 344, "version 5 is 344 bytes");

static uint32_t class_bytes[CLASSES];
static _Atomic uint64_t generation;
static struct registry registry;
/* One empty heap: 64 class heaps of 576 bytes and the one without a
 * sheaf, then the `next` link. */
static uint64_t heap[(CLASSES + 1) * CLASS_HEAP / 8 + 1];
static void *orphan = heap, *prof = heap;
static uint64_t nodes[CLASSES * 10];
static uint64_t zero;
/* The fallback's: no table of regions. */
static void *no_regions;
static uint32_t class_begin[CLASSES];

__attribute__((used)) struct anchor slubmalloc_anchor = {
    {'S', 'L', 'U', 'B', 'A', 'N', 'C', 'H'}, 5, 344, CLASSES, EVENTS,
    65536, 4 << 20,
    class_bytes, &generation, &registry,
    __builtin_offsetof(struct registry, live), __builtin_offsetof(struct registry, retired),
    __builtin_offsetof(struct registry, threads_alive), __builtin_offsetof(struct registry, threads_exited),
    &orphan, &prof,
    (CLASSES + 1) * CLASS_HEAP, CLASS_HEAP, 0, 80,
    nodes,
    {0, 8, 16, 24, 32, 40, 48, 56, 64},
    {&zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero, &zero,
     &zero, &zero, &zero},
    &no_regions, &zero, class_begin, 0,
};

/* Each change as the allocator's `change_registry` makes it: odd, the
 * writes, even; most of the time mid-change, so that a read that finds the
 * generation even has its next read land mid-change. */
static void *change_for_ever(void *arg) {
    (void)arg;
    for (uint64_t g = 0;; g += 2) {
        atomic_store_explicit(&generation, g + 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        /* volatile: the compiler must not drop a store it sees overwritten. */
        *(volatile uint64_t *)&registry.threads_alive = 7;
        for (volatile int i = 0; i < 2000; i++) {
        }
        *(volatile uint64_t *)&registry.threads_alive = 0;
        atomic_store_explicit(&generation, g + 2, memory_order_release);
        for (volatile int i = 0; i < 200; i++) {
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    for (int i = 0; i < CLASSES; i++)
        class_bytes[i] = 16 * (i + 1);
    const char *mode = argc > 1 ? argv[1] : "still";
    if (strcmp(mode, "odd") == 0) {
        generation = 1;
    } else if (strcmp(mode, "racing") == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, change_for_ever, NULL) != 0)
            return 3;
    } else if (strcmp(mode, "loop") == 0) {
        registry.live = heap;
        heap[(CLASSES + 1) * CLASS_HEAP / 8] = (uintptr_t)heap;
    } else if (strcmp(mode, "v999") == 0) {
        slubmalloc_anchor.version = 999;
    }
    if (write(1, "ready\n", 6) != 6)
        return 5;
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}
