/* The Tracer heap type: its constructor and argument checking, thin
 * methods, attributes, GC support.  What start() and stop() do is in
 * lifecycle.c, recording in hook.c/monitor.c, the replay behind
 * getEvents() in replay.c/events.c, the writers in export_*.c. */
#include "state.h"
#include "lifecycle.h"
#include "recording.h"
#include "snapshot.h"
#include "threads.h"

#include <stdlib.h>
#include <string.h>

static const char *const backend_names[] = {"setprofile", "monitoring"};

/* ValueError: the environment variable name has a value frametrace does
 * not understand; takes says what it takes.  Always -1. */
static int
bad_env(const char *name, const char *takes)
{
    PyObject *value = PyUnicode_DecodeFSDefault(getenv(name));
    if (value != NULL) {
        PyErr_Format(PyExc_ValueError, "%s must be %s, got %R", name, takes,
                     value);
        Py_DECREF(value);
    }
    return -1;
}

/* What FRAMETRACE_BACKEND asks for; unset or empty: auto. */
enum { BACKEND_ENV_AUTO, BACKEND_ENV_SETPROFILE, BACKEND_ENV_MONITORING,
       BACKEND_ENV_BAD };

static int
backend_env(void)
{
    const char *env = getenv("FRAMETRACE_BACKEND");
    if (env == NULL || env[0] == '\0' || strcmp(env, "auto") == 0) {
        return BACKEND_ENV_AUTO;
    }
    if (strcmp(env, "setprofile") == 0) {
        return BACKEND_ENV_SETPROFILE;
    }
    if (strcmp(env, "monitoring") == 0) {
        return BACKEND_ENV_MONITORING;
    }
    return BACKEND_ENV_BAD;
}

/* Settings are checked where a tracer is made: a value not understood is
 * refused, never taken for the default. */
static int
check_env(void)
{
    if (ft_clock_env() == FT_CLOCK_ENV_BAD) {
        return bad_env("FRAMETRACE_CLOCK", "\"auto\" (the default: the CPU's "
                       "cycle counter where it is usable) or \"monotonic\"");
    }
    if (backend_env() == BACKEND_ENV_BAD) {
        return bad_env("FRAMETRACE_BACKEND", "\"auto\" (the default), "
                       "\"setprofile\" or \"monitoring\"");
    }
    return 0;
}

/* The backend "auto" picks: sys.monitoring where there is one (cheaper per
 * event, see benchmarks/README.md), unless FRAMETRACE_BACKEND names one
 * (check_env() has refused any other value); -1 with an exception. */
static int
default_backend(void)
{
    int env = backend_env();
    if (env == BACKEND_ENV_SETPROFILE) {
        return FT_BACKEND_SETPROFILE;
    }
    if (env == BACKEND_ENV_MONITORING && !FT_HAVE_MONITORING) {
        PyErr_SetString(PyExc_ValueError, "FRAMETRACE_BACKEND=monitoring needs "
                        "sys.monitoring (CPython 3.12+); this Python has only "
                        "\"setprofile\" (or leave FRAMETRACE_BACKEND unset)");
        return -1;
    }
    return FT_HAVE_MONITORING ? FT_BACKEND_MONITORING : FT_BACKEND_SETPROFILE;
}

/* FT_BACKEND_* of the backend argument (NULL: "auto"), or -1 with an
 * exception. */
static int
parse_backend(PyObject *obj)
{
    if (obj == NULL || obj == Py_None) {
        return default_backend();
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "backend must be a str (\"auto\", "
                     "\"setprofile\" or \"monitoring\"), not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyUnicode_CompareWithASCIIString(obj, "auto") == 0) {
        return default_backend();
    }
    if (PyUnicode_CompareWithASCIIString(obj, "setprofile") == 0) {
        return FT_BACKEND_SETPROFILE;
    }
    if (PyUnicode_CompareWithASCIIString(obj, "monitoring") == 0) {
        if (!FT_HAVE_MONITORING) {
            PyErr_SetString(PyExc_ValueError, "backend=\"monitoring\" needs "
                            "sys.monitoring (CPython 3.12+); this Python has "
                            "only \"setprofile\"");
            return -1;
        }
        return FT_BACKEND_MONITORING;
    }
    PyErr_Format(PyExc_ValueError, "backend must be \"auto\", \"setprofile\" "
                 "or \"monitoring\", got %R", obj);
    return -1;
}

