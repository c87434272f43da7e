/* bound_function(): a C function made the way binding generators make
 * them (pybind11 before 2.12: PyCFunction_NewEx with a capsule that owns
 * the method definition as self, and the module's name as __module__), for
 * the tests of how the tracer names such functions. */
#include "testing.h"

#include <stdlib.h>
#include <string.h>

#define BINDING_CAPSULE "frametrace._testing.binding"

static PyObject *
binding_call(PyObject *Py_UNUSED(self), PyObject *args)
{
    return Py_NewRef(args);
}

static void
binding_free(PyObject *capsule)
{
    PyMethodDef *def = PyCapsule_GetPointer(capsule, BINDING_CAPSULE);
    if (def != NULL) {
        free((char *)def->ml_name);
        free(def);
    }
}

PyObject *
ftt_bound_function(PyObject *Py_UNUSED(module), PyObject *args)
{
    const char *name;
    PyObject *modname;
    if (!PyArg_ParseTuple(args, "sO:bound_function", &name, &modname)) {
        return NULL;
    }
    if (modname != Py_None && !PyUnicode_Check(modname)) {
        PyErr_Format(PyExc_TypeError, "bound_function() module must be a str "
                     "or None, not %.100s", Py_TYPE(modname)->tp_name);
        return NULL;
    }
    PyMethodDef *def = calloc(1, sizeof(*def));
    char *def_name = strdup(name);
    if (def == NULL || def_name == NULL) {
        free(def);
        free(def_name);
        return PyErr_NoMemory();
    }
    def->ml_name = def_name;
    def->ml_meth = binding_call;
    def->ml_flags = METH_VARARGS;
    PyObject *capsule = PyCapsule_New(def, BINDING_CAPSULE, binding_free);
    if (capsule == NULL) {
        free(def_name);
        free(def);
        return NULL;
    }
    PyObject *func = PyCFunction_NewEx(
        def, capsule, modname == Py_None ? NULL : modname);
    Py_DECREF(capsule);
    return func;
}
