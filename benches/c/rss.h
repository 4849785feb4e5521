/*
 * rss_kib(): the resident size of this process in KiB, from
 * /proc/self/statm with open/read/close: no stdio, no allocation, so a
 * program may call it while it promises not to call the allocator.
 */
#ifndef BENCH_RSS_H
#define BENCH_RSS_H
#include <fcntl.h>
#include <unistd.h>

static long rss_kib(void) {
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    long resident = 0;
    int i = 0;
    while (i < n && buf[i] != ' ')
        i++;
    for (i++; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
        resident = resident * 10 + (buf[i] - '0');
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}
#endif
