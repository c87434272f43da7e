/* frametrace's sys.monitoring tool id: the callback type, taking the id
 * with callbacks on the backend's events, and giving it back (see
 * monitor_tool.h).  Compiled into frametrace._tracer and, for the
 * benchmarks' references, into frametrace._testing. */
#include "monitor_tool.h"

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

PyType_Slot ft_callback_slots[] = {
    {Py_tp_doc, "A frametrace sys.monitoring callback (internal)."},
    {Py_tp_dealloc, callback_dealloc},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_members, callback_members},
    {0, NULL},
};

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
    PyObject *sys = PyImport_ImportModule("sys");
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
 * event i); with no owner, None.  *mask: the events' bits, the C ones only
 * if with_c. */
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
        PyObject *cb = owner == NULL
            ? Py_NewRef(Py_None)
            : new_callback(type, owner, funcs[i]);
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

int
ft_monitor_take(PyTypeObject *callback_type, const char *name,
                PyObject *owner, const vectorcallfunc *funcs, int c_calls)
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
    Py_DECREF(events);
    Py_DECREF(mon);
    if (rc < 0) {
        ft_monitor_release();  /* keeps the exception */
    }
    return rc;
}

void
ft_monitor_release(void)
{
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    PyObject *mon = monitoring_module();
    PyObject *events = mon ? PyObject_GetAttrString(mon, "events") : NULL;
    if (events != NULL) {
        PyObject *res = PyObject_CallMethod(mon, "set_events", "ii",
                                            FT_MONITOR_TOOL_ID, 0);
        Py_XDECREF(res);
        long mask;
        if (res != NULL
            && register_callbacks(NULL, mon, events, NULL, NULL, 1,
                                  &mask) == 0) {
            res = PyObject_CallMethod(mon, "free_tool_id", "i",
                                      FT_MONITOR_TOOL_ID);
            Py_XDECREF(res);
        }
    }
    if (PyErr_Occurred()) {
        if (FT_FINALIZING()) {
            PyErr_Clear();  /* sys.monitoring goes away with the interpreter */
        }
        else {
            PyErr_WriteUnraisable(NULL);
        }
    }
    Py_XDECREF(events);
    Py_XDECREF(mon);
    FT_RESTORE_EXC(saved);
}

#endif /* FT_HAVE_MONITORING */
