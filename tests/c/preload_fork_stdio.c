/* fork while other threads use stdio (glibc bug 19431's shape): READERS
 * threads open, read and close a file and allocate; one thread calls
 * fflush(NULL) without pause; main forks NFORKS children, each of which
 * allocates, frees and exits. glibc's fork takes the stdio list lock after
 * the pthread_atfork prepare handlers have run, so an allocator that holds
 * its locks from prepare until the fork closes a cycle: a reader holds a
 * FILE lock inside fopen and waits in malloc, the flusher holds the list
 * lock and waits for that FILE, fork waits for the list lock. The readers
 * also allocate large blocks under flockfile, so that the allocator's
 * locked slow paths run inside stdio's locks. Prints
 * "forks <n> ok". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { READERS = 4, NFORKS = 300 };

static atomic_int stop;
static atomic_long opened;
static const char *path;

static void *reader(void *arg) {
    (void)arg;
    char line[256];
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        FILE *f = fopen(path, "r");
        if (!f) abort();
        char *copy = NULL;
        /* A block above the size classes while holding the FILE lock: the
         * allocator's slow paths run under stdio's locks. */
        flockfile(f);
        char *big = malloc(40000 + (size_t)(atomic_load(&opened) % 64) * 4096);
        if (!big) abort();
        big[0] = 1;
        free(big);
        funlockfile(f);
        while (fgets(line, sizeof line, f)) {
            free(copy);
            copy = strdup(line);
            if (!copy) abort();
        }
        free(copy);
        fclose(f);
        atomic_fetch_add_explicit(&opened, 1, memory_order_relaxed);
    }
    return NULL;
}

static void *flusher(void *arg) {
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) fflush(NULL);
    return NULL;
}

int main(int argc, char **argv) {
    path = argc > 1 ? argv[1] : "/proc/self/maps";
    pthread_t th[READERS + 1];
    for (int i = 0; i < READERS; i++) pthread_create(&th[i], NULL, reader, NULL);
    pthread_create(&th[READERS], NULL, flusher, NULL);
    int failures = 0;
    for (int k = 0; k < NFORKS; k++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            void *p[64];
            for (int i = 0; i < 64; i++) {
                p[i] = malloc(16 + (size_t)i * 40);
                if (!p[i]) _exit(2);
                memset(p[i], i, 16);
            }
            for (int i = 0; i < 64; i++) free(p[i]);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid) {
            perror("waitpid");
            return 1;
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failures++;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i <= READERS; i++) pthread_join(th[i], NULL);
    if (failures) {
        fprintf(stderr, "%d children failed\n", failures);
        return 1;
    }
    printf("forks %d ok, files opened meanwhile %ld\n", NFORKS, atomic_load(&opened));
    return 0;
}
