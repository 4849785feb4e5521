/* Free of a slot that was never handed out: q = p + 16384 for p = malloc(16)
 * is the start of a 16-byte slot of p's 64 KiB slab (p is among the first few
 * hundred 16-byte blocks of this process, so q stays inside the slab), but a
 * slab carves its slots a page at a time as they are needed, so q's slot was
 * never carved: neither an interior pointer nor a double free. glibc stops
 * this with "free(): invalid pointer"; accepted, the slot would later be
 * handed out twice.
 *
 *   owner       the thread that owns p's slab frees q (the free fast path)
 *   remote      another thread that has allocated before frees q (the CAS
 *               onto the remote list, `free_slow`)
 *   remote_new  another thread whose first call is that free (the slow path
 *               that creates its heap, `free_unowned`)
 *   cancel      as remote_new, in a thread with a cancellation pending: the
 *               message is written (write(2) is a cancellation point)
 *               and the process stopped, not the thread cancelled
 *   usable      malloc_usable_size(q)
 *   realloc     realloc(q, 20), which stays in the class if it were valid */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *volatile q;

static void *free_q(void *how) {
    if (how == (void *)2)
        pthread_cancel(pthread_self()); /* deferred: pending until a cancellation point */
    if (how == (void *)1) {
        void *volatile r = malloc(100);
        free(r);
    }
    free(q);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "owner";
    char *volatile p = malloc(16);
    if (!p)
        return 2;
    p[0] = 1;
    q = p + 16384;
    printf("%p\n", (void *)q);
    fflush(stdout);
    if (!strcmp(mode, "owner")) {
        free(q);
    } else if (!strcmp(mode, "remote") || !strcmp(mode, "remote_new") || !strcmp(mode, "cancel")) {
        void *how = !strcmp(mode, "remote") ? (void *)1 : !strcmp(mode, "cancel") ? (void *)2 : NULL;
        pthread_t t;
        if (pthread_create(&t, NULL, free_q, how) != 0)
            return 3;
        pthread_join(t, NULL);
    } else if (!strcmp(mode, "usable")) {
        printf("usable %zu\n", malloc_usable_size(q));
    } else if (!strcmp(mode, "realloc")) {
        q = realloc(q, 20);
    } else {
        return 4;
    }
    puts("survived");
    return 0;
}
