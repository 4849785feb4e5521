/* Prints how many of 24 consecutive 2500-byte allocations from a fresh slab
 * landed in the next slot (2560 bytes further) of the one before. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    char *p[25];
    int next_slot = 0;
    for (int i = 0; i < 25; i++) p[i] = malloc(2500);
    for (int i = 1; i < 25; i++) next_slot += p[i] == p[i - 1] + 2560;
    printf("%d\n", next_slot);
    for (int i = 0; i < 25; i++) free(p[i]);
    return 0;
}
