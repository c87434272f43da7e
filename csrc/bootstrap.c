/* Threads started while a tracer is armed or active: threading gives each
 * the bootstrap function (threading.setprofile(), swapped in by arm()),
 * which a new thread calls at its first event; it registers the thread
 * with the active tracer (its stack, its name, a ring allocated before
 * its first record), installs the hook on it and records that event, or,
 * armed, gives it the hook inert until start().  With the monitoring
 * backend, which sees every thread, it only names the thread. */
#include "bootstrap.h"
#include "install.h"
#include "lifecycle.h"
#include "threads.h"

/* A thread started while a tracer is armed: with the setprofile backend
 * it gets the hook, inert until start() registers it (or its first event
 * after start(), through the cache, 3.12+); with the monitoring backend,
 * nothing. */
static PyObject *
arm_thread(ft_tracer *tracer)
{
    /* Its name, for start(), which runs no Python code.  Names run Python
     * code (untraced: this is a profile function), during which the tracer
     * may be disarmed or started: look again after. */
    Py_INCREF(tracer);
    PyObject *names = ft_thread_names(NULL);
    int armed = tracer->phase == FT_PHASE_ARMED;
    if (armed && names != NULL) {
        ft_armed_note_names(tracer, names);
    }
    else {
        Py_XDECREF(names);
    }
    PyObject *hook = NULL;
    if (armed && tracer->backend == FT_BACKEND_SETPROFILE) {
        hook = (PyObject *)ft_hooks_for_thread(tracer, NULL);
        if (hook == NULL && PyErr_Occurred()) {
            /* Never raise into the thread: it runs untraced, and says so. */
            PyErr_WriteUnraisable(NULL);
        }
    }
    if (hook == NULL) {
        PyEval_SetProfile(NULL, NULL);
    }
    else {
        tracer->state->count_hook_installs++;
        PyEval_SetProfile(ft_hook, hook);  /* audited: may disarm it */
        Py_DECREF(hook);
    }
    Py_DECREF(tracer);
    Py_RETURN_NONE;
}

/* Profile function given to threading.setprofile(): each thread started
 * while a tracer is active calls it at its first event, and it replaces
 * itself with the C hook on that thread. */
PyObject *
ft_bootstrap_thread(ft_state *state, PyObject *const *args, Py_ssize_t nargs)
{
    ft_tracer *tracer = state->active;

    if (tracer == NULL) {
        /* Tracing ended before this thread ran. */
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    if (nargs != 3 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "_thread_bootstrap(frame, event, arg) is called by "
                        "the interpreter as a profile function");
        return NULL;
    }
    if (tracer->phase == FT_PHASE_ARMED) {
        return arm_thread(tracer);
    }
    /* Its name runs Python code (untraced: this is a profile function),
     * during which the tracer may stop: look again after. */
    PyObject *names = ft_caller_thread_names();
    tracer = state->active;
    if (tracer == NULL || tracer->phase != FT_PHASE_ACTIVE) {
        Py_XDECREF(names);
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    if (tracer->backend == FT_BACKEND_MONITORING) {
        /* sys.monitoring records this thread already; threading calls this
         * once the thread is in threading._active: only its name is new. */
        ft_thread *th = ft_find_thread(tracer, PyThreadState_Get());
        if (th != NULL) {
            ft_name_thread(th, names);
            th->of_threading = 1;
        }
        Py_XDECREF(names);
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    /* The thread's ring first, so that its allocation is no part of the
     * thread's trace. */
    ft_ring ring;
    Py_INCREF(tracer);
    int ring_rc = ft_alloc_ring(&ring, tracer->buffer_size,
                             ft_clock_ticks(&tracer->clock));
    state->count_rings++;
    if (state->active != tracer || tracer->phase != FT_PHASE_ACTIVE) {
        if (ring_rc == 0) {
            ft_ring_free(&ring);
        }
        Py_DECREF(tracer);
        Py_XDECREF(names);
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    /* Held to the end: the last reference may be dropped meanwhile (by
     * Python code run below), and then its release frees the tracer. */
    int64_t ts = ft_clock_ticks(&tracer->clock);
    PyFrameObject *frame = (PyFrameObject *)args[0];
    PyObject *event = args[1];
    int what;
    if (PyUnicode_CompareWithASCIIString(event, "call") == 0) {
        what = PyTrace_CALL;
    }
    else if (PyUnicode_CompareWithASCIIString(event, "return") == 0) {
        what = PyTrace_RETURN;
    }
    else if (PyUnicode_CompareWithASCIIString(event, "c_call") == 0) {
        what = PyTrace_C_CALL;
    }
    else {
        /* c_return/c_exception: the return of the very call that installed
         * this function (sys.setprofile), whose call was never seen. */
        what = -1;
    }
    /* A "call" event's frame is the callee: the stack before it starts at
     * its caller. */
    PyFrameObject *top = what == PyTrace_CALL ? PyFrame_GetBack(frame)
                                              : (PyFrameObject *)Py_NewRef(frame);
    /* GC off: registering allocates, and a collection could run Python
     * code and let another thread in while the tracer is being updated. */
    int gc_was_enabled = PyGC_Disable();
    ft_thread *th = ft_register_thread(tracer, PyThreadState_Get(), top, ts);
    /* 3.12+: the same object as every other thread's. */
    ft_hookobject *hook = th != NULL ? ft_hooks_for_thread(tracer, th) : NULL;
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    Py_XDECREF(top);
    if (hook == NULL) {
        /* Never raise into the thread: it runs untraced, and says so. */
        PyErr_WriteUnraisable(NULL);
        PyEval_SetProfile(NULL, NULL);
    }
    else {
        th->of_threading = 1;
        if (ring_rc == 0 && th->ring.buf == NULL) {
            ft_adopt_ring(tracer, th, &ring);
            ring_rc = -1;  /* handed over */
        }
        ft_name_thread(th, names);  /* by the ident it may just have got */
        /* Runs audit hooks, which may stop the tracer: ft_hook_record()
         * looks at the hook first, and records nothing then. */
        state->count_hook_installs++;
        PyEval_SetProfile(ft_hook, (PyObject *)hook);
        if (what >= 0) {
            ft_hook_record(hook, th, ts, frame, what, args[2]);
        }
        Py_DECREF(hook);
    }
    if (ring_rc == 0) {
        ft_ring_free(&ring);  /* not handed over */
    }
    Py_XDECREF(names);
    Py_DECREF(tracer);
    Py_RETURN_NONE;
}

static PyObject *
thread_bootstrap(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return ft_bootstrap_thread(ft_get_state(module), args, nargs);
}

PyMethodDef ft_thread_bootstrap_def = {
    "_thread_bootstrap", (PyCFunction)(void (*)(void))thread_bootstrap,
    METH_FASTCALL,
    "_thread_bootstrap($module, frame, event, arg, /)\n--\n\n"
    "Installs the active tracer's hook on a new thread (internal).",
};
