/* Double free where the first free came from another thread (the block sits
 * on its slab's remote list) and the owner frees it again. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *volatile shared;

static void *first_free(void *arg) {
    (void)arg;
    free(shared);
    return NULL;
}

int main(void) {
    char *volatile a = malloc(3000);
    char *volatile keep = malloc(3000); /* keeps the slab in use */
    if (!a || !keep)
        return 2;
    a[0] = 1;
    keep[0] = 2;
    printf("%p\n", (void *)a);
    fflush(stdout);
    shared = a;
    pthread_t t;
    if (pthread_create(&t, NULL, first_free, NULL) != 0)
        return 3;
    pthread_join(t, NULL);
    free(a);
    puts("survived");
    free(keep);
    return 0;
}
