/* What both writers (export_chrome.c, export_perfetto.c) share: the
 * recording held, the names taken with the GIL and the collector off, the
 * output opened, each thread replayed and encoded with the GIL released,
 * progress and signal checks, and the cleanup on every path.  A format
 * supplies only its encoder. */
#ifndef FT_EXPORT_DRIVER_H
#define FT_EXPORT_DRIVER_H

#include "state.h"
#include "export_out.h"

typedef struct ft_driver ft_driver;

/* Where the events come from: a stopped tracer's records, or a list of
 * frametrace.Event (a trace read from a file) with its threads. */
typedef struct {
    ft_tracer *tracer;      /* borrowed, or NULL: */
    ft_state *state;        /* the module's (its Event type) */
    PyObject *events;       /* borrowed: a list of Event */
    PyObject *threads;      /* borrowed: [(thread_serial, tid)], in order */
    int64_t stop_ns;        /* no event ends later (INT64_MAX: unknown) */
} ft_source;

/* How many threads src writes (before anything is pinned). */
static inline Py_ssize_t
ft_source_nthreads(const ft_source *src)
{
    return src->tracer != NULL ? src->tracer->nthreads
           : PyList_Check(src->threads) ? PyList_GET_SIZE(src->threads) : 0;
}

/* A format's encoder: each step returns 0, or -1 (with the GIL: an
 * exception set; without it: d->nomem set when out of memory, else the
 * pending exception of a progress check).  NULL steps are skipped. */
typedef struct {
    const char *who;  /* names the writer in errors: "_write_chrome()" */
    /* GIL held, records pinned, the collector off: takes what the encoder
     * needs of the functions (d->funcs) and threads (d->tids). */
    int (*describe)(void *enc, ft_driver *d);
    /* GIL held, output open: what comes before the events. */
    int (*begin)(void *enc, ft_driver *d);
    /* No GIL: thread t's events; each event goes through
     * ft_driver_event() first. */
    int (*thread)(void *enc, ft_driver *d, Py_ssize_t t,
                  const ft_thread_events *te);
    /* No GIL: what comes after the events, unless interrupted. */
    int (*end)(void *enc, ft_driver *d);
} ft_encoder;

struct ft_driver {
    out_t out;
    ft_export ex;             /* a tracer's recording held; ex.pid the
                                 writer's process either way */
    Py_ssize_t nthreads;
    const ft_func *funcs;     /* the function table, valid while described */
    uint32_t nfuncs;
    uint64_t *tids;           /* each thread's exported tid, malloc'd */
    /* Events' source only (export_events.c): */
    ft_eventvec *vecs;        /* each thread's events, in writing order */
    ft_func *own_funcs;       /* their functions: names borrowed from keep */
    PyObject *keep;           /* strong: what the names belong to */
    PyObject *progress;       /* progress(done, total), or NULL/None */
    size_t done;              /* events written */
    size_t total;             /* progress's total */
    uint32_t max_depth;
    int nomem;
    PyThreadState *save;      /* while the GIL is released */
};

/* Writes src's events to path (bytes; name: what errors show) through
 * enc; returns (events written, deepest depth), or NULL with an
 * exception. */
PyObject *ft_driver_run(const ft_encoder *vt, void *enc, const ft_source *src,
                        PyObject *path, PyObject *name, int compress,
                        PyObject *progress);

/* export_events.c: src's events (GIL held, no Python code run) checked
 * and taken into d: threads, tids, functions and each thread's events,
 * sorted and nested.  0, or -1 with an exception (ValueError, TypeError
 * naming the bad event).  ft_events_free() either way. */
int ft_events_take(ft_driver *d, const ft_source *src);
void ft_events_free(ft_driver *d);

/* The entries of the two formats: a tracer's method, or (events) the
 * module's _write_events(). */
PyObject *ft_write_chrome_source(const ft_source *src, PyObject *args,
                                 PyObject *kwargs);
PyObject *ft_write_perfetto_source(const ft_source *src, PyObject *args,
                                   PyObject *kwargs);

/* Before each event an encoder writes: the progress and signal check
 * (every FT_PROGRESS_EVERY events), the count and the depth.  0, or -1:
 * stop writing. */
static inline int
ft_driver_event(ft_driver *d, const ft_event *ev)
{
    if (out_progress(d->progress, d->done, d->total, d->ex.pid,
                     &d->save) < 0) {
        return -1;
    }
    d->done++;
    if (ev->depth > d->max_depth) {
        d->max_depth = ev->depth;
    }
    return 0;
}

#endif /* FT_EXPORT_DRIVER_H */
