/* frametrace's sys.monitoring tool id (CPython 3.12+): taking it with
 * callbacks on the events the monitoring backend records, and giving it
 * back.  Registration only, no recording: shared by the product's backend
 * (monitor.c) and the benchmarks' do-nothing references (testing/floors.c),
 * so that both pay for exactly the same events. */
#ifndef FT_MONITOR_TOOL_H
#define FT_MONITOR_TOOL_H

#include "compat.h"

#define FT_MONITOR_TOOL_ID 2

/* Refuses to start over another tool: message (stolen), from
 * ft_monitor_conflict() or the like, says who holds the hook.  -1 with
 * error(message) set, or with the error that left message NULL; 0 when
 * the hook is free. */
static inline int
ft_refuse_conflict(PyObject *error, PyObject *message)
{
    if (message != NULL) {
        PyErr_SetObject(error, message);
        Py_DECREF(message);
        return -1;
    }
    return PyErr_Occurred() ? -1 : 0;
}

#if FT_HAVE_MONITORING

/* The events CPython's profile layer turns into profile events, as
 * sys.monitoring names them; the C ones (FT_MON_CALL on) only with c_calls. */
enum {
    FT_MON_PY_START, FT_MON_PY_RESUME, FT_MON_PY_THROW,
    FT_MON_PY_RETURN, FT_MON_PY_YIELD, FT_MON_PY_UNWIND,
    FT_MON_CALL, FT_MON_C_RETURN, FT_MON_C_RAISE,
    FT_MON_NEVENTS,
};

/* A sys.monitoring callback: an object called through its vectorcall slot
 * straight from sys.monitoring, with none of a builtin function's argument
 * handling in between. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *owner;  /* strong: what the function works for */
} ft_callback;

/* A module's own heap type of callbacks, named qualified_name (a new
 * reference), or NULL with an exception.  Each extension makes one. */
PyTypeObject *ft_callback_type_new(PyObject *module,
                                   const char *qualified_name);

/* sys.monitoring.get_tool() of the tool id (a new reference), or NULL with
 * an exception. */
PyObject *ft_monitor_holder(void);

/* Why the tool id is taken (a new string), or NULL: free, or an error. */
PyObject *ft_monitor_conflict(void);

/* Takes the tool id as name and turns on the events (the C ones with
 * c_calls), each calling a new callback of callback_type owned by owner:
 * funcs[FT_MON_*] is the function of each event; *events (if not NULL)
 * gets the events' bits.  0, or -1 with an exception set and nothing
 * held. */
int ft_monitor_take(PyTypeObject *callback_type, const char *name,
                    PyObject *owner, const vectorcallfunc *funcs,
                    int c_calls, long *events);

/* Gives back the tool id taken as name: turns the events off, drops the
 * callbacks and frees it.  Another tool may have freed or changed it
 * meanwhile (sys.monitoring lets any code do so): held under another name,
 * it is left alone; free, whatever of ours it still has is cleared.
 * Returns 1 when the tool id was still as ft_monitor_take() left it (held
 * as name, with exactly the events given; with callback_type not NULL,
 * every callback one of that type owned by owner), else 0.  A failure is
 * reported as unraisable; keeps any pending exception. */
int ft_monitor_release(const char *name, PyTypeObject *callback_type,
                       PyObject *owner, long events);

#endif /* FT_HAVE_MONITORING */
#endif /* FT_MONITOR_TOOL_H */
