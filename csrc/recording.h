/* recording.c: what a stop() or a snapshot() recorded, as one immutable,
 * reference-counted object that its tracer and each reader hold. */
#ifndef FT_RECORDING_H
#define FT_RECORDING_H

#include "state.h"

/* A stopped tracer's records: the threads (rings, stacks, names, loss
 * counters), the clock's anchors, the start and stop times, and the
 * function table that names them.  A Python object (never exposed) so
 * that a reference is a reference count: the tracer holds one, and each
 * reader (getEvents(), a writer or the join with the GIL released, a
 * Trace through a tracer sharing it) its own; the last to let go frees
 * it, whatever clear() did meanwhile.  It owns Python objects (names,
 * code objects) that may lead back to it, hence GC support.
 *
 * Nothing in it changes once made, except the counts of events dropped,
 * a cache each thread fills once, under the GIL (ft_count_dropped()). */
typedef struct ft_recording {
    PyObject_HEAD
    ft_thread **threads;      /* owned */
    Py_ssize_t nthreads;
    ft_clock clock;           /* owned: its anchors */
    int64_t start_ns;
    int64_t stop_ns;
    /* The names: the table of the tracer that recorded (borrowed: that
     * tracer hands it over, ft_recording_release(), before it frees or
     * clears it), or own. */
    const ft_functable *funcs;
    ft_functable own;
    /* The readers holding it with the GIL released (ft_export_begin()),
     * in process readers_pid: a forked child inherits their references
     * but not their threads, and forgets them (ft_recording_forget()). */
    Py_ssize_t readers;
    long readers_pid;
} ft_recording;

/* The module's recording type (new reference), or NULL. */
PyTypeObject *ft_recording_type_new(PyObject *module);

/* The recording of a stopped tracer, made at its first call (stop(),
 * snapshot(), or the first reader after a stop that ran in a finalizer
 * or a forked child): from then on the tracer's threads and clock are
 * views of the recording's.  Borrowed, or NULL with a RuntimeError (not
 * stopped, or cleared) or MemoryError; who names the caller. */
ft_recording *ft_tracer_recording(ft_tracer *tracer, const char *who);

/* What clear() and the collector do with a tracer's records: without a
 * recording, frees them; with one, drops the tracer's views, hands its
 * function table over if the recording borrows it, and drops the
 * tracer's reference (the records go with the last one). */
void ft_recording_release(ft_tracer *tracer);

/* In a forked child, drops the references of the readers that ran in
 * the parent (their threads did not fork); the caller holds one. */
void ft_recording_forget(ft_recording *rec);

/* A new stopped tracer of tracer's type and options sharing its
 * recording (no copy): what a Trace keeps, so that a later clear() of
 * tracer leaves it whole.  NULL with an exception. */
PyObject *ft_tracer_share(ft_tracer *tracer);

#endif /* FT_RECORDING_H */
