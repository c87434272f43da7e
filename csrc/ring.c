/* Ring buffer storage. */
#define _DEFAULT_SOURCE  /* MAP_ANONYMOUS, madvise() under -std=c11 */
#include "ring.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Linux 5.14+: faults pages in, writable, in one call. */
#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#  define MADV_POPULATE_WRITE 23
#endif

static size_t
page_size(void)
{
    static size_t page;
    if (page == 0) {
        page = (size_t)sysconf(_SC_PAGESIZE);
    }
    return page;
}

static size_t
round_to_pages(size_t bytes)
{
    size_t page = page_size();
    return (bytes + page - 1) / page * page;
}

#if defined(__SANITIZE_ADDRESS__)
#  define FT_RING_MALLOC 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define FT_RING_MALLOC 1
#  endif
#endif

size_t
ft_ring_bytes(const ft_ring *ring)
{
    if (ring->buf == NULL) {
        return ring->packed_bytes;
    }
    size_t bytes = (size_t)ring->capacity * sizeof(uint64_t);
    return ring->mapped != 0 ? round_to_pages(bytes) : bytes;
}

#ifndef FT_RING_MALLOC
/* Makes [from, to) of buf (page-aligned offsets) writable and faults it
 * in, so that the writer takes no page fault there.  0, or -1. */
static int
commit(char *buf, size_t from, size_t to)
{
    if (to <= from) {
        return 0;
    }
    if (mprotect(buf + from, to - from, PROT_READ | PROT_WRITE) != 0) {
        return -1;
    }
    if (madvise(buf + from, to - from, MADV_POPULATE_WRITE) != 0) {
        /* Older kernels: touch the pages. */
        for (size_t off = from; off < to; off += page_size()) {
            ((volatile char *)buf)[off] = 0;
        }
    }
    return 0;
}
#endif

int
ft_ring_alloc(ft_ring *ring, uint64_t reserve, int64_t origin)
{
    memset(ring, 0, sizeof(*ring));
    ring->last = origin;
    if (reserve == 0 || reserve > (SIZE_MAX / 2) / sizeof(uint64_t)) {
        return -1;
    }
    /* The first chunk from the heap: a mapping of its own would cost four
     * system calls (measured ~40 us on a VM), more than a short thread's
     * whole recording.  Cleared, so that its pages are resident before the
     * writer comes. */
    uint64_t first = FT_RING_FIRST_BYTES / sizeof(uint64_t);
    if (first > reserve) {
        first = reserve;
    }
    ring->buf = malloc((size_t)first * sizeof(uint64_t));
    if (ring->buf == NULL) {
        return -1;
    }
    memset(ring->buf, 0, (size_t)first * sizeof(uint64_t));
    ring->capacity = first;
    ring->reserve = reserve;
    return 0;
}

void
ft_ring_free(ft_ring *ring)
{
    if (ring->mapped != 0) {
        munmap(ring->buf, ring->mapped);
    }
    else {
        free(ring->buf);
    }
    free(ring->packed);
    memset(ring, 0, sizeof(*ring));
}

int
ft_ring_copy(ft_ring *dst, const ft_ring *src)
{
    *dst = *src;
    dst->buf = NULL;
    dst->packed = NULL;
    dst->mapped = 0;
    if (src->buf != NULL) {
        /* Words past pos were never written unless the ring wrapped;
         * malloc'd and untouched, they take no memory. */
        size_t used = src->wraps ? src->capacity : src->pos;
        dst->buf = malloc((size_t)src->capacity * sizeof(uint64_t));
        if (dst->buf == NULL) {
            memset(dst, 0, sizeof(*dst));
            return -1;
        }
        memcpy(dst->buf, src->buf, used * sizeof(uint64_t));
        dst->reserve = dst->capacity;
    }
    if (src->packed != NULL) {
        dst->packed = malloc(src->packed_bytes ? src->packed_bytes : 1);
        if (dst->packed == NULL) {
            memset(dst, 0, sizeof(*dst));
            return -1;
        }
        memcpy(dst->packed, src->packed, src->packed_bytes);
    }
    return 0;
}

int
ft_ring_copy_since(ft_ring *dst, const ft_ring *src, uint64_t since,
                   uint64_t discarded_then)
{
    uint64_t written = ft_ring_written(src);
    if (src->buf == NULL || src->discarded != discarded_then
        || since > written || written - since > src->capacity) {
        return 1;
    }
    uint64_t n = written - since;
    memset(dst, 0, sizeof(*dst));
    dst->buf = malloc((size_t)(n + 1) * sizeof(uint64_t));
    if (dst->buf == NULL) {
        return -1;
    }
    /* Before its first wrap a ring's words are at their absolute
     * positions, and the capacity is fixed from then on: word w is at
     * w % capacity either way. */
    uint64_t from = since % src->capacity;
    uint64_t first = n < src->capacity - from ? n : src->capacity - from;
    memcpy(dst->buf, src->buf + from, (size_t)first * sizeof(uint64_t));
    memcpy(dst->buf + first, src->buf, (size_t)(n - first) * sizeof(uint64_t));
    dst->capacity = dst->reserve = n + 1;
    dst->pos = n;
    dst->last = src->last;
    dst->skipped = since != 0;
    return 0;
}

