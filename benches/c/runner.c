/*
 * runner: runs one benchmark process and prints what it cost.
 *
 *   runner [-t TIMEOUT_S] [-o RESULT_FILE] [-e NAME=VALUE]... -- PROGRAM ARGS...
 *
 * The -e variables (LD_PRELOAD among them) are set in the child only, so the
 * runner itself always runs on glibc's malloc. Prints one line on stdout, or
 * appends it to RESULT_FILE:
 *
 *   wall_s user_s sys_s maxrss_kib status
 *
 * where status is "ok", "exit:N", "signal:N" or "timeout". The child's
 * stdout and stderr are inherited. Wall time comes from CLOCK_MONOTONIC
 * around fork/wait; CPU time and peak resident memory from wait4's rusage.
 */
#define _GNU_SOURCE
#include "bench.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double tv_s(struct timeval tv) {
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static volatile sig_atomic_t timed_out;
static pid_t child;

static void on_alarm(int sig) {
    (void)sig;
    timed_out = 1;
    kill(child, SIGKILL);
}

static void usage(void) {
    fprintf(stderr, "usage: runner [-t TIMEOUT_S] [-o RESULT_FILE] [-e NAME=VALUE]... -- PROGRAM ARGS...\n");
    exit(2);
}

int main(int argc, char **argv) {
    double timeout_s = 0;
    char *envs[64];
    int nenv = 0;
    const char *result_file = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) {
            timeout_s = atof(argv[++i]);
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            result_file = argv[++i];
        } else if (strcmp(argv[i], "-e") == 0 && i + 1 < argc && nenv < 64) {
            envs[nenv++] = argv[++i];
        } else {
            usage();
        }
    }
    if (i >= argc)
        usage();

    double start = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("runner: fork");
        return 2;
    }
    if (pid == 0) {
        for (int k = 0; k < nenv; k++)
            if (putenv(envs[k]) != 0)
                _exit(126);
        execvp(argv[i], &argv[i]);
        fprintf(stderr, "runner: cannot run %s: %s\n", argv[i], strerror(errno));
        _exit(127);
    }

    if (timeout_s > 0) {
        child = pid;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 0}, {(time_t)timeout_s, (suseconds_t)((timeout_s - (time_t)timeout_s) * 1e6)}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    int status = 0;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            perror("runner: wait4");
            return 2;
        }
    }
    double wall = now_s() - start;

    char st[32];
    if (timed_out)
        snprintf(st, sizeof st, "timeout");
    else if (WIFSIGNALED(status))
        snprintf(st, sizeof st, "signal:%d", WTERMSIG(status));
    else if (WEXITSTATUS(status) != 0)
        snprintf(st, sizeof st, "exit:%d", WEXITSTATUS(status));
    else
        snprintf(st, sizeof st, "ok");
    FILE *out = stdout;
    if (result_file && !(out = fopen(result_file, "a"))) {
        perror("runner: result file");
        return 2;
    }
    fprintf(out, "%.6f %.6f %.6f %ld %s\n", wall, tv_s(ru.ru_utime), tv_s(ru.ru_stime), ru.ru_maxrss, st);
    return fclose(out) == 0 ? 0 : 2;
}
