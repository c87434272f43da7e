/* The recording (recording.h): made from a stopped tracer or a snapshot,
 * shared by the tracer and its readers, freed by the last of them; and
 * the stopped tracers that share one (what a Trace keeps). */
#include "recording.h"
#include "threads.h"

#include <string.h>
#include <unistd.h>

ft_recording *
ft_tracer_recording(ft_tracer *tracer, const char *who)
{
    if (tracer->recording != NULL) {
        return tracer->recording;
    }
    if (tracer->phase != FT_PHASE_STOPPED) {
        PyErr_Format(PyExc_RuntimeError, "%s needs a stopped, uncleared "
                     "tracer", who);
        return NULL;
    }
    PyTypeObject *type = tracer->state->recording_type;
    ft_recording *rec = (ft_recording *)type->tp_alloc(type, 0);
    if (rec == NULL) {
        return NULL;
    }
    /* The allocation may collect, and a finalizer clear() the tracer or
     * read it (which makes its recording) meanwhile. */
    if (tracer->recording != NULL || tracer->phase != FT_PHASE_STOPPED) {
        Py_DECREF(rec);
        return ft_tracer_recording(tracer, who);
    }
    /* The tracer's threads and clock stay where the tracer's own code
     * reads them, as views: the recording owns them from here. */
    rec->threads = tracer->threads;
    rec->nthreads = tracer->nthreads;
    rec->clock = tracer->clock;
    rec->start_ns = tracer->start_ns;
    rec->stop_ns = tracer->stop_ns;
    rec->funcs = &tracer->funcs;
    rec->readers_pid = (long)getpid();
    tracer->recording = rec;
    return rec;
}

void
ft_recording_forget(ft_recording *rec)
{
    long pid = (long)getpid();
    if (rec->readers_pid == pid) {
        return;
    }
    Py_ssize_t gone = rec->readers;
    rec->readers = 0;
    rec->readers_pid = pid;
    for (; gone > 0; gone--) {
        Py_DECREF(rec);
    }
}

void
ft_recording_release(ft_tracer *tracer)
{
    ft_recording *rec = tracer->recording;
    if (rec == NULL) {
        ft_free_threads(tracer);
        ft_clock_free(&tracer->clock);
        return;
    }
    if (rec->funcs == &tracer->funcs) {
        /* Readers may still name records: the table goes with them. */
        rec->own = tracer->funcs;
        rec->funcs = &rec->own;
        memset(&tracer->funcs, 0, sizeof(tracer->funcs));
        tracer->funcs.free_head = FT_NO_ID;
    }
    tracer->threads = NULL;
    tracer->nthreads = 0;
    tracer->threads_cap = 0;
    tracer->max_tstate_id = 0;
    ft_budget_reset(tracer);
    memset(&tracer->clock, 0, sizeof(tracer->clock));
    tracer->recording = NULL;
    ft_recording_forget(rec);
    Py_DECREF(rec);
}

PyObject *
ft_tracer_share(ft_tracer *tracer)
{
    ft_recording *rec = ft_tracer_recording(tracer, "_shared()");
    if (rec == NULL) {
        return NULL;
    }
    ft_tracer *view = ft_tracer_like(tracer);
    if (view == NULL) {
        return NULL;
    }
    if (ft_functable_init(&view->funcs) < 0) {
        Py_DECREF(view);
        return PyErr_NoMemory();
    }
    view->recording = (ft_recording *)Py_NewRef(rec);
    view->threads = rec->threads;
    view->nthreads = rec->nthreads;
    view->threads_cap = rec->nthreads;
    view->max_tstate_id = tracer->max_tstate_id;
    view->clock = rec->clock;
    view->start_ns = rec->start_ns;
    view->stop_ns = rec->stop_ns;
    view->intern_failures = tracer->intern_failures;
    view->phase = FT_PHASE_STOPPED;
    return (PyObject *)view;
}

/* ---- the type ---------------------------------------------------------- */

static int
recording_traverse(ft_recording *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    if (self->funcs == &self->own) {
        return ft_functable_traverse(&self->own, visit, arg);
    }
    return 0;
}

static int
recording_clear(ft_recording *self)
{
    /* Unreachable: no reader names a record any more. */
    if (self->funcs == &self->own) {
        ft_functable_clear(&self->own);
    }
    return 0;
}

static void
recording_dealloc(ft_recording *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    recording_clear(self);
    ft_free_thread_array(self->threads, self->nthreads);
    ft_clock_free(&self->clock);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyType_Slot recording_slots[] = {
    {Py_tp_doc, "The records of a stopped tracer or a snapshot (internal)."},
    {Py_tp_dealloc, recording_dealloc},
    {Py_tp_traverse, recording_traverse},
    {Py_tp_clear, recording_clear},
    {0, NULL},
};

static PyType_Spec recording_spec = {
    .name = "frametrace._tracer._Recording",
    .basicsize = sizeof(ft_recording),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = recording_slots,
};

PyTypeObject *
ft_recording_type_new(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &recording_spec,
                                                    NULL);
}