uint64_t
ft_ring_next_capacity(const ft_ring *ring)
{
    uint64_t step = ring->capacity;
    if (step > FT_RING_MAX_STEP / sizeof(uint64_t)) {
        step = FT_RING_MAX_STEP / sizeof(uint64_t);
    }
    uint64_t capacity = ring->capacity + step;
    return capacity < ring->reserve ? capacity : ring->reserve;
}

/* Moves a heap ring's words (it never wrapped: they are in order) to a
 * mapping reserving the whole of it, committed up to capacity.  0, or
 * -1. */
#ifndef FT_RING_MALLOC
static int
move_to_mapping(ft_ring *ring, uint64_t capacity)
{
    /* Address space only (PROT_NONE costs no memory, nor commit charge
     * under strict overcommit); committed a chunk at a time. */
    size_t bytes = round_to_pages((size_t)ring->reserve * sizeof(uint64_t));
    char *buf = mmap(NULL, bytes, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (buf == MAP_FAILED) {
        return -1;
    }
    if (commit(buf, 0, round_to_pages((size_t)capacity * sizeof(uint64_t)))
        < 0) {
        munmap(buf, bytes);
        return -1;
    }
    memcpy(buf, ring->buf, (size_t)ring->capacity * sizeof(uint64_t));
    free(ring->buf);
    ring->buf = (uint64_t *)buf;
    ring->mapped = bytes;
    return 0;
}
#endif

int
ft_ring_grow(ft_ring *ring, uint64_t capacity)
{
    if (ring->buf == NULL || !ft_ring_can_grow(ring)
        || capacity <= ring->capacity || capacity > ring->reserve) {
        return -1;
    }
#ifdef FT_RING_MALLOC
    /* Sanitizer builds: always on the heap, grown by realloc(), where
     * AddressSanitizer sees an overrun past the committed part.  Never
     * wrapped: the words are in order, realloc() keeps them. */
    uint64_t *buf = realloc(ring->buf, (size_t)capacity * sizeof(uint64_t));
    if (buf == NULL) {
        return -1;
    }
    ring->buf = buf;
#else
    if (ring->mapped == 0) {
        if (move_to_mapping(ring, capacity) < 0) {
            return -1;
        }
    }
    else if (commit((char *)ring->buf, ft_ring_bytes(ring),
                    round_to_pages((size_t)capacity * sizeof(uint64_t)))
             < 0) {
        return -1;
    }
#endif
    ring->capacity = capacity;
    return 0;
}

void
ft_ring_trim(ft_ring *ring)
{
    if (ring->buf == NULL) {
        return;
    }
    /* A ring that never wrapped needs its words up to pos only (one more:
     * pos stays below capacity). */
    uint64_t capacity = ring->capacity;
    if (ring->wraps == 0 && ring->pos + 1 < capacity) {
        capacity = ring->pos + 1;
    }
    if (ring->mapped == 0) {
        uint64_t *buf = realloc(ring->buf,
                                (size_t)capacity * sizeof(uint64_t));
        if (buf == NULL) {
            return;
        }
        ring->buf = buf;
    }
    else {
        /* Whole pages: the last one partly used stays. */
        size_t keep = round_to_pages((size_t)capacity * sizeof(uint64_t));
        if (keep < ring->mapped) {
            if (munmap((char *)ring->buf + keep, ring->mapped - keep) != 0) {
                return;
            }
            ring->mapped = keep;
        }
    }
    ring->capacity = capacity;
    ring->reserve = capacity;
}

void
ft_ring_discard(ft_ring *ring)
{
    if (!ft_ring_holds(ring)) {
        return;
    }
    /* Every record ever written: those overwritten before too. */
    uint64_t discarded = ring->discarded + ft_ring_written(ring)
                         - ring->escapes + ring->packed_records
                         + ring->packed_lost;
    int64_t last = ring->last;
    ft_ring_free(ring);
    ring->discarded = discarded;
    ring->last = last;
}

/* ---- the two-word form and reading back --------------------------------- */

#define DELTA_WORD_BIT ((uint64_t)1 << 3)
#define ESCAPE_DELTA_MAX (((int64_t)1 << 59) - 1)

/* 1 when the ring wrapped. */
static inline int
put_word(ft_ring *ring, uint64_t word)
{
    ring->buf[ring->pos] = word;
    if (++ring->pos == ring->capacity) {
        ring->pos = 0;
        ring->wraps++;
        return 1;
    }
    return 0;
}

int
ft_ring_push_escape(ft_ring *ring, int64_t ts, uint32_t func, uint32_t kind)
{
    int64_t delta = (int64_t)((uint64_t)ts - (uint64_t)ring->last);
    /* 2**59 ticks is years: only a clock gone wrong.  Clamped, the times
     * read back stay consistent with each other. */
    if (delta > ESCAPE_DELTA_MAX) {
        delta = ESCAPE_DELTA_MAX;
    }
    else if (delta < -ESCAPE_DELTA_MAX) {
        delta = -ESCAPE_DELTA_MAX;
    }
    int wrapped = put_word(ring, FT_WORD_ESCAPE | (uint64_t)(kind & 7) << 4
                                 | (uint64_t)func << 32);
    wrapped |= put_word(ring, FT_WORD_ESCAPE | DELTA_WORD_BIT
                              | (uint64_t)delta << 4);
    ring->escapes++;
    ring->last = (int64_t)((uint64_t)ring->last + (uint64_t)delta);
    return wrapped;
}

static inline uint64_t
retained_words(const ft_ring *ring)
{
    uint64_t written = ft_ring_written(ring);
    return written < ring->capacity ? written : ring->capacity;
}

/* Where the oldest retained word is: pos once the ring wrapped.  (Not
 * ft_ring_overflowed(): a ring adopted after a discard counts as
 * overflowed, its words starting at 0.) */
static inline uint64_t
first_word(const ft_ring *ring)
{
    return ft_ring_written(ring) > ring->capacity ? ring->pos : 0;
}

/* The i-th retained word, oldest first, of a ring whose oldest is at
 * first. */
static inline uint64_t
word_at(const ft_ring *ring, uint64_t first, uint64_t i)
{
    uint64_t idx = first + i;
    if (idx >= ring->capacity) {
        idx -= ring->capacity;
    }
    return ring->buf[idx];
}

static inline int
is_escape(uint64_t word)
{
    return (word & 7) == FT_WORD_ESCAPE;
}

/* The delta a word contributes: a header's is in the delta word after it. */
static inline uint64_t
word_delta(uint64_t word)
{
    if (!is_escape(word)) {
        return word >> FT_WORD_DELTA_SHIFT;
    }
    if (word & DELTA_WORD_BIT) {
        /* Arithmetic shift: the delta is signed. */
        return (uint64_t)((int64_t)word >> 4);
    }
    return 0;
}

/* ---- packed rings -------------------------------------------------------
 *
 * A record is two LEB128 varints: (zigzag(delta) << 3 | kind), where delta
 * is the ticks since the previous record (the first one's is 0: its time
 * is packed_first), then the function id.  A delta fits: one record's is
 * under 2**60 (ft_ring_push_escape() clamps it). */

/* The most bytes a record takes packed (ten and five). */
#define PACKED_RECORD_MAX 15

static inline uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint64_t
get_varint(const uint8_t **at)
{
    const uint8_t *p = *at;
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t byte;
    do {
        byte = *p++;
        if (shift < 64) {
            v |= (uint64_t)(byte & 0x7f) << shift;
        }
        shift += 7;
    } while (byte & 0x80);
    *at = p;
    return v;
}

static int
read_packed(ft_ring_reader *reader, ft_record *rec)
{
    if (reader->at >= reader->end) {
        return 0;
    }
    uint64_t head = get_varint(&reader->at);
    uint64_t zigzag = head >> 3;
    uint64_t delta = (zigzag >> 1) ^ (0 - (zigzag & 1));
    reader->ts += delta;
    rec->ts = (int64_t)reader->ts;
    rec->kind = (uint32_t)(head & 7);
    rec->func = (uint32_t)get_varint(&reader->at);
    return 1;
}

int
ft_ring_pack(ft_ring *ring)
{
    if (ring->buf == NULL) {
        return 0;  /* empty, or packed already */
    }
    ft_ring_reader reader;
    ft_ring_reader_init(&reader, ring);
    size_t cap = (size_t)reader.words * 4 + PACKED_RECORD_MAX;
    uint8_t *out = malloc(cap), *p = out;
    if (out == NULL) {
        return -1;
    }
    ft_record rec;
    uint64_t records = 0;
    int64_t first = ring->last, prev = 0;
    while (ft_ring_read(&reader, &rec)) {
        if (records == 0) {
            first = prev = rec.ts;
        }
        if ((size_t)(p - out) + PACKED_RECORD_MAX > cap) {
            size_t used = (size_t)(p - out);
            uint8_t *grown = realloc(out, cap * 2);
            if (grown == NULL) {
                free(out);
                return -1;
            }
            out = grown;
            p = out + used;
            cap *= 2;
        }
        int64_t delta = (int64_t)((uint64_t)rec.ts - (uint64_t)prev);
        uint64_t zigzag = ((uint64_t)delta << 1) ^ (uint64_t)(delta >> 63);
        p = put_varint(p, zigzag << 3 | rec.kind);
        p = put_varint(p, rec.func);
        prev = rec.ts;
        records++;
    }
    size_t used = (size_t)(p - out);
    if (used == 0) {
        free(out);
        out = NULL;
    }
    else {
        uint8_t *fit = realloc(out, used);
        if (fit != NULL) {
            out = fit;
        }
    }
    uint64_t lost = ft_ring_overwritten(ring) - ring->discarded;
    uint64_t discarded = ring->discarded;
    if (records == 0) {
        /* Nothing to keep: as a discarded ring, whose losses a ring
         * adopted later carries on. */
        discarded += lost;
        lost = 0;
    }
    int64_t last = ring->last;
    ft_ring_free(ring);
    ring->discarded = discarded;
    ring->last = last;
    ring->packed = out;
    ring->packed_bytes = used;
    ring->packed_records = records;
    ring->packed_lost = lost;
    ring->packed_first = first;
    return 0;
}

void
ft_ring_reader_init(ft_ring_reader *reader, const ft_ring *ring)
{
    reader->ring = ring;
    reader->next = 0;
    reader->at = reader->end = NULL;
    if (ring->packed != NULL) {
        reader->words = 0;
        reader->at = ring->packed;
        reader->end = ring->packed + ring->packed_bytes;
        reader->ts = (uint64_t)ring->packed_first;
        return;
    }
    reader->words = retained_words(ring);
    reader->first = first_word(ring);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < reader->words; i++) {
        sum += word_delta(word_at(ring, reader->first, i));
    }
    reader->ts = (uint64_t)ring->last - sum;
}

