/* The sys.monitoring (PEP 669) backend's hot path, CPython 3.12+: the same
 * records as the PyEval_SetProfile hook, from callbacks sys.monitoring calls
 * for every thread of the interpreter.  A callback finds its thread's ring
 * through a thread-local cache (ft_cached_thread()); the first event of a
 * thread takes the slow path (ft_thread_of_caller(), threads.c).
 *
 * Also ft_monitor_start()/ft_monitor_stop(), which lifecycle.c calls: they
 * hand the table of this file's callbacks to the tool id, and the table
 * stays private here.  Not here: taking and freeing the tool id and the
 * callback type (monitor_tool.c), naming C functions (cnames.c). */
#include "state.h"
#include "threads.h"

#if FT_HAVE_MONITORING

#include <stdlib.h>
#include <string.h>

static inline ft_tracer *
active_tracer(PyObject *self)
{
    ft_tracer *tracer = ((ft_hookobject *)self)->tracer;
    return tracer != NULL && tracer->phase == FT_PHASE_ACTIVE ? tracer : NULL;
}

static inline ft_thread *
current_thread(ft_tracer *tracer, int starting)
{
    ft_thread *th = ft_cached_thread(tracer);
    return th != NULL ? th : ft_thread_of_caller(tracer, starting);
}

/* The callbacks' result.  None is immortal on 3.12+: no reference to
 * count, so the recording functions below can end in tail calls and the
 * common case needs no stack frame. */
#define NONE Py_None

/* What a callback returns for code that is ignored: DISABLE if the
 * filters ignore it and the event may be disabled (may_disable: PY_START,
 * PY_RESUME, PY_RETURN, PY_YIELD), which spares every later event at that
 * place of the code, under this tracer and the next ones
 * (restart_if_filters_changed() undoes it when the filters change).  Else None: PY_THROW and
 * PY_UNWIND must not return DISABLE (CPython raises ValueError in the
 * traced code), nor code that only _ignore() ignores (its DISABLE would
 * outlive the tracer unnoticed). */
static FT_NOINLINE PyObject *
ignored_result(ft_tracer *tracer, uint32_t id, int may_disable)
{
    if (!may_disable || id == FT_NO_ID
        || !ft_functable_get(&tracer->funcs, id)->filtered
        || tracer->state->monitoring_disable == NULL) {
        return NONE;
    }
    /* Noted before it is returned (pure C: the spec it may replace is a
     * tuple of str, whose release runs no Python code). */
    ft_state *state = tracer->state;
    if (state->disabled_spec != tracer->filters.spec) {
        Py_XSETREF(state->disabled_spec, Py_NewRef(tracer->filters.spec));
    }
    return Py_NewRef(state->monitoring_disable);
}

/* record_code() for what its common case leaves: ignored code too. */
static FT_NOINLINE PyObject *
record_code_general(ft_tracer *tracer, PyObject *code, uint32_t kind,
                    int64_t ts, int may_disable)
{
    if (!PyCode_Check(code)) {
        return NONE;
    }
    uint32_t id = ft_functable_find(&tracer->funcs, code);
    if (id == FT_NO_ID) {
        id = ft_intern_code(tracer, (PyCodeObject *)code, NULL);
    }
    if (ft_id_ignored(id)) {
        return ignored_result(tracer, id, may_disable);
    }
    ft_thread *th = current_thread(tracer, kind == FT_REC_CALL);
    if (th == NULL) {
        return NONE;
    }
    ft_record_id(tracer, th, NULL, ts, id, kind);
    return NONE;
}

static FT_NOINLINE PyObject *
record_code_now(ft_tracer *tracer, PyObject *code, uint32_t kind,
                int may_disable)
{
    return record_code_general(tracer, code, kind,
                               ft_clock_ticks(&tracer->clock), may_disable);
}

