/* Per-thread ring buffers of 8-byte records.  Plain C: no PyObject*.
 * Each ring is written by exactly one thread (its owner, holding the GIL),
 * so there is no lock; overflow overwrites the oldest record.
 *
 * A ring starts as one page from the heap; its owner grows it, before its
 * first wrap, from the slow path that the inline push falls into when the
 * ring is full (ft_ring_grow()): the first growth moves it to a mapping
 * that reserves address space for all `reserve` words, committed a chunk
 * at a time, faulted in ahead so that the writer takes no page fault.  A ring that stops growing wraps at
 * its current capacity.  Who decides how far a ring may grow (the tracer's
 * memory bound) is not this file's business: see budget.c. */
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

/* A record as replay reads it back. */
typedef struct {
    int64_t ts;       /* ticks (ns once converted) */
    uint32_t func;    /* index in the tracer's function table */
    uint32_t kind;    /* FT_REC_* */
} ft_record;

/* The ring stores a record in one 8-byte word: kind in bits 0-2, the
 * function id in bits 3-23, and in bits 24-63 the ticks since the thread's
 * previous record (or the ring's origin).  A record whose id or delta does
 * not fit (an id past 2**21, a thread idle for minutes) takes two words, an
 * escape: a header (kind bits FT_WORD_ESCAPE, bit 3 clear, its kind in bits
 * 4-6, its id in bits 32-63) and then a delta word (kind bits
 * FT_WORD_ESCAPE, bit 3 set, a signed 60-bit delta in bits 4-63).  Deltas
 * chain every record to ring->last, the time of the newest one, so the
 * oldest retained record's time is known after any overwriting. */
#define FT_WORD_ESCAPE 7u
/* The most one growth step commits (ft_ring_next_capacity()). */
#define FT_RING_MAX_STEP ((size_t)1 << 20)
/* The unit of a ring's memory (a page on the platforms we build for). */
#define FT_RING_PAGE_BYTES ((size_t)4096)
/* A ring's first chunk, on the heap (ft_ring_alloc()). */
#define FT_RING_FIRST_BYTES FT_RING_PAGE_BYTES
#define FT_WORD_ID_BITS 21
#define FT_WORD_ID_LIMIT ((uint32_t)1 << FT_WORD_ID_BITS)
#define FT_WORD_DELTA_BITS 40
#define FT_WORD_DELTA_SHIFT (64 - FT_WORD_DELTA_BITS)

typedef struct {
    uint64_t *buf;      /* NULL until the thread's first event */
    uint64_t capacity;  /* words committed: where the ring wraps */
    uint64_t pos;       /* next word to write */
    uint64_t wraps;     /* times pos went back to 0 */
    uint64_t escapes;   /* two-word records ever written */
    int64_t last;       /* ticks of the newest record (the origin before) */
    uint64_t reserve;   /* words the ring may grow to (>= capacity);
                           == capacity once it may grow no more */
    uint64_t discarded; /* records thrown away by ft_ring_discard() */
    size_t mapped;      /* bytes of address space held, or 0: buf is from
                           the heap (the first chunk; always in sanitizer
                           builds) */
    /* An ended thread's records, packed (ft_ring_pack()): buf is NULL
     * then, and the fields above that count words are 0. */
    uint8_t *packed;
    size_t packed_bytes;
    uint64_t packed_records;
    uint64_t packed_lost;  /* records overwritten before packing */
    int64_t packed_first;  /* ticks of the first packed record */
    /* A copy of the records since a window's start (ft_ring_copy_since()):
     * whether the ring left out records before them, which then are
     * neither retained nor lost. */
    uint8_t skipped;
} ft_ring;

/* Returns 0, or -1 (no memory) leaving the ring empty.  reserve: the most
 * words it may grow to; origin: ticks no record precedes (the first
 * record's delta is from it).  Takes FT_RING_FIRST_BYTES (or all of a
 * smaller ring) from the heap, cleared: no system call, whatever reserve. */
