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
    size_t bytes = (size_t)capacity * sizeof(ft_record);
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
ft_ring_alloc(ft_ring *ring, uint64_t capacity)
{
    memset(ring, 0, sizeof(*ring));
    if (capacity == 0 || capacity > (SIZE_MAX / 2) / sizeof(ft_record)) {
        return -1;
    }
#ifdef FT_RING_MALLOC
    /* Sanitizer builds: from the heap, where AddressSanitizer sees an
     * overrun. */
    ring->buf = calloc((size_t)capacity, sizeof(ft_record));
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
