/* The tracer's memory bound over all its rings (max_memory).
 *
 * A ring costs what its thread recorded (ring.h): it starts at one page
 * and grows from the slow path when full.  The tracer counts the bytes its
 * rings hold (ring_bytes) and decides here how far a ring may grow: past
 * max_memory, the rings of threads that ended go first, the one whose
 * newest record is oldest first, each whole (ft_ring_discard(): its
 * records are counted as dropped, as overwritten ones are); when the rings
 * of live threads alone fill the bound, a full ring grows no more and
 * wraps at its current size.
 *
 * A thread's end is noticed by a sweep over the interpreter's thread
 * states (their ids are unique in the process), once its OS thread has
 * exited too (ft_os_thread): every so many new rings,
 * when a ring cannot grow, and at stop().  An ended thread's ring gives
 * back what holds no record (ft_ring_trim()), and is packed: by each new
 * thread's first record, rings of a bounded number of records in all
 * (a larger ring only at the bound), and any ring before one is discarded
 * at the bound;
 * not at stop(), where it would only delay the stop.
 *
 * Everything here runs holding the GIL, on the recording threads' slow
 * path or in start()/stop(): it runs no Python code. */
#include "state.h"
#include "threads.h"

#include <stdlib.h>

static int
compare_ids(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Records packed at most by each new thread's first record (about 6 ns
 * each, page faults and unmapping included): bounds the pause of the
 * thread that packs to about 1.5 ms, while threads that start as often as
 * others end keep up with them.  At the memory bound there is no limit:
 * packing is what saves records from being discarded. */
#define PACK_BUDGET ((uint64_t)1 << 18)

void
ft_budget_init(ft_tracer *tracer, uint64_t max_memory)
{
    tracer->budget.max_memory = max_memory;
    tracer->budget.sweep_every = 64;
}

void
ft_budget_reset(ft_tracer *tracer)
{
    tracer->budget.ring_bytes = 0;
    tracer->budget.rings_since_sweep = 0;
    tracer->budget.to_pack = 0;
    tracer->budget.pack_from = 0;
}

void
ft_budget_count(ft_tracer *tracer, const ft_thread *th)
{
    tracer->budget.ring_bytes += ft_ring_bytes(&th->ring);
}

void
ft_budget_discard_packed(ft_tracer *tracer, ft_thread *th)
{
    tracer->budget.ring_bytes -= ft_ring_bytes(&th->ring);
    ft_ring_discard(&th->ring);
}

/* Trims th's ring, keeping the tracer's count. */
static void
trim(ft_tracer *tracer, ft_thread *th)
{
    size_t before = ft_ring_bytes(&th->ring);
    ft_ring_trim(&th->ring);
    tracer->budget.ring_bytes -= before - ft_ring_bytes(&th->ring);
}

/* Packs th's ring (ft_ring_pack(): half the bytes or less, records kept),
 * keeping the tracer's counts.  0, or -1 (no memory). */
static int
pack(ft_tracer *tracer, ft_thread *th)
{
    size_t before = ft_ring_bytes(&th->ring);
    if (ft_ring_pack(&th->ring) < 0) {
        return -1;
    }
    tracer->budget.ring_bytes -= before - ft_ring_bytes(&th->ring);
    if (th->queued) {
        th->queued = 0;
        tracer->budget.to_pack--;
    }
    return 0;
}

/* By a new thread (th): packs queued rings of up to PACK_BUDGET records
 * in all, from the oldest queued (threads end roughly in the order they
 * started, so the scan stays short). */
static void
pack_queued(ft_tracer *tracer, const ft_thread *th)
{
    uint64_t budget = PACK_BUDGET;
    Py_ssize_t left = -1, i = tracer->budget.pack_from;
    for (; i < tracer->nthreads && tracer->budget.to_pack > 0; i++) {
        ft_thread *queued = tracer->threads[i];
        if (!queued->queued) {
            continue;
        }
        uint64_t records = ft_ring_retained(&queued->ring);
        if (queued == th || records > budget || pack(tracer, queued) < 0) {
            left = left < 0 ? i : left;  /* for a later call */
            continue;
        }
        budget -= records;
    }
    tracer->budget.pack_from = left >= 0 ? left : i;
}

/* At the memory bound: packs one ended thread's ring, any size, never
 * keep's (the calling thread's: its hook writes to that ring next).
 * Whether it packed one. */
static int
pack_one(ft_tracer *tracer, const ft_thread *keep)
{
    for (Py_ssize_t i = 0; i < tracer->nthreads; i++) {
        ft_thread *th = tracer->threads[i];
        if (th->ended && th->ring.buf != NULL && th != keep) {
            return pack(tracer, th) == 0;
        }
    }
    return 0;
}

