/* Holds exactly K live blocks of SIZE bytes when it exits, for the statistics
 * report chosen by SLUBMALLOC_STATS (tests/processes/stats_dump.rs).
 *
 * usage: stats_hold K SIZE [quiet]
 *
 * It allocates 2K blocks, fills each with its own byte pattern, frees every
 * second one (so the class sees frees as well as allocations), checks that
 * the K it keeps still hold their patterns, prints a checksum on stdout
 * (unless "quiet") and returns from main with the K blocks still live. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 8192

/* Global, so the blocks are reachable (and live) until the process exits. */
static unsigned char *blocks[2 * MAX_BLOCKS];

static unsigned char pattern(long i) { return (unsigned char)(i * 7 + 1); }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s K SIZE [quiet]\n", argv[0]);
        return 2;
    }
    long k = strtol(argv[1], NULL, 10);
    long size = strtol(argv[2], NULL, 10);
    int quiet = argc > 3 && strcmp(argv[3], "quiet") == 0;
    if (k < 0 || k > MAX_BLOCKS || size < 1) {
        fprintf(stderr, "bad K or SIZE\n");
        return 2;
    }
    for (long i = 0; i < 2 * k; i++) {
        blocks[i] = malloc((size_t)size);
        if (blocks[i] == NULL) {
            fprintf(stderr, "malloc(%ld) failed\n", size);
            return 3;
        }
        memset(blocks[i], pattern(i), (size_t)size);
    }
    for (long i = 1; i < 2 * k; i += 2) {
        free(blocks[i]);
        blocks[i] = NULL;
    }
    unsigned long checksum = 0;
    for (long i = 0; i < 2 * k; i += 2) {
        for (long j = 0; j < size; j++) {
            if (blocks[i][j] != pattern(i)) {
                fprintf(stderr, "block %ld byte %ld corrupted\n", i, j);
                return 4;
            }
        }
        checksum = checksum * 31 + blocks[i][0] + blocks[i][size - 1];
    }
    if (!quiet)
        printf("held %ld blocks of %ld bytes, checksum %lu\n", k, size, checksum);
    return 0;
}