static PyObject *
tracer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"buffer_size", "c_calls", "backend",
                             "max_memory", "ignore", "include", NULL};
    PyObject *ignore_obj = NULL;
    PyObject *include_obj = NULL;
    PyObject *size_obj = NULL;
    PyObject *c_calls_obj = Py_True;
    PyObject *backend_obj = NULL;
    PyObject *max_obj = NULL;
    long long buffer_size = FT_DEFAULT_BUFFER_SIZE;
    long long max_memory = FT_DEFAULT_MAX_MEMORY;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$OOOOO:Tracer", kwlist,
                                     &size_obj, &c_calls_obj, &backend_obj,
                                     &max_obj, &ignore_obj, &include_obj)) {
        return NULL;
    }
    if (check_env() < 0) {
        return NULL;
    }
    int backend = parse_backend(backend_obj);
    if (backend < 0) {
        return NULL;
    }
    if (size_obj != NULL) {
        if (!PyLong_Check(size_obj) || PyBool_Check(size_obj)) {
            PyErr_Format(PyExc_TypeError,
                         "buffer_size must be an int (records per thread), "
                         "not %.100s", Py_TYPE(size_obj)->tp_name);
            return NULL;
        }
        int overflow;
        buffer_size = PyLong_AsLongLongAndOverflow(size_obj, &overflow);
        if (buffer_size == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow || buffer_size < 1 || buffer_size > FT_MAX_BUFFER_SIZE) {
            PyErr_Format(PyExc_ValueError,
                         "buffer_size must be between 1 and %lld records per "
                         "thread, got %R", FT_MAX_BUFFER_SIZE, size_obj);
            return NULL;
        }
    }
    if (max_obj != NULL) {
        if (!PyLong_Check(max_obj) || PyBool_Check(max_obj)) {
            PyErr_Format(PyExc_TypeError,
                         "max_memory must be an int (bytes), not %.100s",
                         Py_TYPE(max_obj)->tp_name);
            return NULL;
        }
        int overflow;
        max_memory = PyLong_AsLongLongAndOverflow(max_obj, &overflow);
        if (max_memory == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow || max_memory < 1) {
            PyErr_Format(PyExc_ValueError,
                         "max_memory must be between 1 and %lld bytes, got %R",
                         LLONG_MAX, max_obj);
            return NULL;
        }
    }
    if (!PyBool_Check(c_calls_obj)) {
        PyErr_Format(PyExc_TypeError, "c_calls must be a bool, not %.100s",
                     Py_TYPE(c_calls_obj)->tp_name);
        return NULL;
    }
    ft_state *state = ft_state_of_type(type);
    if (state == NULL) {
        return NULL;
    }
    ft_filters filters;
    if (ft_filters_init(&filters, include_obj, ignore_obj) < 0) {
        return NULL;
    }
    ft_tracer *self = (ft_tracer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        ft_filters_clear(&filters);
        return NULL;
    }
    self->filters = filters;
    self->state = state;
    self->buffer_size = (uint64_t)buffer_size;
    ft_budget_init(self, (uint64_t)max_memory);
    self->release.at = FT_RELEASE_MIN;
    self->c_calls = c_calls_obj == Py_True;
    self->backend = backend;
    self->phase = FT_PHASE_NEW;
    self->clock.use_cycles = ft_clock_cycles_usable();
    if (ft_functable_init(&self->funcs) < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

ft_tracer *
ft_tracer_like(ft_tracer *tracer)
{
    PyTypeObject *type = Py_TYPE(tracer);
    ft_tracer *self = (ft_tracer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->state = tracer->state;
    self->buffer_size = tracer->buffer_size;
    ft_budget_init(self, tracer->budget.max_memory);
    self->release.at = FT_RELEASE_MIN;
    self->c_calls = tracer->c_calls;
    self->backend = tracer->backend;
    self->phase = FT_PHASE_NEW;
    self->clock.use_cycles = tracer->clock.use_cycles;
    if (ft_filters_init(&self->filters, tracer->filters.include_obj,
                        tracer->filters.ignore_obj) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return self;
}

/* ---- methods ---------------------------------------------------------- */

/* None, or NULL where rc says the call failed (its exception set). */
static PyObject *
none_or_null(int rc)
{
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
tracer_start(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    return none_or_null(ft_tracer_start(self));
}

static PyObject *
tracer_arm(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    return none_or_null(ft_tracer_arm(self));
}

static PyObject *
tracer_disarm(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    return none_or_null(ft_tracer_disarm(self));
}

/* stop() and __exit__: the latched stop, its warnings, and the
 * recording made (once; an armed tracer that stopped is new again). */
static int
stop_and_record(ft_tracer *self)
{
    if (ft_tracer_stop(self) < 0 || ft_tracer_warn_displaced(self) < 0) {
        return -1;
    }
    if (self->phase == FT_PHASE_STOPPED
        && ft_tracer_recording(self, "stop()") == NULL) {
        return -1;
    }
    return 0;
}

static PyObject *
tracer_stop(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    if (stop_and_record(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
tracer_snapshot(ft_tracer *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"since", NULL};
    PyObject *since = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:snapshot", kwlist,
                                     &since)) {
        return NULL;
    }
    return ft_tracer_snapshot(self, since);
}

static PyObject *
tracer_mark(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    return ft_tracer_mark(self);
}

static PyObject *
tracer_release_functions(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    if (self->phase != FT_PHASE_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError, "release_functions() needs a "
                        "tracer that is recording");
        return NULL;
    }
    int64_t freed = ft_release_functions(self);
    return freed < 0 ? NULL : PyLong_FromLongLong(freed);
}

static PyObject *
tracer_enter(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *res = tracer_start(self, NULL);
    if (res == NULL) {
        return NULL;
    }
    Py_DECREF(res);
    return Py_NewRef(self);
}

static PyObject *
tracer_exit(ft_tracer *self, PyObject *const *Py_UNUSED(args),
            Py_ssize_t Py_UNUSED(nargs))
{
    if (stop_and_record(self) < 0) {
        return NULL;
    }
    Py_RETURN_FALSE;
}

static int
check_stopped(ft_tracer *self, const char *what)
{
    switch (self->phase) {
    case FT_PHASE_NEW:
    case FT_PHASE_ARMED:
        PyErr_Format(PyExc_RuntimeError,
                     "%s called before start(): nothing was recorded", what);
        return -1;
    case FT_PHASE_ACTIVE:
        PyErr_Format(PyExc_RuntimeError,
                     "%s called while the tracer is active: call stop() "
                     "first", what);
        return -1;
    case FT_PHASE_CLEARED:
        PyErr_Format(PyExc_RuntimeError,
                     "%s called after clear(): the records are gone", what);
        return -1;
    }
    return 0;
}

static PyObject *
tracer_get_events(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    if (check_stopped(self, "getEvents()") < 0) {
        return NULL;
    }
    ft_recording *rec = ft_tracer_recording(self, "getEvents()");
    if (rec == NULL) {
        return NULL;
    }
    Py_INCREF(rec);
    PyObject *events = ft_build_events(self->state, rec);
    Py_DECREF(rec);
    return events;
}

static PyObject *
tracer_shared(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    if (check_stopped(self, "_shared()") < 0) {
        return NULL;
    }
    return ft_tracer_share(self);
}

static void
tracer_release(ft_tracer *self)
{
    ft_recording_release(self);  /* readers keep theirs */
    ft_functable_clear(&self->funcs);
}

static PyObject *
tracer_clear_method(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    if (ft_check_not_in_call(self, "clear()") < 0) {
        return NULL;
    }
    if (self->phase == FT_PHASE_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError,
                        "clear() called while the tracer is active: call "
                        "stop() first");
        return NULL;
    }
    if (self->phase == FT_PHASE_STOPPED) {
        tracer_release(self);
        self->phase = FT_PHASE_CLEARED;
    }
    Py_RETURN_NONE;
}

/* ---- attributes -------------------------------------------------------- */

/* Whether the events dropped can be known: 1 (counted), 0
 * (None: still recording), -1 (error). */
static int
dropped_known(ft_tracer *self)
{
    if (self->phase == FT_PHASE_ACTIVE) {
        return 0;
    }
    if (self->phase == FT_PHASE_STOPPED) {
        return ft_count_dropped(self) < 0 ? -1 : 1;
    }
    return 1;  /* new or cleared: no threads */
}

static PyObject *
tracer_get_backend(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(backend_names[self->backend]);
}

static PyObject *
tracer_get_start_ns(ft_tracer *self, void *Py_UNUSED(closure))
{
    if (self->phase == FT_PHASE_NEW || self->phase == FT_PHASE_ARMED) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(self->start_ns);
}

static PyObject *
tracer_get_stop_ns(ft_tracer *self, void *Py_UNUSED(closure))
{
    if (self->phase == FT_PHASE_NEW || self->phase == FT_PHASE_ARMED
        || self->phase == FT_PHASE_ACTIVE) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(self->stop_ns);
}

static PyObject *
tracer_get_active(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->phase == FT_PHASE_ACTIVE);
}

static PyObject *
tracer_get_armed(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->phase == FT_PHASE_ARMED);
}