static inline PyObject *
record_code(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
            uint32_t kind, int may_disable)
{
    ft_tracer *tracer = active_tracer(self);
    if (FT_UNLIKELY(tracer == NULL || nargs < 1)) {
        return NONE;
    }
    /* The common case inline, with no call that would need a stack frame:
     * the cycle counter, the thread seen before, a code object seen
     * before, a one-word record, a ring with room. */
    PyObject *code = args[0];
    if (FT_UNLIKELY(!tracer->clock.use_cycles)) {
        return record_code_now(tracer, code, kind, may_disable);
    }
    int64_t ts = ft_cycles();
    ft_thread *th = ft_cached_thread(tracer);
    if (FT_LIKELY(th != NULL && Py_IS_TYPE(code, &PyCode_Type)
                  && ft_ring_try_push(&th->ring, ts,
                                      ft_functable_find(&tracer->funcs, code),
                                      kind))) {
        return NONE;
    }
    /* Ignored code included: its DISABLE is returned once per place. */
    return record_code_general(tracer, code, kind, ts, may_disable);
}

/* What CPython's own profile layer (on sys.monitoring) reports as a C call:
 * builtin functions and methods, method descriptors called with a self of
 * their type (arg0), and on 3.13 a bound method wrapping a builtin.
 * *callable becomes what names it. */
static inline const void *
c_function_key(PyObject **callable, PyObject *arg0)
{
    PyObject *func = *callable;
    PyTypeObject *type = Py_TYPE(func);
    /* CALL fires for every call: exact types first, so that a Python
     * function or a class costs no PyType_IsSubtype() call. */
    if (type == &PyCFunction_Type || type == &PyCMethod_Type) {
        return ((PyCFunctionObject *)func)->m_ml;
    }
    if (type == &PyFunction_Type || PyType_Check(func)) {
        return NULL;
    }
    if (type == &PyMethodDescr_Type) {
        /* With no self, or one of another type, it cannot be bound, and the
         * profile layer reports nothing. */
        if (!PyObject_TypeCheck(arg0, PyDescr_TYPE(func))) {
            return NULL;
        }
        return ((PyMethodDescrObject *)func)->d_method;
    }
#if FT_PROFILE_UNWRAPS_BOUND_C
    if (type == &PyMethod_Type) {
        PyObject *inner = PyMethod_GET_FUNCTION(func);
        if (Py_IS_TYPE(inner, &PyFunction_Type) || !PyCFunction_Check(inner)) {
            return NULL;
        }
        *callable = inner;
        return ((PyCFunctionObject *)inner)->m_ml;
    }
#endif
    if (PyCFunction_Check(func)) {  /* a subclass */
        return ((PyCFunctionObject *)func)->m_ml;
    }
    return NULL;
}

/* record_c() for what its common case leaves: the thread's first event,
 * a C function seen for the first time, and the rest of ft_record_id().
 * key: from c_function_key(), not NULL. */
static FT_NOINLINE PyObject *
record_c_general(ft_tracer *tracer, PyObject *const *args, uint32_t kind,
                 int64_t ts, PyObject *callable, const void *key)
{
    uint32_t id = ft_functable_find(&tracer->funcs, key);
    /* Ignored C functions are skipped here, never disabled: a CALL
     * disabled at a call site would hide every callee of that site, and
     * C_RETURN/C_RAISE cannot be disabled. */
    if (ft_id_ignored(id)) {
        return NONE;
    }
    ft_thread *th = current_thread(tracer, 0);
    if (th == NULL) {
        return NONE;
    }
    if (id == FT_NO_ID) {
        PyObject *func = callable;
        PyObject *bound = NULL;
        if (!PyCFunction_Check(func)) {
            /* Named like the bound method the profile hook would see. */
            descrgetfunc get = Py_TYPE(func)->tp_descr_get;
            PyObject *obj = args[3];
            bound = get(func, obj, (PyObject *)Py_TYPE(obj));
            if (bound == NULL) {
                PyErr_Clear();
                th->lost++;
                return NONE;
            }
            func = bound;
        }
        Py_INCREF(tracer);
        id = ft_c_function_id(tracer, func, key);
        int stopped = tracer->phase != FT_PHASE_ACTIVE || Py_REFCNT(tracer) == 1;
        Py_DECREF(tracer);
        Py_XDECREF(bound);
        if (stopped) {
            return NONE;
        }
    }
    ft_record_id(tracer, th, NULL, ts, id, kind);
    return NONE;
}

