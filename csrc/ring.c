/* Ring buffer storage. */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

int
ft_ring_alloc(ft_ring *ring, uint64_t capacity)
{
    memset(ring, 0, sizeof(*ring));
    if (capacity == 0 || capacity > SIZE_MAX / sizeof(ft_record)) {
        return -1;
    }
    /* Plain malloc: the pages are touched as the ring fills, so a thread
     * that records little costs little resident memory. */
    ring->buf = malloc((size_t)capacity * sizeof(ft_record));
    if (ring->buf == NULL) {
        return -1;
    }
    ring->capacity = capacity;
    return 0;
}

void
ft_ring_free(ft_ring *ring)
{
    free(ring->buf);
    memset(ring, 0, sizeof(*ring));
}