static PyObject *
tracer_get_stats(ft_tracer *self, void *Py_UNUSED(closure))
{
    int known = dropped_known(self);
    if (known < 0) {
        return NULL;
    }
    uint64_t events = 0, records = 0;
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        events += self->threads[i]->dropped_events;
        records += ft_thread_lost_records(self->threads[i]);
    }
    PyObject *stats = PyStructSequence_New(self->state->stats_type);
    if (stats == NULL) {
        return NULL;
    }
    PyObject *values[2] = {
        known ? PyLong_FromUnsignedLongLong(events) : Py_NewRef(Py_None),
        PyLong_FromUnsignedLongLong(records),
    };
    int failed = 0;
    for (Py_ssize_t i = 0; i < 2; i++) {
        failed |= values[i] == NULL;
        PyStructSequence_SetItem(stats, i, values[i]);  /* steals */
    }
    if (failed) {
        Py_DECREF(stats);
        return NULL;
    }
    return stats;
}

static PyStructSequence_Field stats_fields[] = {
    {"dropped", "events (function executions) lost entirely, all threads: "
                "both records gone, overwritten by the ring or never stored; "
                "counted by replaying the records after stop(), None while "
                "tracing.  An event with one record lost is kept, flagged "
                "open_at_start or open_at_stop (each thread's: "
                "ThreadInfo.dropped)"},
    {"dropped_records", "records lost, all threads (a call and a return are "
                        "two): overwritten by the ring or never stored (no "
                        "memory)"},
    {NULL, NULL},
};

