/* What the test programs read of themselves in /proc, without allocating
 * (a malloc here would change what they measure). */
#ifndef PROC_SELF_H
#define PROC_SELF_H

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A number from a /proc file: the one after `key` (as in
 * /proc/self/status), or with no key the field-th of a space-separated line
 * (as in /proc/self/statm). -1 if the file cannot be read. */
static long status_field(const char *path, int field, const char *key) {
    char buf[4096];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    if (key) {
        char *p = strstr(buf, key);
        return p ? atol(p + strlen(key)) : -1;
    }
    char *p = buf;
    for (int i = 0; i < field; i++)
        p = strchr(p, ' ') + 1;
    return atol(p);
}

/* Resident KiB (4 KiB pages). */
static inline long rss_kib(void) { return status_field("/proc/self/statm", 1, NULL) * 4; }

/* Threads of the process, as the kernel counts them. */
static inline long thread_count(void) {
    return status_field("/proc/self/status", 0, "Threads:");
}

#endif
