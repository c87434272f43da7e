/* snapshot.c: Tracer.mark() and Tracer.snapshot(). */
#ifndef FT_SNAPSHOT_H
#define FT_SNAPSHOT_H

#include "state.h"

/* Tracer.snapshot(): a new, stopped tracer of self's type holding a copy
 * of the records so far (as if self had stopped now: its threads' stacks
 * taken, their frames open now ending now), while self goes on recording.
 * New reference, or NULL with RuntimeError (not recording) or
 * MemoryError. */
PyObject *ft_tracer_snapshot(ft_tracer *tracer, PyObject *since);
/* Tracer.mark(): where every thread's records are now, for
 * snapshot(since=mark): bytes, or NULL with an exception. */
PyObject *ft_tracer_mark(ft_tracer *tracer);

#endif /* FT_SNAPSHOT_H */
