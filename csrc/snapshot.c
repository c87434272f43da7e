/* Tracer.snapshot(): a copy of the records so far, while recording goes on,
 * as a new, stopped tracer (the threads' stacks taken as at a stop, their
 * thread names read again); Tracer.mark(): where every thread's records
 * are, so that a later snapshot copies only what came since. */
#include "snapshot.h"
#include "install.h"
#include "recording.h"
#include "threads.h"

#include <stdlib.h>
#include <string.h>

/* A mark (bytes): a header, then where each thread's ring was. */
typedef struct {
    uint64_t generation;  /* the tracer's: a mark of another is refused */
    int64_t ticks;
    uint64_t nthreads;
} mark_head;

typedef struct {
    uint64_t written;     /* ft_ring_written() */
    uint64_t discarded;   /* ring.discarded: changes if the ring was */
    uint64_t packed;      /* whether it was packed */
} mark_thread;

PyObject *
ft_tracer_mark(ft_tracer *self)
{
    if (self->phase != FT_PHASE_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError, "mark() needs a tracer that is "
                        "recording");
        return NULL;
    }
    Py_ssize_t n = self->nthreads;
    PyObject *mark = PyBytes_FromStringAndSize(
        NULL, (Py_ssize_t)sizeof(mark_head) + n * (Py_ssize_t)sizeof(mark_thread));
    if (mark == NULL) {
        return NULL;
    }
    char *buf = PyBytes_AS_STRING(mark);
    mark_head head = {self->generation, ft_clock_ticks(&self->clock),
                      (uint64_t)n};
    memcpy(buf, &head, sizeof(head));
    for (Py_ssize_t i = 0; i < n; i++) {
        const ft_ring *ring = &self->threads[i]->ring;
        mark_thread at = {ft_ring_written(ring), ring->discarded,
                          ring->packed != NULL};
        memcpy(buf + sizeof(head) + (size_t)i * sizeof(at), &at, sizeof(at));
    }
    /* A step: the safe point where the function table is swept when it
     * has grown enough (release.c). */
    if (self->funcs.used >= self->release.at && ft_release_functions(self) < 0) {
        Py_DECREF(mark);
        return NULL;
    }
    return mark;
}

/* since: a mark of self's, checked; *head and *threads (into since's
 * bytes) set.  0, or -1 with ValueError or TypeError. */
static int
read_mark(ft_tracer *self, PyObject *since, mark_head *head,
          const char **threads)
{
    if (!PyBytes_Check(since)) {
        PyErr_Format(PyExc_TypeError, "snapshot() since must be a mark "
                     "(what Tracer.mark() returns), not %.100s",
                     Py_TYPE(since)->tp_name);
        return -1;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(since);
    const char *buf = PyBytes_AS_STRING(since);
    if ((size_t)size >= sizeof(*head)) {
        memcpy(head, buf, sizeof(*head));
    }
    if ((size_t)size < sizeof(*head)
        || (size_t)size != sizeof(*head) + head->nthreads * sizeof(mark_thread)
        || head->generation != self->generation
        || head->nthreads > (uint64_t)self->nthreads) {
        PyErr_SetString(PyExc_ValueError, "snapshot() since is not a mark of "
                        "this tracer (what its mark() returned while it "
                        "recorded)");
        return -1;
    }
    *threads = buf + sizeof(*head);
    return 0;
}

/* Copies the live thread's ring into th: all of it, or (since: a mark's
 * entry for it) only what it recorded since the mark when that is all
 * there: the copy then costs what the window holds, not the ring.  0, or
 * -1 (no memory). */
static int
copy_ring(ft_thread *th, const ft_thread *live, const mark_thread *since)
{
    if (since != NULL && !since->packed && live->ring.packed == NULL) {
        int rc = ft_ring_copy_since(&th->ring, &live->ring, since->written,
                                    since->discarded);
        if (rc <= 0) {
            return rc;
        }
    }
    /* The replay leaves out what came before the window. */
    return ft_ring_copy(&th->ring, &live->ring);
}

/* A copy of th for a snapshot: its records, base stack and name; its state
 * at the snapshot is the caller's to fill in.  since: NULL, or the entry
 * of a mark taken at mark_ticks (the window's start) for a thread
 * registered then.  NULL when out of memory. */
static ft_thread *
snapshot_thread(const ft_thread *src, const mark_thread *since,
                int64_t mark_ticks)
{
    ft_thread *th = malloc(sizeof(ft_thread));
    if (th == NULL) {
        return NULL;
    }
    *th = *src;
    th->os_thread = NULL;  /* a stopped copy: no sweep looks */
    th->base_stack = NULL;
    th->stop_stack = NULL;
    th->name = NULL;
    th->at_stop = FT_AT_STOP_GONE;
    th->displaced = FT_DISPLACED_NO;
    th->loss_ticks = 0;
    th->dropped_events = 0;
    th->dropped_counted = 0;
    th->queued = 0;
    th->window_ticks = 0;
    if (mark_ticks != 0 && src->base_ticks < mark_ticks) {
        th->window_ticks = mark_ticks;
    }
    if (copy_ring(th, src, since) < 0) {
        free(th);
        return NULL;
    }
    size_t depth = (size_t)src->base_depth;
    if (src->base_stack != NULL) {
        th->base_stack = malloc((depth ? depth : 1) * sizeof(uint32_t));
        if (th->base_stack == NULL) {
            ft_thread_free(th);
            return NULL;
        }
        memcpy(th->base_stack, src->base_stack, depth * sizeof(uint32_t));
    }
    th->name = Py_XNewRef(src->name);
    return th;
}

/* Each thread of snap (a copy of self's, same order) alive now: whether it
 * records through self, and its stack (frames open at the snapshot, as at
 * a stop).  Python frames' ids are interned in self's table: snap copies it
 * after.  Pure C. */
static void
snapshot_stacks(ft_tracer *self, ft_tracer *snap)
{
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        ft_thread *live = ft_find_thread_of(self, ts);
        Py_ssize_t i = 0;
        while (live != NULL && i < snap->nthreads && self->threads[i] != live) {
            i++;
        }
        if (live == NULL || i == snap->nthreads) {
            continue;
        }
        ft_thread *th = snap->threads[i];
        th->at_stop = self->backend == FT_BACKEND_MONITORING || ft_is_ours(self, ts)
            ? FT_AT_STOP_OURS : FT_AT_STOP_OTHER;
        ft_take_stop_stack(self, th, ts);
    }
}