void
ft_budget_sweep(ft_tracer *tracer, const ft_thread *keep)
{
    tracer->budget.rings_since_sweep = 0;
    size_t n = 0, cap = 64;
    uint64_t *ids = malloc(cap * sizeof(uint64_t));
    if (ids == NULL) {
        return;  /* best effort: the next sweep may do better */
    }
    PyThreadState *p = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; p != NULL; p = PyThreadState_Next(p)) {
        if (n == cap) {
            uint64_t *grown = realloc(ids, 2 * cap * sizeof(uint64_t));
            if (grown == NULL) {
                free(ids);
                return;
            }
            ids = grown;
            cap *= 2;
        }
        ids[n++] = PyThreadState_GetID(p);
        ft_note_unhooked(tracer, p);
    }
    qsort(ids, n, sizeof(uint64_t), compare_ids);
    Py_ssize_t live = 0;
    for (Py_ssize_t i = 0; i < tracer->nthreads; i++) {
        ft_thread *th = tracer->threads[i];
        if (th->ended || th->ring.buf == NULL) {
            continue;
        }
        /* A thread whose OS thread runs is alive, whatever its thread
         * state: C code that calls into Python (PyGILState_Ensure()) makes
         * and deletes one around each call, and between calls has none.
         * Not one threading started: its thread state goes as it ends (and
         * before 3.13 join() returns then, before the OS thread exits).
         * The calling thread is alive too.  Told by its OS thread or its
         * ft_thread, not its ident: a new thread often has the ident of
         * one that just ended. */
        if (th == keep || (!th->of_threading && ft_thread_os_alive(th))) {
            live++;
            continue;
        }
        if (bsearch(&th->tstate_id, ids, n, sizeof(uint64_t),
                    compare_ids) != NULL) {
            live++;
            continue;
        }
        th->ended = 1;
        trim(tracer, th);
        /* New threads pack what fits their budget; a larger ring is
         * packed at the memory bound only. */
        if (th->ring.buf != NULL
            && ft_ring_retained(&th->ring) <= PACK_BUDGET) {
            th->queued = 1;
            tracer->budget.to_pack++;
            if (i < tracer->budget.pack_from) {
                tracer->budget.pack_from = i;
            }
        }
    }
    free(ids);
    /* Amortized: the next sweep after as many new rings as live ones. */
    tracer->budget.sweep_every = live > 64 ? live : 64;
}

void
ft_budget_adopted(ft_tracer *tracer, ft_thread *th)
{
    tracer->budget.ring_bytes += ft_ring_bytes(&th->ring);
    if (++tracer->budget.rings_since_sweep >= tracer->budget.sweep_every) {
        ft_budget_sweep(tracer, th);
    }
    if (tracer->budget.to_pack > 0) {
        pack_queued(tracer, th);
    }
}

/* Discards the ring of the ended thread whose newest record is oldest,
 * never keep's (the ring about to grow).  Returns whether there was one. */
static int
discard_oldest_ended(ft_tracer *tracer, const ft_thread *keep)
{
    ft_thread *oldest = NULL;
    for (Py_ssize_t i = 0; i < tracer->nthreads; i++) {
        ft_thread *th = tracer->threads[i];
        if (th->ended && ft_ring_holds(&th->ring) && th != keep
            && (oldest == NULL || th->ring.last < oldest->ring.last)) {
            oldest = th;
        }
    }
    if (oldest == NULL) {
        return 0;
    }
    tracer->budget.ring_bytes -= ft_ring_bytes(&oldest->ring);
    ft_ring_discard(&oldest->ring);
    if (oldest->queued) {
        oldest->queued = 0;
        tracer->budget.to_pack--;
    }
    return 1;
}

/* Makes room for `need` more bytes of keep's ring within max_memory:
 * ended threads' rings first (packed, then discarded).  Whether it fits. */
static int
make_room(ft_tracer *tracer, const ft_thread *keep, uint64_t need)
{
    int swept = 0;
    while (tracer->budget.ring_bytes + need > tracer->budget.max_memory) {
        /* Packing ended rings first, one at a time until there is room:
         * it loses no record. */
        if (pack_one(tracer, keep) || discard_oldest_ended(tracer, keep)) {
            continue;
        }
        if (swept) {
            return 0;
        }
        /* Threads may have ended since the last sweep. */
        ft_budget_sweep(tracer, keep);
        swept = 1;
    }
    return 1;
}

void
ft_budget_grow(ft_tracer *tracer, ft_thread *th)
{
    ft_ring *ring = &th->ring;
    uint64_t capacity = ft_ring_next_capacity(ring);
    /* Page rounding aside (a page at most). */
    uint64_t need = (capacity - ring->capacity) * sizeof(uint64_t);
    if (!make_room(tracer, th, need)) {
        /* Live threads fill the bound: what is left, if a page or more,
         * then this ring wraps at its size. */
        uint64_t left = tracer->budget.max_memory > tracer->budget.ring_bytes
                        ? tracer->budget.max_memory - tracer->budget.ring_bytes : 0;
        uint64_t words = left / FT_RING_PAGE_BYTES * FT_RING_PAGE_BYTES
                         / sizeof(uint64_t);
        if (words == 0) {
            ft_ring_stop_growing(ring);
            return;
        }
        capacity = ring->capacity + words;
    }
    size_t before = ft_ring_bytes(ring);
    if (ft_ring_grow(ring, capacity) < 0) {
        ft_ring_stop_growing(ring);  /* no memory: wrap, as at the bound */
        return;
    }
    tracer->budget.ring_bytes += ft_ring_bytes(ring) - before;
}
