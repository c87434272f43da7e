/* The writers' common driver (export_driver.h). */
#include "export_driver.h"
#include "recording.h"

#include <stdlib.h>

/* About how many events thread t gives, before its replay. */
static uint64_t
estimate(const ft_driver *d, Py_ssize_t t)
{
    return d->vecs != NULL ? d->vecs[t].len : ft_export_estimate(&d->ex, t);
}

PyObject *
ft_driver_run(const ft_encoder *vt, void *enc, const ft_source *src,
              PyObject *path, PyObject *name, int compress,
              PyObject *progress)
{
    ft_driver d = {0};
    ft_thread_events te = {0};
    PyObject *result = NULL;
    d.progress = progress;
    ft_tracer *tracer = src->tracer;
    /* The recording held, then what needs Python (the names), with the
     * GIL and the collector off: no finalizer can let another thread
     * change what is read meanwhile. */
    if (tracer == NULL) {
        d.ex.pid = (long)getpid();
        if (ft_events_take(&d, src) < 0) {
            goto done;
        }
    }
    else {
        if (ft_export_begin(&d.ex, tracer, vt->who) < 0) {
            goto done;
        }
        d.nthreads = d.ex.nthreads;
        d.funcs = d.ex.rec->funcs->funcs;
        d.nfuncs = d.ex.rec->funcs->nfuncs;
        /* The OS's id where known (the one other tools show), unique
         * per thread. */
        d.tids = ft_export_tids(tracer);
        if (d.tids == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (vt->describe != NULL) {
        int gc_was_enabled = PyGC_Disable();
        int described = vt->describe(enc, &d);
        if (gc_was_enabled) {
            PyGC_Enable();
        }
        if (described < 0) {
            goto done;
        }
    }
    d.funcs = NULL;  /* described, never read again */
    if (out_open_or_raise(&d.out, path, name, compress, OUT_CAP) < 0) {
        goto done;
    }
    if (vt->begin != NULL && vt->begin(enc, &d) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        goto done;
    }
    uint64_t rest = 0;
    for (Py_ssize_t t = 0; t < d.nthreads; t++) {
        rest += estimate(&d, t);
    }
    /* Replay and encoding are pure C on what this call owns or holds,
     * one thread at a time, with the GIL released.  Stops at an
     * interruption or a write error, without the end: even a file
     * written in place does not look complete. */
    int interrupted = 0, write_err;
    d.save = PyEval_SaveThread();
    for (Py_ssize_t t = 0; t < d.nthreads && !d.out.failed; t++) {
        ft_thread_events given = {0};  /* a view of the events taken */
        if (d.vecs != NULL) {
            given.body = d.vecs[t];
        }
        else if (ft_export_thread(&d.ex, t, &te) < 0) {
            interrupted = d.nomem = 1;
            break;
        }
        const ft_thread_events *events = d.vecs != NULL ? &given : &te;
        rest -= estimate(&d, t);
        /* progress's total: exact for the threads replayed, estimated
         * for the others. */
        d.total = d.done + events->head.len + events->body.len
                  + (size_t)rest;
        if (vt->thread(enc, &d, t, events) < 0) {
            interrupted = 1;
            break;
        }
    }
    if (!interrupted && vt->end != NULL && vt->end(enc, &d) < 0) {
        interrupted = 1;
    }
    write_err = out_end(&d.out, interrupted);
    ft_thread_events_free(&te);
    PyEval_RestoreThread(d.save);
    if (interrupted) {
        if (d.nomem) {
            PyErr_NoMemory();
        }
        goto done;  /* else the signal handler's or the callback's exception */
    }
    if (write_err) {
        out_raise(write_err, name);
        goto done;
    }
    /* The deepest depth, for the caller's warning past what viewers show. */
    result = Py_BuildValue("(nI)", (Py_ssize_t)d.done,
                           (unsigned int)d.max_depth);
done:
    out_end(&d.out, 1);  /* on the error paths */
    ft_thread_events_free(&te);
    ft_export_end(&d.ex);
    ft_events_free(&d);
    free(d.tids);
    return result;
}
