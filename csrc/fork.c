/* os.fork() while a tracer is active: the parent goes on tracing; the
 * child's tracer stops as of the moment just before the fork (an anchor
 * taken then), its other threads gone with the fork.  A start() or stop()
 * another thread was running is abandoned in the child; one this thread
 * runs (code it ran forked) stops the tracer once it returns.  The
 * tracer's `fork` fields are this file's. */
#include "fork.h"
#include "import.h"
#include "lifecycle.h"

static void
tracer_before_fork(ft_tracer *self)
{
    if (self->phase == FT_PHASE_ACTIVE) {
        self->fork.anchor = ft_clock_anchor(&self->clock);
        self->fork.anchored = 1;
    }
}

static void
tracer_after_fork_child(ft_tracer *self, ft_interrupt *kept)
{
    /* The other threads are gone, and the child's at-fork callbacks have
     * run since the anchor: the trace ends where the fork began.  The
     * child traces nothing unless it starts a tracer of its own. */
    ft_latch_stop(self, self->fork.anchored ? &self->fork.anchor : NULL, 1,
                  kept);
    self->fork.anchored = 0;
}

void
ft_fork_stop_pending(ft_tracer *self, ft_interrupt *kept)
{
    if (self->fork.stop_pending) {
        /* An armed tracer disarms. */
        self->fork.stop_pending = 0;
        tracer_after_fork_child(self, kept);
    }
}

/* os.register_at_fork() callbacks.  Called from C inside os.fork(): no
 * profile event, so never recorded. */
static PyObject *
before_fork(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_tracer *tracer = ft_get_state(module)->active;
    if (tracer != NULL) {
        tracer_before_fork(tracer);
    }
    Py_RETURN_NONE;
}

static PyObject *
after_fork_in_parent(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_tracer *tracer = ft_get_state(module)->active;
    if (tracer != NULL) {
        tracer->fork.anchored = 0;  /* the parent goes on: the anchor stays */
    }
    Py_RETURN_NONE;
}

static PyObject *
after_fork_in_child(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_state *state = ft_get_state(module);
    unsigned long me = PyThread_get_thread_ident();
    /* A start() or stop() another thread was running is not the child's:
     * that thread is gone, and its call would never end there. */
    ft_tracer *abandoned = NULL;
    if (state->starting != NULL && state->starting_thread != me) {
        abandoned = state->starting;
        state->starting = NULL;
        abandoned->in_call = FT_IN_NONE;
    }
    if (state->stopping != NULL && state->stopping_thread != me) {
        /* Its hooks were silenced before any Python code ran. */
        state->stopping->in_call = FT_IN_NONE;
        state->stopping = NULL;
    }
    if (abandoned != NULL && abandoned->phase == FT_PHASE_NEW) {
        /* Not active yet: what that start() had made goes, so that the
         * tracer can start in the child. */
        ft_tracer_abandon_start(abandoned);
    }
    ft_tracer *tracer = state->active;
    if (state->starting != NULL) {
        /* Forked by code this thread's start() runs: that start() goes on
         * in the child, and stops the tracer when done with the hooks. */
        state->starting->fork.stop_pending = 1;
    }
    else if (tracer != NULL) {
        Py_INCREF(tracer);
        tracer_after_fork_child(tracer, NULL);
        Py_DECREF(tracer);
    }
    Py_RETURN_NONE;
}

static PyMethodDef fork_defs[] = {
    {"_before_fork", before_fork, METH_NOARGS, NULL},
    {"_after_fork_in_parent", after_fork_in_parent, METH_NOARGS, NULL},
    {"_after_fork_in_child", after_fork_in_child, METH_NOARGS, NULL},
};

int
ft_register_at_fork(PyObject *module)
{
    PyObject *os = ft_import("os");
    if (os == NULL) {
        return -1;
    }
    PyObject *reg = PyObject_GetAttrString(os, "register_at_fork");
    Py_DECREF(os);
    if (reg == NULL) {
        /* No fork on this platform. */
        PyErr_Clear();
        return 0;
    }
    static const char *const keys[] = {
        "before", "after_in_parent", "after_in_child",
    };
    PyObject *kwargs = PyDict_New();
    int rc = kwargs == NULL ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < 3; i++) {
        PyObject *func = PyCFunction_NewEx(&fork_defs[i], module, NULL);
        rc = func == NULL ? -1 : PyDict_SetItemString(kwargs, keys[i], func);
        Py_XDECREF(func);
    }
    if (rc == 0) {
        PyObject *empty = PyTuple_New(0);
        PyObject *res = empty ? PyObject_Call(reg, empty, kwargs) : NULL;
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
        Py_XDECREF(empty);
    }
    Py_XDECREF(kwargs);
    Py_DECREF(reg);
    return rc;
}
