/* frametrace's sys.monitoring tool id: the callback type, taking the id
 * with callbacks on the backend's events, and giving it back (see
 * monitor_tool.h).  Compiled into frametrace._tracer and, for the
 * benchmarks' references, into frametrace._testing. */
#include "monitor_tool.h"
#include "import.h"

#if FT_HAVE_MONITORING

static const char *const event_names[FT_MON_NEVENTS] = {
    "PY_START", "PY_RESUME", "PY_THROW",
    "PY_RETURN", "PY_YIELD", "PY_UNWIND",
    "CALL", "C_RETURN", "C_RAISE",
};

/* ---- the callback type ---------------------------------------------------- */

static void
callback_dealloc(ft_callback *self)
{
    PyTypeObject *type = Py_TYPE(self);
    Py_XDECREF(self->owner);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyMemberDef callback_members[] = {
    {"__vectorcalloffset__", Py_T_PYSSIZET, offsetof(ft_callback, vectorcall),
     Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot callback_slots[] = {
    {Py_tp_doc, "A frametrace sys.monitoring callback (internal)."},
    {Py_tp_dealloc, callback_dealloc},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, callback_members},
    {0, NULL},
};

PyTypeObject *
ft_callback_type_new(PyObject *module, const char *qualified_name)
{
    /* 3.12+ only: the type copies the name and the spec's slots. */
    PyType_Spec spec = {
        .name = qualified_name,
        .basicsize = sizeof(ft_callback),
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
                 | Py_TPFLAGS_DISALLOW_INSTANTIATION
                 | Py_TPFLAGS_HAVE_VECTORCALL,
        .slots = callback_slots,
    };
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &spec, NULL);
}

static PyObject *
new_callback(PyTypeObject *type, PyObject *owner, vectorcallfunc func)
{
    ft_callback *cb = PyObject_New(ft_callback, type);
    if (cb == NULL) {
        return NULL;
    }
    cb->vectorcall = func;
    cb->owner = Py_NewRef(owner);
    return (PyObject *)cb;
}

/* ---- tool id, callbacks, events ------------------------------------------ */

static PyObject *
monitoring_module(void)
{
    PyObject *sys = ft_import("sys");
    if (sys == NULL) {
        return NULL;
    }
    PyObject *mon = PyObject_GetAttrString(sys, "monitoring");
    Py_DECREF(sys);
    return mon;
}

PyObject *
ft_monitor_holder(void)
{
    PyObject *mon = monitoring_module();
    if (mon == NULL) {
        return NULL;
    }
    PyObject *holder = PyObject_CallMethod(mon, "get_tool", "i",
                                           FT_MONITOR_TOOL_ID);
    Py_DECREF(mon);
    return holder;
}

PyObject *
ft_monitor_conflict(void)
{
    PyObject *holder = ft_monitor_holder();
    if (holder == NULL) {
        return NULL;
    }
    if (holder == Py_None) {
        Py_DECREF(holder);
        return NULL;
    }
    PyObject *msg = PyUnicode_FromFormat(
        "another profiler holds sys.monitoring tool id %d (PROFILER_ID): "
        "%R (cProfile uses it on Python 3.12+); stop it before starting "
        "frametrace", FT_MONITOR_TOOL_ID, holder);
    Py_DECREF(holder);
    return msg;
}

/* Registers a callback of type owned by owner for every event (funcs[i] for
 * event i).  *mask: the events' bits, the C ones only if with_c. */
static int
register_callbacks(PyTypeObject *type, PyObject *mon, PyObject *events,
                   PyObject *owner, const vectorcallfunc *funcs, int with_c,
                   long *mask)
{
    *mask = 0;
    for (int i = 0; i < FT_MON_NEVENTS; i++) {
        PyObject *flag = PyObject_GetAttrString(events, event_names[i]);
        if (flag == NULL) {
            return -1;
        }
        long bit = PyLong_AsLong(flag);
        if (bit == -1 && PyErr_Occurred()) {
            Py_DECREF(flag);
            return -1;
        }
        PyObject *cb = new_callback(type, owner, funcs[i]);
        PyObject *res = cb == NULL ? NULL
            : PyObject_CallMethod(mon, "register_callback", "iOO",
                                  FT_MONITOR_TOOL_ID, flag, cb);
        Py_XDECREF(cb);
        Py_DECREF(flag);
        if (res == NULL) {
            return -1;
        }
        Py_DECREF(res);
        if (with_c || i < FT_MON_CALL) {
            *mask |= bit;
        }
    }
    return 0;
}

/* Drops the callbacks of callback_type owned by owner, putting back any
 * other.  0, or -1 with an exception. */
static int
drop_callbacks(PyObject *mon, PyObject *events, PyTypeObject *callback_type,
               PyObject *owner)
{
    for (int i = 0; i < FT_MON_NEVENTS; i++) {
        PyObject *flag = PyObject_GetAttrString(events, event_names[i]);
        PyObject *prev = flag == NULL ? NULL
            : PyObject_CallMethod(mon, "register_callback", "iOO",
                                  FT_MONITOR_TOOL_ID, flag, Py_None);
        if (prev != NULL && prev != Py_None
            && !(Py_IS_TYPE(prev, callback_type)
                 && ((ft_callback *)prev)->owner == owner)) {
            Py_SETREF(prev, PyObject_CallMethod(mon, "register_callback",
                                                "iOO", FT_MONITOR_TOOL_ID,
                                                flag, prev));
        }
        Py_XDECREF(flag);
        if (prev == NULL) {
            return -1;
        }
        Py_DECREF(prev);
    }
    return 0;
}

/* The events the tool id has on (get_events()), or -1 with an exception. */
static long
tool_events(PyObject *mon)
{
    PyObject *res = PyObject_CallMethod(mon, "get_events", "i",
                                        FT_MONITOR_TOOL_ID);
    long bits = res == NULL ? -1 : PyLong_AsLong(res);
    Py_XDECREF(res);
    return bits;
}

int
ft_monitor_take(PyTypeObject *callback_type, const char *name,
                PyObject *owner, const vectorcallfunc *funcs, int c_calls,
                long *events_out)
{
    PyObject *mon = monitoring_module();
    if (mon == NULL) {
        return -1;
    }
    PyObject *events = PyObject_GetAttrString(mon, "events");
    PyObject *res = events == NULL ? NULL
        : PyObject_CallMethod(mon, "use_tool_id", "is", FT_MONITOR_TOOL_ID,
                              name);
    if (res == NULL) {
        Py_XDECREF(events);
        Py_DECREF(mon);
        return -1;
    }
    Py_DECREF(res);
    long mask = 0;
    int rc = register_callbacks(callback_type, mon, events, owner, funcs,
                                c_calls, &mask);
    if (rc == 0) {
        res = PyObject_CallMethod(mon, "set_events", "il", FT_MONITOR_TOOL_ID,
                                  mask);
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    /* As get_events() reports them (without C_RETURN and C_RAISE, which
     * come with CALL): what ft_monitor_release() compares. */
    long reported = rc == 0 ? tool_events(mon) : -1;
    if (reported == -1 && PyErr_Occurred()) {
        rc = -1;
    }
    Py_DECREF(events);
    Py_DECREF(mon);
    if (rc < 0) {
        (void)ft_monitor_release(name, NULL, NULL, -1);  /* keeps the
                                                            exception */
    }
    else if (events_out != NULL) {
        *events_out = reported;
    }
    return rc;
}

/* Registers None for every event; *ours becomes 0 if a callback it
 * replaced was not one of callback_type owned by owner (callback_type NULL:
 * not checked).  0, or -1 with an exception. */
static int
clear_callbacks(PyObject *mon, PyObject *events, PyTypeObject *callback_type,
                PyObject *owner, int *ours)
{
    for (int i = 0; i < FT_MON_NEVENTS; i++) {
        PyObject *flag = PyObject_GetAttrString(events, event_names[i]);
        PyObject *prev = flag == NULL ? NULL
            : PyObject_CallMethod(mon, "register_callback", "iOO",
                                  FT_MONITOR_TOOL_ID, flag, Py_None);
        Py_XDECREF(flag);
        if (prev == NULL) {
            return -1;
        }
        if (callback_type != NULL
            && !(Py_IS_TYPE(prev, callback_type)
                 && ((ft_callback *)prev)->owner == owner)) {
            *ours = 0;
        }
        Py_DECREF(prev);
    }
    return 0;
}

int
ft_monitor_release(const char *name, PyTypeObject *callback_type,
                   PyObject *owner, long events)
{
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    int intact = 1;
    PyObject *res = NULL;
    PyObject *mon = monitoring_module();
    PyObject *flags = mon ? PyObject_GetAttrString(mon, "events") : NULL;
    PyObject *holder = flags ? ft_monitor_holder() : NULL;
    if (holder == NULL) {
        goto done;
    }
    if (holder == Py_None) {
        /* Freed by another tool.  3.12 and 3.13 leave the events and
         * callbacks of a freed id on: take it back to clear ours. */
        intact = 0;
        res = PyObject_CallMethod(mon, "use_tool_id", "is",
                                  FT_MONITOR_TOOL_ID, name);
        if (res == NULL) {
            goto done;
        }
        Py_CLEAR(res);
    }
    else if (!PyUnicode_Check(holder)
             || PyUnicode_CompareWithASCIIString(holder, name) != 0) {
        /* Another tool's now: only our callbacks go, which 3.12 and 3.13
         * keep across free_tool_id(). */
        intact = 0;
        if (callback_type != NULL) {
            (void)drop_callbacks(mon, flags, callback_type, owner);
        }
        goto done;
    }
    if (events >= 0) {
        long now = tool_events(mon);
        if (now == -1 && PyErr_Occurred()) {
            goto done;
        }
        intact = intact && now == events;
    }
    res = PyObject_CallMethod(mon, "set_events", "ii", FT_MONITOR_TOOL_ID, 0);
    if (res == NULL || clear_callbacks(mon, flags, callback_type, owner,
                                       &intact) < 0) {
        goto done;
    }
    Py_DECREF(res);
    res = PyObject_CallMethod(mon, "free_tool_id", "i", FT_MONITOR_TOOL_ID);

done:
    Py_XDECREF(res);
    if (PyErr_Occurred()) {
        if (FT_FINALIZING()) {
            PyErr_Clear();  /* sys.monitoring goes away with the interpreter */
        }
        else {
            PyErr_WriteUnraisable(NULL);
        }
    }
    Py_XDECREF(holder);
    Py_XDECREF(flags);
    Py_XDECREF(mon);
    FT_RESTORE_EXC(saved);
    return intact;
}

#endif /* FT_HAVE_MONITORING */
