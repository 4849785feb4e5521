/* Double free where the second free comes from another thread: the main
 * thread frees a and b, then a second thread frees a again. 3000 bytes: a
 * class that thread creation itself is unlikely to allocate from, so `a`
 * stays free (and unused) until the second free. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *volatile shared;

static void *second_free(void *arg) {
    (void)arg;
    free(shared);
    return NULL;
}

int main(void) {
    char *volatile a = malloc(3000);
    char *volatile b = malloc(3000);
    if (!a || !b)
        return 2;
    a[0] = 1;
    b[0] = 2;
    printf("%p\n", (void *)a);
    fflush(stdout);
    shared = a;
    free(a);
    free(b);
    pthread_t t;
    if (pthread_create(&t, NULL, second_free, NULL) != 0)
        return 3;
    pthread_join(t, NULL);
    puts("survived");
    return 0;
}
