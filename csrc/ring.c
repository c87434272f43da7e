/* Ring buffer storage. */
#define _DEFAULT_SOURCE  /* MAP_ANONYMOUS, madvise() under -std=c11 */
#include "ring.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Faulted in before the ring is handed to its writer. */
#define FT_RING_PREFAULT ((size_t)16 << 20)
/* The background thread's unit of work: how long a free may wait. */
#define FT_PREFAULT_CHUNK ((size_t)4 << 20)

/* Linux 5.14+: faults pages in, writable, without touching their contents,
 * so it is safe while the writer is already writing. */
#if defined(__linux__) && !defined(MADV_POPULATE_WRITE)
#  define MADV_POPULATE_WRITE 23
#endif

static size_t
ring_bytes(uint64_t capacity)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = (size_t)capacity * sizeof(uint64_t);
    return (bytes + page - 1) / page * page;
}

#if defined(__SANITIZE_ADDRESS__)
#  define FT_RING_MALLOC 1
#elif defined(__has_feature)
#  if __has_feature(address_sanitizer)
#    define FT_RING_MALLOC 1
#  endif
#endif

#if defined(MADV_POPULATE_WRITE) && !defined(FT_RING_MALLOC)
#  define FT_HAVE_BACKGROUND_PREFAULT 1
#else
#  define FT_HAVE_BACKGROUND_PREFAULT 0
#endif

#if FT_HAVE_BACKGROUND_PREFAULT
struct ft_prefault {
    pthread_t thread;
    char *base;
    size_t from, to;
    atomic_int cancel;
    unsigned long fork_count;  /* the process it was started in */
};

/* Bumped in a forked child, where no background thread survived: such a
 * ring must not be joined. */
static atomic_ulong fork_count;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void
count_fork_in_child(void)
{
    atomic_fetch_add(&fork_count, 1);
}

static void
register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, count_fork_in_child);
}

static void *
prefault_main(void *arg)
{
    struct ft_prefault *pf = arg;
    for (size_t off = pf->from; off < pf->to; off += FT_PREFAULT_CHUNK) {
        if (atomic_load_explicit(&pf->cancel, memory_order_relaxed)) {
            break;
        }
        size_t len = pf->to - off < FT_PREFAULT_CHUNK ? pf->to - off
                                                      : FT_PREFAULT_CHUNK;
        if (madvise(pf->base + off, len, MADV_POPULATE_WRITE) != 0) {
            break;  /* no memory now: the writer faults the rest itself */
        }
    }
    return NULL;
}

/* Starts faulting [from, to) of buf in on a thread of its own; on failure
 * the writer will fault those pages itself. */
static struct ft_prefault *
start_prefault(char *buf, size_t from, size_t to)
{
    struct ft_prefault *pf = calloc(1, sizeof(*pf));
    if (pf == NULL) {
        return NULL;
    }
    (void)pthread_once(&atfork_once, register_atfork);
    pf->base = buf;
    pf->from = from;
    pf->to = to;
    atomic_init(&pf->cancel, 0);
    pf->fork_count = atomic_load(&fork_count);

    pthread_attr_t attr;
    sigset_t all, saved;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        (void)pthread_attr_setstacksize(&attr, 64 * 1024);
        /* Signals belong to the interpreter's threads, not to this one. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved);
        rc = pthread_create(&pf->thread, &attr, prefault_main, pf);
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) {
        free(pf);
        return NULL;
    }
    return pf;
}

static void
stop_prefault(struct ft_prefault *pf)
{
    if (pf->fork_count == atomic_load(&fork_count)) {
        atomic_store(&pf->cancel, 1);
        pthread_join(pf->thread, NULL);
    }
    free(pf);
}
#endif /* FT_HAVE_BACKGROUND_PREFAULT */

int
ft_ring_alloc(ft_ring *ring, uint64_t capacity, int64_t origin)
{
    memset(ring, 0, sizeof(*ring));
    ring->last = origin;
    if (capacity == 0 || capacity > (SIZE_MAX / 2) / sizeof(uint64_t)) {
        return -1;
    }
#ifdef FT_RING_MALLOC
    /* Sanitizer builds: from the heap, where AddressSanitizer sees an
     * overrun. */
    ring->buf = calloc((size_t)capacity, sizeof(uint64_t));
    if (ring->buf == NULL) {
        return -1;
    }
    ring->capacity = capacity;
    return 0;
#endif
    size_t bytes = ring_bytes(capacity);
    void *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        return -1;
    }
    /* Fault the first pages in now, so the hot path takes no page fault
     * (measured: ~9 ns per event otherwise, one 2 us fault per 4 KiB page),
     * and the rest on a background thread, which keeps far ahead of the
     * writer (~4 GB/s against at most ~0.5 GB/s of records), so that
     * start-up does not cost in proportion to a large buffer.  No huge
     * pages: their compaction cost is unpredictable (measured 2-800 ms per
     * 350 MiB). */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t prefault = bytes < FT_RING_PREFAULT ? bytes : FT_RING_PREFAULT;
    int populated = 0;
#if FT_HAVE_BACKGROUND_PREFAULT
    populated = madvise(buf, prefault, MADV_POPULATE_WRITE) == 0;
#endif
    if (!populated) {
        /* Older kernels: touch the pages; the rest faults in as written. */
        for (size_t off = 0; off < prefault; off += page) {
            ((volatile char *)buf)[off] = 0;
        }
    }
#if FT_HAVE_BACKGROUND_PREFAULT
    if (populated && bytes > prefault) {
        ring->prefault = start_prefault(buf, prefault, bytes);
    }
#endif
    ring->buf = buf;
    ring->capacity = capacity;
    return 0;
}

void
ft_ring_free(ft_ring *ring)
{
#if FT_HAVE_BACKGROUND_PREFAULT
    if (ring->prefault != NULL) {
        stop_prefault(ring->prefault);
    }
#endif
    if (ring->buf != NULL) {
#ifdef FT_RING_MALLOC
        free(ring->buf);
#else
        munmap(ring->buf, ring_bytes(ring->capacity));
#endif
    }
    memset(ring, 0, sizeof(*ring));
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

/* The i-th retained word, oldest first. */
static inline uint64_t
word_at(const ft_ring *ring, uint64_t i)
{
    uint64_t first = ft_ring_overflowed(ring) ? ring->pos : 0;
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

void
ft_ring_reader_init(ft_ring_reader *reader, const ft_ring *ring)
{
    reader->ring = ring;
    reader->next = 0;
    reader->words = retained_words(ring);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < reader->words; i++) {
        sum += word_delta(word_at(ring, i));
    }
    reader->ts = (uint64_t)ring->last - sum;
}

int
ft_ring_read(ft_ring_reader *reader, ft_record *rec)
{
    while (reader->next < reader->words) {
        uint64_t word = word_at(reader->ring, reader->next++);
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
        reader->ts += word_delta(word_at(reader->ring, reader->next++));
        rec->ts = (int64_t)reader->ts;
        rec->func = (uint32_t)(word >> 32);
        rec->kind = (uint32_t)(word >> 4) & 7;
        return 1;
    }
    return 0;
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
        return records - words;
    }
    uint64_t retained = 0;
    for (uint64_t i = 0; i < words; i++) {
        uint64_t word = word_at(ring, i);
        /* A header and its delta word are one record; a lone delta word
         * (at the oldest end) is none. */
        retained += !is_escape(word) || !(word & DELTA_WORD_BIT);
    }
    return records - retained;
}
