/* lifecycle_counts(tracer): what frametrace._tracer's start() and arm()
 * did (rings, profile functions set, tool ids taken), read from its module
 * state through a tracer, so that a test can tell they did none of it
 * inside an active step.  The one file of this module that knows the
 * product's structs (state.h). */
#include "testing.h"
#include "../state.h"

PyObject *
ftt_lifecycle_counts(PyObject *Py_UNUSED(module), PyObject *tracer)
{
    PyObject *mod = PyImport_ImportModule("frametrace._tracer");
    PyObject *type = mod ? PyObject_GetAttrString(mod, "Tracer") : NULL;
    Py_XDECREF(mod);
    if (type == NULL) {
        return NULL;
    }
    int ok = PyObject_IsInstance(tracer, type);
    Py_DECREF(type);
    if (ok <= 0) {
        if (ok == 0) {
            PyErr_Format(PyExc_TypeError, "lifecycle_counts() takes a "
                         "frametrace Tracer, not %.100s",
                         Py_TYPE(tracer)->tp_name);
        }
        return NULL;
    }
    const ft_state *state = ((ft_tracer *)tracer)->state;
    return Py_BuildValue("{sKsKsKsK}",
                         "rings", (unsigned long long)state->count_rings,
                         "hook_installs",
                         (unsigned long long)state->count_hook_installs,
                         "tool_takes",
                         (unsigned long long)state->count_tool_takes,
                         "restarts",
                         (unsigned long long)state->count_restarts);
}