static PyStructSequence_Desc stats_desc = {
    .name = "frametrace.Stats",
    .doc = "What a trace lost: Stats(dropped, dropped_records); "
           "tracer.stats, Trace.stats",
    .fields = stats_fields,
    .n_in_sequence = 2,
};

PyTypeObject *
ft_stats_type_new(void)
{
    return PyStructSequence_NewType(&stats_desc);
}

/* ---- threads ------------------------------------------------------------ */

/* A list of one item(self, i, arg) per thread, in registration order. */
static PyObject *
per_thread(ft_tracer *self,
           PyObject *(*item)(ft_tracer *, Py_ssize_t, const void *),
           const void *arg)
{
    PyObject *result = PyList_New(self->nthreads);
    for (Py_ssize_t i = 0; result && i < self->nthreads; i++) {
        PyObject *one = item(self, i, arg);
        if (one == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, one);
    }
    return result;
}

static PyObject *
thread_info_item(ft_tracer *self, Py_ssize_t i, const void *known)
{
    PyObject *dropped = *(const int *)known
        ? PyLong_FromUnsignedLongLong(self->threads[i]->dropped_events)
        : Py_NewRef(Py_None);
    PyObject *info = dropped ? ft_thread_info(self, i, dropped) : NULL;
    Py_XDECREF(dropped);
    return info;
}