static FT_NOINLINE PyObject *
record_c_now(ft_tracer *tracer, PyObject *const *args, uint32_t kind,
             PyObject *callable, const void *key)
{
    return record_c_general(tracer, args, kind,
                            ft_clock_ticks(&tracer->clock), callable, key);
}

/* record_c() for a callable of any other type than the common ones: is it
 * a C call at all? */
static FT_NOINLINE PyObject *
record_c_other(ft_tracer *tracer, PyObject *const *args, uint32_t kind)
{
    PyObject *callable = args[2];
    const void *key = c_function_key(&callable, args[3]);
    if (key == NULL) {
        return NONE;  /* a class, a bound Python method, ...: not a C call */
    }
    return record_c_now(tracer, args, kind, callable, key);
}

static inline PyObject *
record_c(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
         uint32_t kind)
{
    ft_tracer *tracer = active_tracer(self);
    if (FT_UNLIKELY(tracer == NULL || nargs < 4)) {
        return NONE;
    }
    /* CALL fires for every call, of Python functions too: those leave
     * first, then the common case runs inline as in record_code(). */
    PyObject *callable = args[2];
    PyTypeObject *type = Py_TYPE(callable);
    const void *key;
    if (type == &PyFunction_Type) {
        return NONE;
    }
    if (type == &PyCFunction_Type) {
        key = ((PyCFunctionObject *)callable)->m_ml;
    }
    else if (type == &PyMethodDescr_Type
             && Py_IS_TYPE(args[3], PyDescr_TYPE(callable))) {
        key = ((PyMethodDescrObject *)callable)->d_method;
    }
    else {
        return record_c_other(tracer, args, kind);
    }
    if (FT_UNLIKELY(!tracer->clock.use_cycles)) {
        return record_c_now(tracer, args, kind, callable, key);
    }
    int64_t ts = ft_cycles();
    ft_thread *th = ft_cached_thread(tracer);
    uint32_t id = ft_functable_find(&tracer->funcs, key);
    if (FT_LIKELY(th != NULL && ft_ring_try_push(&th->ring, ts, id, kind))) {
        return NONE;
    }
    /* An ignored C function: every call's CALL and C_RETURN come here (see
     * record_c_general()); off the recorded events' path. */
    if (ft_id_ignored(id)) {
        return NONE;
    }
    return record_c_general(tracer, args, kind, ts, callable, key);
}

/* The callbacks: objects of their own type, called through their
 * vectorcall slot straight from sys.monitoring, with none of a builtin
 * function's argument handling in between. */
#define CODE_CALLBACK(name, kind, may_disable)                             \
    static PyObject *                                                      \
    name(PyObject *callable, PyObject *const *args, size_t nargsf,         \
         PyObject *Py_UNUSED(kwnames))                                     \
    {                                                                      \
        return record_code(((ft_callback *)callable)->owner, args,         \
                           PyVectorcall_NARGS(nargsf), kind, may_disable); \
    }
#define C_CALLBACK(name, kind)                                             \
    static PyObject *                                                      \
    name(PyObject *callable, PyObject *const *args, size_t nargsf,         \
         PyObject *Py_UNUSED(kwnames))                                     \
    {                                                                      \
        return record_c(((ft_callback *)callable)->owner, args,            \
                        PyVectorcall_NARGS(nargsf), kind);                 \
    }

CODE_CALLBACK(on_start, FT_REC_CALL, 1)
CODE_CALLBACK(on_throw, FT_REC_CALL, 0)
CODE_CALLBACK(on_return, FT_REC_RETURN, 1)
CODE_CALLBACK(on_unwind, FT_REC_RETURN, 0)
C_CALLBACK(on_call, FT_REC_C_CALL)
C_CALLBACK(on_c_return, FT_REC_C_RETURN)
C_CALLBACK(on_c_raise, FT_REC_C_EXCEPTION)

