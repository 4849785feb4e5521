/* fork from a signal handler in a single-threaded process: main forks
 * NFORKS children in a loop and allocates between forks, while a timer
 * signal's handler also forks (POSIX lists fork as async-signal-safe), so
 * it interrupts main's fork, its pthread_atfork handlers and its malloc.
 * Children of main allocate and free; children of the handler only _exit.
 * Prints "forks <n> ok, <m> from the handler". */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NFORKS = 400 };

static volatile sig_atomic_t handler_forks;

static void on_timer(int sig) {
    (void)sig;
    int saved = errno;
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid > 0) handler_forks++;
    errno = saved;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_timer;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    int failures = 0;
    for (int k = 0; k < NFORKS; k++) {
        void *keep[16];
        for (int i = 0; i < 16; i++) {
            keep[i] = malloc(24 + (size_t)(k * 16 + i) % 3000);
            if (!keep[i]) abort();
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            struct itimerval off = {{0, 0}, {0, 0}};
            setitimer(ITIMER_REAL, &off, NULL);
            for (int i = 0; i < 16; i++) free(keep[i]);
            void *p = malloc(100);
            if (!p) _exit(2);
            free(p);
            _exit(0);
        }
        for (int i = 0; i < 16; i++) free(keep[i]);
        int status;
        while (waitpid(pid, &status, 0) != pid)
            if (errno != EINTR) {
                perror("waitpid");
                return 1;
            }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failures++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    while (wait(NULL) > 0 || errno == EINTR) {
    }
    if (failures) {
        fprintf(stderr, "%d children failed\n", failures);
        return 1;
    }
    printf("forks %d ok, %d from the handler\n", NFORKS, (int)handler_forks);
    return 0;
}