static PyObject *
tracer_get_thread_infos(ft_tracer *self, void *Py_UNUSED(closure))
{
    int known = dropped_known(self);
    return known < 0 ? NULL : per_thread(self, thread_info_item, &known);
}

static PyObject *
tid_item(ft_tracer *Py_UNUSED(self), Py_ssize_t i, const void *tids)
{
    return PyLong_FromUnsignedLongLong(((const uint64_t *)tids)[i]);
}

static PyObject *
tracer_get_export_tids(ft_tracer *self, void *Py_UNUSED(closure))
{
    uint64_t *tids = ft_export_tids(self);
    if (tids == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *result = per_thread(self, tid_item, tids);
    free(tids);
    return result;
}

static PyObject *
ident_pair_item(ft_tracer *self, Py_ssize_t i, const void *Py_UNUSED(arg))
{
    const ft_thread *th = self->threads[i];
    return Py_BuildValue("(kk)", th->thread_id, th->native_id);
}

static PyObject *
tracer_get_threads(ft_tracer *self, void *Py_UNUSED(closure))
{
    return per_thread(self, ident_pair_item, NULL);
}

static PyObject *
tracer_get_displaced(ft_tracer *self, void *Py_UNUSED(closure))
{
    return ft_displaced_list(self);
}

static PyObject *
tracer_ignore(ft_tracer *self, PyObject *obj)
{
    PyObject *code = obj;
    if (PyFunction_Check(obj)) {
        code = PyFunction_GET_CODE(obj);
    }
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "_ignore() takes a function or a code "
                     "object, not %.100s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (self->phase == FT_PHASE_CLEARED) {
        PyErr_SetString(PyExc_RuntimeError, "_ignore() called after clear()");
        return NULL;
    }
    if (ft_functable_ignore_code(&self->funcs, (PyCodeObject *)code) < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

static PyObject *
tracer_get_buffer_size(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->buffer_size);
}

static PyObject *
tracer_get_max_memory(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->budget.max_memory);
}

static PyObject *
tracer_get_ring_bytes(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->budget.ring_bytes);
}

static PyObject *
tracer_get_functions_held(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(ft_functable_held(&self->funcs));
}

static PyObject *
tracer_get_functions_freed(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->funcs.freed);
}

static PyObject *
tracer_get_clock(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(self->clock.use_cycles ? "cycles" : "monotonic");
}

static PyObject *
tracer_get_anchor_widths_ns(ft_tracer *self, void *Py_UNUSED(closure))
{
    PyObject *widths = PyTuple_New((Py_ssize_t)self->clock.nanchors);
    for (size_t i = 0; widths != NULL && i < self->clock.nanchors; i++) {
        PyObject *w = PyLong_FromLongLong(ft_clock_width_ns(&self->clock, i));
        if (w == NULL) {
            Py_CLEAR(widths);
            break;
        }
        PyTuple_SET_ITEM(widths, (Py_ssize_t)i, w);
    }
    return widths;
}

static PyObject *
tracer_get_ignore(ft_tracer *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->filters.ignore_obj);
}

static PyObject *
tracer_get_include(ft_tracer *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->filters.include_obj);
}

static PyObject *
tracer_get_c_calls(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->c_calls);
}

/* ---- type slots -------------------------------------------------------- */

static int
tracer_traverse(ft_tracer *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->install.per_thread);
    Py_VISIT(self->install.shared);
    Py_VISIT(self->install.prev_threading);
    Py_VISIT(self->monitor);
    Py_VISIT(self->armed.names);
    Py_VISIT(self->recording);
    return ft_functable_traverse(&self->funcs, visit, arg);
}