int ft_ring_alloc(ft_ring *ring, uint64_t reserve, int64_t origin);
/* Unmaps.  Leaves the ring empty (buf NULL). */
void ft_ring_free(ft_ring *ring);

/* Bytes of memory the ring holds (committed), 0 for an empty ring. */
size_t ft_ring_bytes(const ft_ring *ring);
/* Whether the ring can still grow: it never wrapped and is below its
 * reserve. */
static inline int
ft_ring_can_grow(const ft_ring *ring)
{
    return ring->wraps == 0 && ring->capacity < ring->reserve;
}
/* The capacity the next growth step would give (the committed size
 * doubled, by at most FT_RING_MAX_STEP bytes, within the reserve). */
uint64_t ft_ring_next_capacity(const ft_ring *ring);
/* Commits words up to capacity (> ring->capacity, <= ring->reserve; only
 * while ft_ring_can_grow()), faulted in.  0, or -1 (no memory) leaving the
 * ring as it was. */
int ft_ring_grow(ft_ring *ring, uint64_t capacity);
/* The ring grows no more: it wraps at its current capacity from now on. */
static inline void
ft_ring_stop_growing(ft_ring *ring)
{
    ring->reserve = ring->capacity;
}
/* For a ring whose writer ended: stops its growth and gives back what
 * holds no record (the reserve, and past its newest word when it never
 * wrapped: whole pages of a mapping, bytes of a heap chunk).  Its records
 * read back as before. */
void ft_ring_trim(ft_ring *ring);
/* For a ring whose writer ended: re-encodes its retained records in
 * variable-length bytes (about 3-4 a record instead of 8), frees its words.
 * They read back as before; the ring takes no more records (a new ring
 * must be allocated: ft_ring_discard() the packed one first).  0, or -1 (no
 * memory) leaving the ring as it was. */
int ft_ring_pack(ft_ring *ring);
/* A copy of src's records in dst (on the heap, growing no more), read
 * back as src's are now: for a snapshot of a ring whose writer goes on.
 * 0, or -1 (no memory) leaving dst empty. */
int ft_ring_copy(ft_ring *dst, const ft_ring *src);
/* The same of the records src took since it had written `since` words
 * (ft_ring_written() then), when all of them are still there: dst holds
 * them alone, and the records before count as skipped (outside the copy's
 * window), not lost.  0; 1 when some were overwritten, or src was packed
 * or discarded since (dst untouched: copy it all); -1 (no memory) leaving
 * dst empty. */
int ft_ring_copy_since(ft_ring *dst, const ft_ring *src, uint64_t since,
                       uint64_t discarded_then);
/* Whether the ring holds records (in words or packed). */
static inline int
ft_ring_holds(const ft_ring *ring)
{
    return ring->buf != NULL || ring->packed != NULL;
}
/* Frees the ring's memory, counting its retained records as discarded:
 * it reads back empty, as a ring that overflowed (the records before its
 * oldest are unknown), and ft_ring_overwritten() counts them. */
void ft_ring_discard(ft_ring *ring);

#if defined(__GNUC__) || defined(__clang__)
#  define FT_RING_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#  define FT_RING_UNLIKELY(x) (x)
#endif

/* The two-word form (ring.c): out of line, it is rare. */
int ft_ring_push_escape(ft_ring *ring, int64_t ts, uint32_t func,
                        uint32_t kind);

/* The one-word record: delta < 2**FT_WORD_DELTA_BITS, func <
 * FT_WORD_ID_LIMIT. */
static inline uint64_t
ft_ring_word(uint64_t delta, uint32_t func, uint32_t kind)
{
    return delta << FT_WORD_DELTA_SHIFT | (uint64_t)func << 3 | kind;
}

/* For func < FT_WORD_ID_LIMIT.  Returns 1 when the ring wrapped (back to
 * its first word), else 0. */
