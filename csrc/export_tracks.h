/* The .pftrace writer's tracks (a session's ranges and steps, other
 * tools' slices), read from their Python lists with the GIL into C. */
#ifndef FT_EXPORT_TRACKS_H
#define FT_EXPORT_TRACKS_H

#include <Python.h>
#include <stdint.h>

/* The session's tracks, copied out of their Python lists before anything
 * else runs: converting a value may run Python code (__index__), which must
 * not be able to free what is being read, nor the tracer's records. */
typedef struct {
    PyObject *name;  /* strong */
    PyObject *cat;   /* strong, maybe NULL: the track's category */
    int64_t start, end;
    /* Their bytes (encoded(), strong; cat8 NULL without cat), taken with
     * the GIL: what a thread's slices are written from without it. */
    PyObject *name8, *cat8;
} span_t;

typedef struct {
    PyObject *name;  /* strong */
    int category;
    span_t *spans;
    Py_ssize_t nspans;
} track_t;

void ft_free_tracks(track_t *tracks, Py_ssize_t n);
/* tracks: [(name, category, [(name, start_ns, end_ns[, category])])].
 * 0, or -1 with an exception (*tracks, *ntracks: what to free). */
int ft_parse_tracks(PyObject *list, track_t **tracks, Py_ssize_t *ntracks);
/* thread_slices: None, or one list of spans (name, start_ns, end_ns,
 * category) per thread.  0, or -1 with an exception (*out: what to free,
 * nthreads entries). */
int ft_parse_thread_slices(PyObject *list, Py_ssize_t nthreads,
                           track_t **out);

#endif /* FT_EXPORT_TRACKS_H */
