/* Per-thread ring buffers of fixed-size records.  Plain C: no PyObject*.
 * Each ring is written by exactly one thread (its owner, holding the GIL),
 * so there is no lock; overflow overwrites the oldest record. */
#ifndef FT_RING_H
#define FT_RING_H

#include <stddef.h>
#include <stdint.h>

enum {
    FT_REC_CALL = 0,        /* Python frame entered (call or resume) */
    FT_REC_RETURN = 1,      /* Python frame left (return, yield, unwind) */
    FT_REC_C_CALL = 2,
    FT_REC_C_RETURN = 3,
    FT_REC_C_EXCEPTION = 4,
};

typedef struct {
    int64_t ts;       /* CLOCK_MONOTONIC ns */
    uint32_t func;    /* index in the tracer's function table */
    uint32_t kind;    /* FT_REC_* */
} ft_record;

_Static_assert(sizeof(ft_record) == 16, "a record must stay 16 bytes");

struct ft_prefault;

typedef struct {
    ft_record *buf;     /* NULL until the thread's first event */
    uint64_t capacity;  /* records */
    uint64_t pos;       /* next slot to write */
    uint64_t written;   /* records ever written */
    struct ft_prefault *prefault;  /* background fault-in of the part past
                                      the first pages, or NULL */
} ft_ring;

/* Returns 0, or -1 (no memory) leaving the ring empty.  The first pages
 * are faulted in before it returns, the rest by a background thread, so
 * that the writer takes no page fault. */
int ft_ring_alloc(ft_ring *ring, uint64_t capacity);
/* Stops the background fault-in (waiting for at most one chunk of it) and
 * unmaps.  Never blocks on the GIL. */
void ft_ring_free(ft_ring *ring);

static inline void
ft_ring_push(ft_ring *ring, int64_t ts, uint32_t func, uint32_t kind)
{
    ft_record *rec = &ring->buf[ring->pos];
    rec->ts = ts;
    rec->func = func;
    rec->kind = kind;
    if (++ring->pos == ring->capacity) {
        ring->pos = 0;
    }
    ring->written++;
}

/* Records overwritten by newer ones. */
static inline uint64_t
ft_ring_overwritten(const ft_ring *ring)
{
    return ring->written > ring->capacity ? ring->written - ring->capacity : 0;
}

static inline uint64_t
ft_ring_count(const ft_ring *ring)
{
    return ring->written < ring->capacity ? ring->written : ring->capacity;
}

/* The i-th retained record, oldest first (0 <= i < ft_ring_count()). */
static inline const ft_record *
ft_ring_at(const ft_ring *ring, uint64_t i)
{
    uint64_t first = ring->written > ring->capacity ? ring->pos : 0;
    uint64_t idx = first + i;
    if (idx >= ring->capacity) {
        idx -= ring->capacity;
    }
    return &ring->buf[idx];
}

#endif /* FT_RING_H */
