/* A process whose executable exports a `slubmalloc_anchor` of layout version
 * 999, as a slubmalloc newer than slubtop would: slubtop must name both
 * versions and stop (tests/processes/slubtop.rs). Writes "ready", then reads
 * stdin until EOF. */
#include <stdint.h>
#include <unistd.h>

struct anchor_header {
    char magic[8];
    uint32_t version, bytes, classes, events;
};

__attribute__((used)) const struct anchor_header slubmalloc_anchor = {
    {'S', 'L', 'U', 'B', 'A', 'N', 'C', 'H'}, 999, 24, 64, 11};

int main(void) {
    if (write(1, "ready\n", 6) != 6)
        return 5;
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}
