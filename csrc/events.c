/* getEvents(): replay every thread, then build the Event objects. */
#include "state.h"
#include "replay.h"

#include <stdlib.h>

#define FT_EVENT_FIELDS 12

static PyStructSequence_Field event_fields[] = {
    {"name", "qualified name of the function"},
    {"filename", "source file, or \"<built-in>\" for C functions"},
    {"lineno", "first line of the function; 0 for C functions"},
    {"kind", "\"py\" or \"c\""},
    {"thread_id", "threading.get_ident() of the thread"},
    {"native_thread_id", "threading.get_native_id() of the thread"},
    {"start_ns", "entry, time.monotonic_ns() base"},
    {"end_ns", "exit (or the tracer's stop_ns), time.monotonic_ns() base"},
    {"depth", "nesting depth in its thread; 0 for a root"},
    {"parent", "index of the parent event in the list, or -1"},
    {"open_at_start", "its entry was not recorded (running at start, or "
                      "its record was overwritten): starts at the earliest "
                      "time the records allow"},
    {"open_at_stop", "still running at stop(): ends at the tracer's stop_ns"},
    {NULL, NULL},
};

PyStructSequence_Desc ft_event_desc = {
    .name = "frametrace.Event",
    .doc = "One function execution: a call and its return (or the stop).",
    .fields = event_fields,
    .n_in_sequence = FT_EVENT_FIELDS,
};

enum {
    F_NAME, F_FILENAME, F_LINENO, F_KIND, F_THREAD_ID, F_NATIVE_ID,
    F_START, F_END, F_DEPTH, F_PARENT, F_OPEN_START, F_OPEN_STOP,
    FT_EVENT_FIELDS_END
};
_Static_assert(FT_EVENT_FIELDS_END == FT_EVENT_FIELDS,
               "one field name per field");

static PyObject *
make_event(ft_tracer *tracer, const ft_event *ev, PyObject **linenos,
           PyObject *thread_id, PyObject *native_id)
{
    ft_state *state = tracer->state;
    const ft_func *func = ft_functable_get(&tracer->funcs, ev->func);
    uint32_t idx = ev->func & ~FT_ID_IGNORED;
    if (linenos[idx] == NULL) {
        linenos[idx] = PyLong_FromLong(func->lineno);
        if (linenos[idx] == NULL) {
            return NULL;
        }
    }
    /* What PyStructSequence_New() does, without the two type-dict lookups
     * of the field counts it makes per object (a fifth of getEvents()).  No
     * hidden fields, and untracked like it: its items are str, int and
     * bool, which make no cycles. */
    PyObject *obj = (PyObject *)PyObject_GC_NewVar(PyTupleObject,
                                                   state->event_type,
                                                   FT_EVENT_FIELDS);
    if (obj == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < FT_EVENT_FIELDS; i++) {
        PyStructSequence_SET_ITEM(obj, i, NULL);
    }
    PyObject *start = PyLong_FromLongLong(ev->start_ns);
    PyObject *end = PyLong_FromLongLong(ev->end_ns);
    PyObject *depth = PyLong_FromUnsignedLong(ev->depth);
    PyObject *parent = PyLong_FromLongLong(ev->parent);
    if (!start || !end || !depth || !parent) {
        Py_XDECREF(start);
        Py_XDECREF(end);
        Py_XDECREF(depth);
        Py_XDECREF(parent);
        Py_DECREF(obj);
        return NULL;
    }
    PyStructSequence_SET_ITEM(obj, F_NAME, Py_NewRef(func->name));
    PyStructSequence_SET_ITEM(obj, F_FILENAME, Py_NewRef(func->filename));
    PyStructSequence_SET_ITEM(obj, F_LINENO, Py_NewRef(linenos[idx]));
    PyStructSequence_SET_ITEM(obj, F_KIND,
                              Py_NewRef(ev->is_c ? state->str_c
                                                 : state->str_py));
    PyStructSequence_SET_ITEM(obj, F_THREAD_ID, Py_NewRef(thread_id));
    PyStructSequence_SET_ITEM(obj, F_NATIVE_ID, Py_NewRef(native_id));
    PyStructSequence_SET_ITEM(obj, F_START, start);
    PyStructSequence_SET_ITEM(obj, F_END, end);
    PyStructSequence_SET_ITEM(obj, F_DEPTH, depth);
    PyStructSequence_SET_ITEM(obj, F_PARENT, parent);
    PyStructSequence_SET_ITEM(obj, F_OPEN_START,
                              PyBool_FromLong(ev->open_at_start));
    PyStructSequence_SET_ITEM(obj, F_OPEN_STOP,
                              PyBool_FromLong(ev->open_at_stop));
    return obj;
}

