/* Many short-lived threads: NTHREADS threads, WAVE at a time, each allocating
 * blocks of many classes; each thread frees half of them and returns the rest
 * to main, which verifies and frees them after the thread has exited. Prints
 * the resident size at the end so the test can see that the slabs of dead
 * threads were reused rather than leaked. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NTHREADS = 2000, WAVE = 4, PER = 64 };

struct result {
    int id;
    unsigned char *kept[PER / 2];
    size_t size[PER / 2];
};

static void die(const char *what) {
    fprintf(stderr, "FAIL: %s\n", what);
    exit(1);
}

static size_t size_of(int id, int i) { return (i == 0) ? 50000 + (size_t)id : 1 + (size_t)(i * 67 + id) % 2500; }

static void *worker(void *arg) {
    struct result *r = arg;
    unsigned char *p[PER];
    for (int i = 0; i < PER; i++) {
        size_t n = size_of(r->id, i);
        p[i] = malloc(n);
        if (!p[i]) die("malloc");
        memset(p[i], (r->id + i) & 0xff, n);
    }
    for (int i = 0; i < PER; i++) {
        if (i % 2) {
            free(p[i]);
        } else {
            r->kept[i / 2] = p[i];
            r->size[i / 2] = size_of(r->id, i);
        }
    }
    return r;
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

int main(void) {
    long verified = 0;
    for (int base = 0; base < NTHREADS; base += WAVE) {
        pthread_t th[WAVE];
        struct result *res[WAVE];
        for (int k = 0; k < WAVE; k++) {
            res[k] = malloc(sizeof(struct result));
            if (!res[k]) die("malloc");
            res[k]->id = base + k;
            if (pthread_create(&th[k], NULL, worker, res[k]) != 0) die("pthread_create");
        }
        for (int k = 0; k < WAVE; k++) {
            void *ret;
            if (pthread_join(th[k], &ret) != 0 || ret != res[k]) die("pthread_join");
            struct result *r = res[k];
            for (int j = 0; j < PER / 2; j++) {
                for (size_t b = 0; b < r->size[j]; b += 7)
                    if (r->kept[j][b] != (unsigned char)((r->id + 2 * j) & 0xff)) die("block of a dead thread changed");
                free(r->kept[j]);
                verified++;
            }
            free(r);
        }
    }
    printf("threads %d verified %ld rss_kib %ld\n", NTHREADS, verified, rss_kib());
    return 0;
}