static const vectorcallfunc callback_funcs[FT_MON_NEVENTS] = {
    [FT_MON_PY_START] = on_start,
    [FT_MON_PY_RESUME] = on_start,
    [FT_MON_PY_THROW] = on_throw,
    [FT_MON_PY_RETURN] = on_return,
    [FT_MON_PY_YIELD] = on_return,
    [FT_MON_PY_UNWIND] = on_unwind,
    [FT_MON_CALL] = on_call,
    [FT_MON_C_RETURN] = on_c_return,
    [FT_MON_C_RAISE] = on_c_raise,
};

/* The name the tool id is held under: what sys.monitoring.get_tool(2)
 * shows a program whose cProfile (or other profiler) is refused with
 * "ValueError: Another profiling tool is already active" (3.12, 3.13) or
 * "tool 2 is already in use" (3.14+), messages frametrace cannot change. */
#define TOOL_NAME \
    "frametrace (a Tracer with backend='monitoring' is recording: stop " \
    "it first, or trace with backend='setprofile', which leaves this id " \
    "free)"

/* sys.monitoring.restart_events() when the filters of tracer differ from
 * those under which a callback last returned DISABLE: events a tracer
 * disabled stay disabled for the tool id (and for code that has not run
 * since, even after the tool id was freed) until that call, which
 * re-enables every tool's.  Same filters: what they disabled is what this
 * tracer would ignore anyway.  0, or -1 with an exception. */
static int
restart_if_filters_changed(ft_tracer *tracer)
{
    ft_state *state = tracer->state;
    if (state->monitoring_disable == NULL) {
        PyObject *monitoring = PySys_GetObject("monitoring");  /* borrowed */
        if (monitoring == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is missing");
            return -1;
        }
        state->monitoring_disable = PyObject_GetAttrString(monitoring,
                                                           "DISABLE");
        if (state->monitoring_disable == NULL) {
            return -1;
        }
    }
    if (state->disabled_spec == NULL) {
        return 0;
    }
    PyObject *spec = tracer->filters.spec;
    int same = spec != NULL
               && PyObject_RichCompareBool(spec, state->disabled_spec, Py_EQ);
    if (same < 0) {
        return -1;
    }
    if (same) {
        return 0;
    }
    PyObject *monitoring = PySys_GetObject("monitoring");  /* borrowed */
    PyObject *res = monitoring == NULL ? NULL
        : PyObject_CallMethod(monitoring, "restart_events", NULL);
    if (res == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is missing");
        }
        return -1;
    }
    Py_DECREF(res);
    state->count_restarts++;
    Py_CLEAR(state->disabled_spec);
    return 0;
}

int
ft_monitor_start(ft_tracer *tracer)
{
    if (restart_if_filters_changed(tracer) < 0) {
        return -1;
    }
    ft_hookobject *owner = PyObject_New(ft_hookobject,
                                        tracer->state->hook_type);
    if (owner == NULL) {
        return -1;
    }
    owner->tracer = tracer;  /* borrowed: cleared by ft_monitor_stop */
    owner->thread = NULL;
    owner->generation = tracer->generation;
    if (ft_monitor_take(tracer->state->callback_type, TOOL_NAME,
                        (PyObject *)owner, callback_funcs, tracer->c_calls,
                        &tracer->monitor_events) < 0) {
        owner->tracer = NULL;
        Py_DECREF(owner);
        return -1;
    }
    tracer->monitor = (PyObject *)owner;
    return 0;
}

int
ft_monitor_stop(ft_tracer *tracer)
{
    PyObject *owner = tracer->monitor;
    if (owner == NULL) {
        return 1;
    }
    /* Inert first: events arriving while the calls below run record
     * nothing.  Held until the callbacks are compared with it. */
    ((ft_hookobject *)owner)->tracer = NULL;
    tracer->monitor = NULL;
    int intact = ft_monitor_release(TOOL_NAME, tracer->state->callback_type,
                                    owner, tracer->monitor_events);
    Py_DECREF(owner);
    return intact;
}

#endif /* FT_HAVE_MONITORING */