int
ft_replay_all(ft_tracer *tracer, ft_eventvec *vec, size_t **thread_end)
{
    *thread_end = malloc(((size_t)tracer->nthreads + 1) * sizeof(size_t));
    if (*thread_end == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < tracer->nthreads; i++) {
        const ft_thread *th = tracer->threads[i];
        ft_replay_input in = {
            .ring = &th->ring,
            .clock = &tracer->clock,
            .base_ticks = th->base_ticks,
            .base_stack = th->base_stack,
            .base_depth = (size_t)th->base_depth,
            .base_known = 1,
            .stop_stack = th->stop_stack,
            .stop_depth = (size_t)th->stop_depth,
            .stop_ns = tracer->stop_ns,
        };
        if (ft_replay_thread(&in, vec) < 0) {
            return -1;
        }
        (*thread_end)[i] = vec->len;
    }
    return 0;
}

int
ft_export_replay(ft_tracer *tracer, const char *who, ft_eventvec *vec,
                 size_t **thread_end)
{
    if (tracer->phase != FT_PHASE_STOPPED) {
        PyErr_Format(PyExc_RuntimeError, "%s needs a stopped, uncleared "
                     "tracer", who);
        return -1;
    }
    int gc_was_enabled = PyGC_Disable();
    int rc = ft_replay_all(tracer, vec, thread_end);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (rc < 0) {
        PyErr_NoMemory();
    }
    return rc;
}

PyObject *
ft_build_events(ft_tracer *tracer)
{
    ft_eventvec vec = {0};
    size_t *thread_end = NULL;
    PyObject **linenos = NULL;
    PyObject *list = NULL;
    Py_ssize_t nthreads = tracer->nthreads;

    /* GC off throughout: a collection could run Python code and let another
     * thread clear() this tracer under us.  (It would also be pure cost:
     * millions of new tracked objects, none of them garbage.) */
    int gc_was_enabled = PyGC_Disable();
    /* Replay first, in pure C. */
    if (ft_replay_all(tracer, &vec, &thread_end) < 0) {
        goto nomem;
    }
    linenos = calloc((size_t)tracer->funcs.nfuncs + 1, sizeof(PyObject *));
    if (linenos == NULL) {
        goto nomem;
    }
    if (vec.len > (size_t)PY_SSIZE_T_MAX) {
        goto nomem;
    }
    list = PyList_New((Py_ssize_t)vec.len);
    if (list == NULL) {
        goto error;
    }
    size_t pos = 0;
    for (Py_ssize_t i = 0; i < nthreads; i++) {
        const ft_thread *th = tracer->threads[i];
        PyObject *tid = PyLong_FromUnsignedLong(th->thread_id);
        PyObject *nid = PyLong_FromUnsignedLong(th->native_id);
        int failed = tid == NULL || nid == NULL;
        for (; !failed && pos < thread_end[i]; pos++) {
            PyObject *ev = make_event(tracer, &vec.items[pos], linenos, tid,
                                      nid);
            if (ev == NULL) {
                failed = 1;
                break;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)pos, ev);
        }
        Py_XDECREF(tid);
        Py_XDECREF(nid);
        if (failed) {
            Py_CLEAR(list);
            goto error;
        }
    }
    goto done;

nomem:
    PyErr_NoMemory();
error:
    Py_CLEAR(list);
done:
    if (linenos != NULL) {
        for (uint32_t i = 0; i <= tracer->funcs.nfuncs; i++) {
            Py_XDECREF(linenos[i]);
        }
        free(linenos);
    }
    free(thread_end);
    ft_eventvec_free(&vec);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    return list;
}