static inline int
ft_ring_push_narrow(ft_ring *ring, int64_t ts, uint32_t func, uint32_t kind)
{
    uint64_t delta = (uint64_t)ts - (uint64_t)ring->last;
    /* A negative delta is huge unsigned: it takes the escape too. */
    if (FT_RING_UNLIKELY(delta >> FT_WORD_DELTA_BITS)) {
        return ft_ring_push_escape(ring, ts, func, kind);
    }
    /* Fields read before the store: through a uint64_t pointer it could
     * alias them, and they would be read again. */
    uint64_t pos = ring->pos;
    uint64_t capacity = ring->capacity;
    ring->last = ts;
    ring->buf[pos] = ft_ring_word(delta, func, kind);
    if (FT_RING_UNLIKELY(++pos == capacity)) {
        ring->pos = 0;
        ring->wraps++;
        return 1;
    }
    ring->pos = pos;
    return 0;
}

/* The common case, inline and branch-light: an id and a delta that fit one
 * word, and a ring already allocated (capacity 0 before) with room before
 * its last word.  Returns 1 when stored; 0 with nothing written, and the
 * caller takes the general path (ft_ring_push() and what goes with it). */
static inline int
ft_ring_try_push(ft_ring *ring, int64_t ts, uint32_t func, uint32_t kind)
{
    uint64_t delta = (uint64_t)ts - (uint64_t)ring->last;
    uint64_t pos = ring->pos;
    if (FT_RING_UNLIKELY((func >= FT_WORD_ID_LIMIT)
                         | ((delta >> FT_WORD_DELTA_BITS) != 0)
                         | (pos + 1 >= ring->capacity))) {
        return 0;
    }
    uint64_t *buf = ring->buf;
    ring->last = ts;
    buf[pos] = ft_ring_word(delta, func, kind);
    ring->pos = pos + 1;
    return 1;
}

/* Any record; returns 1 when the ring wrapped. */
static inline int
ft_ring_push(ft_ring *ring, int64_t ts, uint32_t func, uint32_t kind)
{
    if (FT_RING_UNLIKELY(func >= FT_WORD_ID_LIMIT)) {
        return ft_ring_push_escape(ring, ts, func, kind);
    }
    return ft_ring_push_narrow(ring, ts, func, kind);
}

/* Words ever written. */
static inline uint64_t
ft_ring_written(const ft_ring *ring)
{
    return ring->wraps * ring->capacity + ring->pos;
}

/* Reads a ring's retained records back, oldest first. */
typedef struct {
    const ft_ring *ring;
    uint64_t next;    /* words read, from the oldest retained */
    uint64_t words;   /* words retained */
    uint64_t first;   /* where the oldest retained word is */
    uint64_t ts;      /* time of the previous record (mod 2**64) */
    const uint8_t *at, *end;  /* a packed ring: the next record's bytes */
} ft_ring_reader;

/* O(words): sums the retained deltas back from ring->last. */
void ft_ring_reader_init(ft_ring_reader *reader, const ft_ring *ring);
/* The next record into *rec: 1, or 0 past the newest. */
int ft_ring_read(ft_ring_reader *reader, ft_record *rec);

/* Whether records were overwritten by newer ones (or discarded). */
static inline int
ft_ring_overflowed(const ft_ring *ring)
{
    return ft_ring_written(ring) > ring->capacity || ring->discarded != 0
           || ring->packed_lost != 0 || ring->skipped;
}

/* Words retained, or a packed ring's records: an upper bound on the
 * records it reads back. */
static inline uint64_t
ft_ring_retained(const ft_ring *ring)
{
    uint64_t written = ft_ring_written(ring);
    return (written < ring->capacity ? written : ring->capacity)
           + ring->packed_records;
}

/* Sets marks[id] for the function id of every retained record (ids below
 * nmarks; a header whose record lost its delta word counts too). */
void ft_ring_mark_ids(const ft_ring *ring, uint8_t *marks, uint32_t nmarks);

/* Records overwritten by newer ones or discarded (O(words) when the ring
 * overflowed and holds escapes, else O(1)). */
uint64_t ft_ring_overwritten(const ft_ring *ring);

#endif /* FT_RING_H */