PyObject *
ft_tracer_snapshot(ft_tracer *self, PyObject *since)
{
    if (self->phase != FT_PHASE_ACTIVE || self->in_call != FT_IN_NONE) {
        PyErr_SetString(PyExc_RuntimeError,
                        self->phase == FT_PHASE_STOPPED
                        ? "snapshot() of a stopped tracer: its records no "
                          "longer change, use the tracer itself"
                        : "snapshot() needs a tracer that is recording "
                          "(started, not inside start() or stop())");
        return NULL;
    }
    mark_head head = {0, 0, 0};
    const char *marks = NULL;
    if (since != NULL && since != Py_None
        && read_mark(self, since, &head, &marks) < 0) {
        return NULL;
    }
    ft_tracer *snap = ft_tracer_like(self);
    if (snap == NULL) {
        return NULL;
    }
    /* From the anchor to the copies nothing runs that could record (no
     * Python code, no collection): every record copied is before it. */
    int gc_was_enabled = PyGC_Disable();
    ft_anchor at = ft_clock_anchor(&self->clock);
    int failed = 0;
    snap->threads = malloc((size_t)(self->nthreads ? self->nthreads : 1)
                           * sizeof(ft_thread *));
    failed = snap->threads == NULL;
    if (!failed) {
        snap->threads_cap = self->nthreads ? self->nthreads : 1;
        for (Py_ssize_t i = 0; i < self->nthreads && !failed; i++) {
            mark_thread entry;
            const mark_thread *at_mark = NULL;
            if (marks != NULL && (uint64_t)i < head.nthreads) {
                memcpy(&entry, marks + (size_t)i * sizeof(entry),
                       sizeof(entry));
                at_mark = &entry;
            }
            ft_thread *th = snapshot_thread(self->threads[i], at_mark,
                                            head.ticks);
            if (th == NULL) {
                failed = 1;
                break;
            }
            snap->threads[snap->nthreads++] = th;
            ft_budget_count(snap, th);
        }
    }
    if (!failed) {
        snap->max_tstate_id = self->max_tstate_id;
        snapshot_stacks(self, snap);
        /* The frames left open by the threads that ended (for
         * ft_find_displaced()): a replay of each, counted on the live
         * thread, which keeps it for the next snapshot and the stop. */
        for (Py_ssize_t i = 0; i < snap->nthreads; i++) {
            ft_thread *th = snap->threads[i], *live = self->threads[i];
            if (th->at_stop == FT_AT_STOP_GONE) {
                ft_thread_note_open(th, ft_thread_open_python(live));
            }
        }
        failed = ft_functable_copy(&snap->funcs, &self->funcs) < 0
                 || ft_clock_copy(&snap->clock, &self->clock) < 0;
    }
    if (!failed) {
        ft_clock_note_boottime(&snap->clock, 1);
        snap->start_ns = self->start_ns;
        if (head.ticks != 0) {
            ft_clock_cursor cursor = {0};
            int64_t mark_ns = ft_clock_convert(&snap->clock, head.ticks,
                                               &cursor);
            snap->start_ns = mark_ns > snap->start_ns ? mark_ns
                                                      : snap->start_ns;
        }
        snap->stop_ns = at.ns;
        snap->intern_failures = self->intern_failures;
        snap->phase = FT_PHASE_STOPPED;
        ft_find_displaced(snap, 0);
    }
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (failed) {
        Py_DECREF(snap);
        return PyErr_NoMemory();
    }
    /* Threads may have been renamed.  Python code (threading): after the
     * snapshot time, so that its calls are not in the snapshot. */
    ft_interrupt kept = {0};
    PyObject *names = ft_thread_names(&kept);
    if (ft_raise_kept(&kept, 0) < 0) {
        Py_XDECREF(names);
        Py_DECREF(snap);
        return NULL;
    }
    if (names == NULL) {
        PyErr_Clear();  /* they keep the names they were registered with */
    }
    else {
        for (Py_ssize_t i = 0; i < snap->nthreads; i++) {
            if (ft_tstate_id_alive(snap->threads[i]->tstate_id)) {
                ft_name_thread(snap->threads[i], names);
            }
        }
        Py_DECREF(names);
    }
    /* Its recording, which nothing changes from here. */
    if (ft_tracer_recording(snap, "snapshot()") == NULL) {
        Py_DECREF(snap);
        return NULL;
    }
    return (PyObject *)snap;
}