int
ft_ring_read(ft_ring_reader *reader, ft_record *rec)
{
    if (reader->at != NULL) {
        return read_packed(reader, rec);
    }
    while (reader->next < reader->words) {
        uint64_t word = word_at(reader->ring, reader->first, reader->next++);
        if (!is_escape(word)) {
            reader->ts += word >> FT_WORD_DELTA_SHIFT;
            rec->ts = (int64_t)reader->ts;
            rec->func = (uint32_t)(word >> 3) & ((1u << FT_WORD_ID_BITS) - 1);
            rec->kind = (uint32_t)word & 7;
            return 1;
        }
        if (word & DELTA_WORD_BIT) {
            /* The oldest word, its header overwritten: a lost record. */
            reader->ts += word_delta(word);
            continue;
        }
        if (reader->next == reader->words) {
            break;  /* never written without its delta word */
        }
        reader->ts += word_delta(word_at(reader->ring, reader->first,
                                         reader->next++));
        rec->ts = (int64_t)reader->ts;
        rec->func = (uint32_t)(word >> 32);
        rec->kind = (uint32_t)(word >> 4) & 7;
        return 1;
    }
    return 0;
}

void
ft_ring_mark_ids(const ft_ring *ring, uint8_t *marks, uint32_t nmarks)
{
    if (ring->packed != NULL) {
        ft_ring_reader reader;
        ft_record rec;
        ft_ring_reader_init(&reader, ring);
        while (ft_ring_read(&reader, &rec)) {
            if (rec.func < nmarks) {
                marks[rec.func] = 1;
            }
        }
        return;
    }
    /* Order does not matter here: every retained word where it lies. */
    uint64_t words = retained_words(ring);
    for (uint64_t i = 0; i < words; i++) {
        uint64_t word = ring->buf[i];
        uint32_t id;
        if (!is_escape(word)) {
            id = (uint32_t)(word >> 3) & ((1u << FT_WORD_ID_BITS) - 1);
        }
        else if (word & DELTA_WORD_BIT) {
            continue;
        }
        else {
            id = (uint32_t)(word >> 32);
        }
        if (id < nmarks) {
            marks[id] = 1;
        }
    }
}

uint64_t
ft_ring_overwritten(const ft_ring *ring)
{
    if (!ft_ring_overflowed(ring)) {
        return 0;
    }
    uint64_t records = ft_ring_written(ring) - ring->escapes;
    uint64_t words = retained_words(ring);
    if (ring->escapes == 0) {
        return records - words + ring->discarded + ring->packed_lost;
    }
    uint64_t retained = 0, first = first_word(ring);
    for (uint64_t i = 0; i < words; i++) {
        uint64_t word = word_at(ring, first, i);
        /* A header and its delta word are one record; a lone delta word
         * (at the oldest end) is none. */
        retained += !is_escape(word) || !(word & DELTA_WORD_BIT);
    }
    return records - retained + ring->discarded + ring->packed_lost;
}
