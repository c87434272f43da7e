/* The Python audit hooks set aside while frametrace sets the profile
 * function of every thread (install.c).
 *
 * Setting another thread's profile function runs the "sys.setprofile" audit
 * hooks first, once per thread before CPython 3.14.1, and a Python hook that
 * releases the GIL (any sleep or I/O, or a long one) lets other threads run:
 * one may exit and free its thread state before it is written (CPython
 * gh-137400), and any may call and return unrecorded between its stack
 * being taken at start() and its hook being installed.  So frametrace
 * audits "sys.setprofile" once itself, as PyEval_SetProfileAllThreads()
 * does from 3.14.1, and sets every thread with the Python hooks off the
 * interpreter: pure C, which nothing can interleave with.  C audit hooks
 * (PySys_AddAuditHook()) stay: they cannot be told apart from CPython's.
 *
 * No public call does this, so this file reads PyInterpreterState with
 * CPython's internal headers (compat.h lists the field), and nothing else
 * here does. */
#define Py_BUILD_CORE 1
#include "audit_aside.h"
#include "internal/pycore_interp.h"

int
ft_audit_hooks_set_aside(PyObject **saved)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    PyObject *hooks = interp->audit_hooks;
    if (hooks != NULL && !PyList_CheckExact(hooks)) {
        return -1;
    }
    interp->audit_hooks = NULL;
    *saved = hooks;
    return 0;
}

void
ft_audit_hooks_put_back(PyObject *saved)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    PyObject *added = interp->audit_hooks;
    if (added == NULL) {
        interp->audit_hooks = saved;
        return;
    }
    if (saved == NULL) {
        return;  /* the only hooks are the new ones */
    }
    /* A C audit hook ran Python code that added hooks: theirs go after. */
    interp->audit_hooks = saved;
    Py_ssize_t n = PyList_GET_SIZE(saved);
    if (PyList_SetSlice(saved, n, n, added) < 0) {
        PyErr_WriteUnraisable(added);
    }
    Py_DECREF(added);
}