/* Unreachable or unreferenced while tracing (state->active and the hooks
 * point at it without owning it): stopped here, before tp_clear and
 * tp_dealloc, since stopping runs Python code (audit hooks, threading). */
static void
tracer_finalize(ft_tracer *self)
{
    ft_tracer_finalize(self);
}

static int
tracer_clear(ft_tracer *self)
{
    /* Still active only if the finalizer ran earlier (a resurrected tracer
     * started again): made inert in pure C, or the hooks would dangle. */
    ft_tracer_silence(self);
    Py_CLEAR(self->install.per_thread);
    Py_CLEAR(self->install.shared);
    Py_CLEAR(self->install.prev_threading);
    Py_CLEAR(self->monitor);
    Py_CLEAR(self->armed.names);
    /* The function table may hold a reference back to this tracer (a code
     * object whose constants reach it): release it to break the cycle. */
    if (self->phase == FT_PHASE_STOPPED) {
        self->phase = FT_PHASE_CLEARED;
    }
    tracer_release(self);
    return 0;
}

static void
tracer_dealloc(ft_tracer *self)
{
    PyTypeObject *type = Py_TYPE(self);
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0) {
        return;  /* resurrected by code the stop ran */
    }
    PyObject_GC_UnTrack(self);
    /* Inert before weakref callbacks run Python code: until the hooks are
     * gone, they may touch this tracer. */
    ft_tracer_silence(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    tracer_clear(self);
    tracer_release(self);
    ft_filters_clear(&self->filters);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef tracer_methods[] = {
    {"start", (PyCFunction)tracer_start, METH_NOARGS,
     "start($self, /)\n--\n\n"
     "Install the hook on every thread and start recording; on an armed "
     "tracer, only start recording (pure C: no Python code runs).  An "
     "interrupt (KeyboardInterrupt) raised into the Python code it runs "
     "is raised once that is undone: the tracer is as before the call."},
    {"stop", (PyCFunction)tracer_stop, METH_NOARGS,
     "stop($self, /)\n--\n\n"
     "Stop recording and latch stop_ns.  Later calls do nothing.  On an "
     "armed tracer: disarm().  An interrupt (KeyboardInterrupt) raised "
     "into the Python code it runs is raised once the tracer is stopped."},
    {"snapshot", (PyCFunction)(void (*)(void))tracer_snapshot,
     METH_VARARGS | METH_KEYWORDS,
     "snapshot($self, /, *, since=None)\n--\n\n"
     "The records so far, while recording goes on: a new, stopped Tracer "
     "(same type and options) holding a copy of every thread's retained "
     "records, as if this one had stopped now.  Its stop_ns is the "
     "snapshot time: frames running then end there (open_at_stop), no "
     "event ends after it; getEvents(), the writers and the reports work "
     "on it as on any stopped tracer, and clear() frees its copy.  "
     "since: a mark() of this tracer: the snapshot is the window from the "
     "mark on (its start_ns), copying only the records since (frames "
     "running at the mark start there, open_at_start).  Costs a copy of "
     "the records with the GIL held (other threads wait).  RuntimeError "
     "unless recording."},
    {"mark", (PyCFunction)tracer_mark, METH_NOARGS,
     "mark($self, /)\n--\n\n"
     "Where every thread's records are now (bytes, opaque), for "
     "snapshot(since=mark): a step's start, say.  Cheap: a few words per "
     "thread.  RuntimeError unless recording."},
    {"release_functions", (PyCFunction)tracer_release_functions, METH_NOARGS,
     "release_functions($self, /)\n--\n\n"
     "Sweep the function table now: entries that no retained record "
     "references are released (their function gets a new id if it runs "
     "again), and those released by an earlier sweep and still "
     "unreferenced are freed, their code objects let go.  Returns how "
     "many were freed.  The tracer sweeps by itself as the table grows "
     "(at mark(), and from the main thread); RuntimeError unless "
     "recording."},
    {"arm", (PyCFunction)tracer_arm, METH_NOARGS,
     "arm($self, /)\n--\n\n"
     "Do everything costly of start() now, recording off: conflict checks, "
     "thread names, the caller's ring, the hook on every thread or the "
     "sys.monitoring tool id with its events (CPython 3.12+ instruments "
     "the code as it runs from here).  start() then only registers the "
     "threads and turns recording on, running no Python code.  An "
     "interrupt raised meanwhile: as start()'s."},
    {"disarm", (PyCFunction)tracer_disarm, METH_NOARGS,
     "disarm($self, /)\n--\n\n"
     "Undo arm(): remove the hook (or free the tool id); the tracer can be "
     "armed or started again.  Does nothing unless armed."},
    {"getEvents", (PyCFunction)tracer_get_events, METH_NOARGS,
     "getEvents($self, /)\n--\n\n"
     "The recorded events, complete and nested; none ends after stop_ns.  "
     "(camelCase: the name the first frametrace gave it, which scripts "
     "call; one name, no snake_case alias.)"},
    {"clear", (PyCFunction)tracer_clear_method, METH_NOARGS,
     "clear($self, /)\n--\n\n"
     "Free the records and the references held to traced functions.  "
     "Records that a write running in another thread reads, or a Trace "
     "made of this tracer holds, are freed when the last of them ends."},
    {"_shared", (PyCFunction)tracer_shared, METH_NOARGS,
     "_shared($self, /)\n--\n\n"
     "A new stopped Tracer sharing this one's records (no copy), which a "
     "later clear() of this one leaves whole: what a Trace keeps."},
    {"_write_chrome", (PyCFunction)(void (*)(void))ft_write_chrome,
     METH_VARARGS | METH_KEYWORDS,
     "_write_chrome($self, path, *, pid, origin_ns, head, prelude, "
     "compress=False, progress=None, name=path)\n--\n\n"
     "Write the events as Chrome trace JSON, straight from the records; "
     "returns (how many, the largest depth).  head and prelude are JSON the caller renders: "
     "see frametrace.export.write_chrome().  name: the path errors show "
     "(path is the caller's temporary)."},
    {"_write_perfetto", (PyCFunction)(void (*)(void))ft_write_perfetto,
     METH_VARARGS | METH_KEYWORDS,
     "_write_perfetto($self, path, *, pid, process_name, thread_names, "
     "tracks, compress=False, progress=None, name=path)\n--\n\n"
     "Write the events as a Perfetto protobuf trace, straight from the "
     "records; returns (how many, the largest depth).  See "
     "frametrace.export.write_perfetto().  "
     "name: the path errors show (path is the caller's temporary)."},
    {"_ignore", (PyCFunction)tracer_ignore, METH_O,
     "_ignore($self, func, /)\n--\n\n"
     "Never record frames of this function or code object (frametrace's own "
     "session code).  Its callees are still recorded."},
    {"__enter__", (PyCFunction)tracer_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nStart tracing; return the tracer."},
    {"__exit__", (PyCFunction)(void (*)(void))tracer_exit, METH_FASTCALL,
     "__exit__($self, *exc_info, /)\n--\n\nStop tracing (a no-op if stopped)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tracer_getset[] = {
    {"start_ns", (getter)tracer_get_start_ns, NULL,
     "time.monotonic_ns() when tracing started, or None", NULL},
    {"stop_ns", (getter)tracer_get_stop_ns, NULL,
     "time.monotonic_ns() latched by the first stop(), or None", NULL},
    {"active", (getter)tracer_get_active, NULL, "True while tracing", NULL},
    {"armed", (getter)tracer_get_armed, NULL,
     "True between arm() and start() (or disarm()): the hook installed, "
     "nothing recorded", NULL},
    {"stats", (getter)tracer_get_stats, NULL,
     "Stats(dropped, dropped_records): what was lost; dropped is None "
     "while tracing", NULL},
    {"threads", (getter)tracer_get_thread_infos, NULL,
     "[ThreadInfo(serial, thread_id, native_thread_id, name, dropped)]: one "
     "per traced OS thread, in registration order (serial = index + 1), "
     "whatever the reuse of thread ids", NULL},
    {"_export_tids", (getter)tracer_get_export_tids, NULL,
     "[tid] the writers give the threads, in registration order: the native "
     "id (else the ident), or FT_SYNTHETIC_TID_BASE + serial for a tid an "
     "earlier thread had", NULL},
    {"_threads", (getter)tracer_get_threads, NULL,
     "[(thread_id, native_thread_id)] of the traced threads, in the order "
     "of their events (serial = index + 1)", NULL},
    {"displaced", (getter)tracer_get_displaced, NULL,
     "[ThreadInfo(serial, thread_id, native_thread_id, name, None)] of the "
     "threads whose recording ended before stop(): another tool replaced or "
     "removed frametrace's hook on them (stop() warns of each); their frames "
     "still open then end at their last record, flagged open_at_loss", NULL},
    {"buffer_size", (getter)tracer_get_buffer_size, NULL,
     "ring capacity per thread, in 8-byte records: a call and a return "
     "are two (so about buffer_size / 2 events); a record whose function "
     "id or time gap is very large takes two", NULL},
    {"max_memory", (getter)tracer_get_max_memory, NULL,
     "bytes all the threads' rings may hold together: past it, the rings of "
     "threads that ended are packed, then discarded, oldest first, and then "
     "full rings stop growing and wrap; the records lost count in "
     "stats.dropped_records",
     NULL},
    {"ring_bytes", (getter)tracer_get_ring_bytes, NULL,
     "bytes the threads' rings hold now (a ring grows as its thread "
     "records, up to buffer_size records)", NULL},
    {"functions_held", (getter)tracer_get_functions_held, NULL,
     "function table entries holding a function's names (and its code "
     "object or type): bounded while recording, by the sweeps of "
     "release_functions()", NULL},
    {"functions_freed", (getter)tracer_get_functions_freed, NULL,
     "function table entries freed by sweeps so far", NULL},
    {"clock", (getter)tracer_get_clock, NULL,
     "\"cycles\" (the CPU counter, converted to monotonic ns) or "
     "\"monotonic\" (CLOCK_MONOTONIC read directly); FRAMETRACE_CLOCK="
     "monotonic forces the latter", NULL},
    {"anchor_widths_ns", (getter)tracer_get_anchor_widths_ns, NULL,
     "the widths in ns of the clock's anchors (start, those taken while "
     "recording, stop), a tuple: each times pair is off by at most half "
     "its width; 0 with the \"monotonic\" clock", NULL},
    {"backend", (getter)tracer_get_backend, NULL,
     "\"setprofile\" (the PyEval_SetProfile hook) or \"monitoring\" "
     "(sys.monitoring, CPython 3.12+).", NULL},
    {"c_calls", (getter)tracer_get_c_calls, NULL,
     "whether C function calls are recorded", NULL},
    {"ignore", (getter)tracer_get_ignore, NULL,
     "the ignore= patterns, a tuple (empty: none)", NULL},
    {"include", (getter)tracer_get_include, NULL,
     "the include= patterns, a tuple, or None (every function)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef tracer_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ft_tracer, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot tracer_slots[] = {
    {Py_tp_doc,
     "Tracer(buffer_size=1048576, *, c_calls=True, backend='auto', "
     "max_memory=1073741824, ignore=None, include=None)\n--\n\n"
     "Records every Python and C function entry and exit of every thread\n"
     "into per-thread ring buffers of up to buffer_size records, all of\n"
     "them within max_memory bytes.  include= and ignore= (sequences of\n"
     "patterns, see frametrace.filters) leave functions out of the trace."},
    {Py_tp_new, tracer_new},
    {Py_tp_dealloc, tracer_dealloc},
    {Py_tp_finalize, tracer_finalize},
    {Py_tp_traverse, tracer_traverse},
    {Py_tp_clear, tracer_clear},
    {Py_tp_methods, tracer_methods},
    {Py_tp_getset, tracer_getset},
    {Py_tp_members, tracer_members},
    {0, NULL},
};

PyType_Spec ft_tracer_spec = {
    .name = "frametrace._tracer.Tracer",
    .basicsize = sizeof(ft_tracer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = tracer_slots,
};
