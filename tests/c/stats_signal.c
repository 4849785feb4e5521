/* A running multithreaded program asked for a statistics report by signal
 * (SLUBMALLOC_STATS_SIGNAL, tests/processes/stats_dump.rs).
 *
 * Starts THREADS workers that allocate and free in a loop, waits until each
 * has done some work, prints "ready" on stdout, then reads stdin until EOF.
 * The test sends the signal while the workers run and closes stdin to stop
 * the program, which then joins the workers and prints how many operations
 * they did. Exits 0 only if every worker ran and every block kept its data. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4
#define SLOTS 64

static atomic_int stop;
static atomic_int started;

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
    unsigned char *keep[SLOTS] = {0};
    size_t keep_size[SLOTS] = {0};
    unsigned long ops = 0;
    int announced = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        seed = seed * 1103515245u + 12345u;
        unsigned slot = (seed >> 8) % SLOTS;
        size_t size = 8 + (seed >> 16) % 3000;
        if (keep[slot] != NULL) {
            unsigned char want = (unsigned char)slot;
            if (keep[slot][0] != want || keep[slot][keep_size[slot] - 1] != want) {
                fprintf(stderr, "worker: block corrupted\n");
                exit(4);
            }
            free(keep[slot]);
        }
        keep[slot] = malloc(size);
        if (keep[slot] == NULL) {
            fprintf(stderr, "worker: malloc failed\n");
            exit(3);
        }
        keep[slot][0] = keep[slot][size - 1] = (unsigned char)slot;
        keep_size[slot] = size;
        if (++ops == 1000 && !announced) {
            announced = 1;
            atomic_fetch_add(&started, 1);
        }
    }
    for (int i = 0; i < SLOTS; i++)
        free(keep[i]);
    return (void *)(uintptr_t)ops;
}

int main(void) {
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++) {
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 3;
        }
    }
    while (atomic_load(&started) < THREADS)
        sched_yield();
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r == 0)
            break;
        if (r < 0 && errno != EINTR) {
            perror("read");
            return 5;
        }
    }
    atomic_store(&stop, 1);
    unsigned long total = 0;
    for (int i = 0; i < THREADS; i++) {
        void *ops;
        pthread_join(t[i], &ops);
        if ((uintptr_t)ops == 0)
            return 6;
        total += (uintptr_t)ops;
    }
    printf("stopped after %lu operations\n", total);
    return 0;
}
