/* Module init (multi-phase), module state, and the module-level helpers. */
#include "state.h"
#include "clock.h"

ft_state *
ft_state_of_type(PyTypeObject *type)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *module = PyType_GetModuleByDef(type, &ft_module_def);
    return module ? ft_get_state(module) : NULL;
#else
    /* 3.10 has no PyType_GetModuleByDef: walk the MRO for our heap type. */
    PyObject *mro = type->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *base = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (!(base->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
            continue;
        }
        PyObject *module = PyType_GetModule(base);
        if (module == NULL) {
            PyErr_Clear();
            continue;
        }
        if (PyModule_GetDef(module) == &ft_module_def) {
            return ft_get_state(module);
        }
    }
    PyErr_SetString(PyExc_TypeError,
                    "the frametrace module of this type was not found");
    return NULL;
#endif
}

/* Profile function given to threading.setprofile(): each thread started
 * while a tracer is active calls it at its first event, and it replaces
 * itself with the C hook on that thread. */
static PyObject *
thread_bootstrap(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    ft_state *state = ft_get_state(module);
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
    /* Threads' names run Python code (untraced: this is a profile
     * function), during which the tracer may stop: look again after. */
    PyObject *names = ft_thread_names();
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
        }
        Py_XDECREF(names);
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    /* Fault the thread's ring in first, with the GIL released, so that the
     * time it takes is no part of the thread's trace. */
    ft_ring ring;
    Py_INCREF(tracer);
    int ring_rc = ft_ring_alloc_released(&ring, tracer->buffer_size,
                                         ft_clock_ticks(&tracer->clock));
    if (state->active != tracer || tracer->phase != FT_PHASE_ACTIVE) {
        if (ring_rc == 0) {
            ft_ring_free(&ring);
        }
        Py_DECREF(tracer);
        Py_XDECREF(names);
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    /* Held to the end: the last reference may be dropped meanwhile (del
     * while this thread faulted its ring in), and then its release frees
     * the tracer. */
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
    ft_hookobject *hook = NULL;
#if FT_SHARED_HOOK
    if (th != NULL) {
        /* The same object as every other thread's; the next events find
         * th through the cache. */
        hook = (ft_hookobject *)Py_NewRef(tracer->hook);
        ft_cache_thread(tracer, th);
    }
#else
    hook = th != NULL ? ft_new_hook(tracer, th) : NULL;
#endif
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
        if (ring_rc == 0 && th->ring.buf == NULL) {
            ft_thread_adopt_ring(th, &ring);
            ring_rc = -1;  /* handed over */
        }
        ft_name_thread(th, names);  /* by the ident it may just have got */
        /* Runs audit hooks, which may stop the tracer: ft_hook_record()
         * looks at the hook first, and records nothing then. */
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

static PyMethodDef bootstrap_def = {
    "_thread_bootstrap", (PyCFunction)(void (*)(void))thread_bootstrap,
    METH_FASTCALL,
    "_thread_bootstrap($module, frame, event, arg, /)\n--\n\n"
    "Installs the active tracer's hook on a new thread (internal).",
};

#if FT_HAVE_MONITORING
static PyType_Spec callback_spec =
    FT_CALLBACK_SPEC("frametrace._tracer._MonitoringCallback");
#endif

static PyObject *
monotonic_ns(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong(ft_clock_now());
}

static PyMethodDef module_methods[] = {
    {"_clock_ns", monotonic_ns, METH_NOARGS,
     "_clock_ns($module, /)\n--\n\nThe tracer's clock, in ns."},
    {NULL, NULL, 0, NULL},
};

/* os.register_at_fork() callbacks.  Called from C inside os.fork(): no
 * profile event, so never recorded. */
static PyObject *
before_fork(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_tracer *tracer = ft_get_state(module)->active;
    if (tracer != NULL) {
        ft_tracer_before_fork(tracer);
    }
    Py_RETURN_NONE;
}

static PyObject *
after_fork_in_parent(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_tracer *tracer = ft_get_state(module)->active;
    if (tracer != NULL) {
        tracer->fork_anchored = 0;  /* the parent goes on: the anchor stays */
    }
    Py_RETURN_NONE;
}

static PyObject *
after_fork_in_child(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_state *state = ft_get_state(module);
    /* A start() another thread was running is not the child's: that
     * thread is gone, and its start() would never end there. */
    if (state->starting != NULL
        && state->starting_thread != PyThread_get_thread_ident()) {
        state->starting = NULL;
    }
    ft_tracer *tracer = state->active;
    if (tracer != NULL) {
        Py_INCREF(tracer);
        ft_tracer_after_fork_child(tracer);
        Py_DECREF(tracer);
    }
    Py_RETURN_NONE;
}

static PyMethodDef fork_defs[] = {
    {"_before_fork", before_fork, METH_NOARGS, NULL},
    {"_after_fork_in_parent", after_fork_in_parent, METH_NOARGS, NULL},
    {"_after_fork_in_child", after_fork_in_child, METH_NOARGS, NULL},
};

static int
register_at_fork(PyObject *module)
{
    PyObject *os = PyImport_ImportModule("os");
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

static int
module_exec(PyObject *module)
{
    ft_state *state = ft_get_state(module);

    state->tracer_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &ft_tracer_spec, NULL);
    if (state->tracer_type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "Tracer",
                              (PyObject *)state->tracer_type) < 0) {
        return -1;
    }
    state->hook_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &ft_hook_spec, NULL);
    if (state->hook_type == NULL) {
        return -1;
    }
#if FT_HAVE_MONITORING
    state->callback_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &callback_spec, NULL);
    if (state->callback_type == NULL) {
        return -1;
    }
#endif
    state->event_type = ft_event_type_new(module);
    if (state->event_type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "Event",
                              (PyObject *)state->event_type) < 0) {
        return -1;
    }
    state->range_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &ft_range_spec, NULL);
    if (state->range_type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "Range",
                              (PyObject *)state->range_type) < 0) {
        return -1;
    }
    PyObject *set_sink = PyCFunction_NewEx(&ft_set_range_sink_def, module,
                                           NULL);
    if (set_sink == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, "_set_range_sink", set_sink);
    Py_DECREF(set_sink);
    if (rc < 0) {
        return -1;
    }
    state->thread_bootstrap = PyCFunction_NewEx(&bootstrap_def, module,
                                                NULL);
    if (state->thread_bootstrap == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "_thread_bootstrap",
                              state->thread_bootstrap) < 0) {
        return -1;
    }
    state->str_py = PyUnicode_InternFromString("py");
    state->str_c = PyUnicode_InternFromString("c");
    state->str_builtin = PyUnicode_InternFromString("<built-in>");
    if (!state->str_py || !state->str_c || !state->str_builtin) {
        return -1;
    }
    if (PyModule_AddIntConstant(module, "DEFAULT_BUFFER_SIZE", 1 << 20) < 0
        || PyModule_AddIntConstant(module, "MAX_BUFFER_SIZE", 1 << 28) < 0) {
        return -1;
    }
    return register_at_fork(module);
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    ft_state *state = ft_get_state(module);
    Py_VISIT(state->tracer_type);
    Py_VISIT(state->hook_type);
    Py_VISIT(state->callback_type);
    Py_VISIT(state->event_type);
    Py_VISIT(state->range_type);
    Py_VISIT(state->range_sink);
    Py_VISIT(state->thread_bootstrap);
    return 0;
}

static int
module_clear(PyObject *module)
{
    ft_state *state = ft_get_state(module);
    Py_CLEAR(state->tracer_type);
    Py_CLEAR(state->hook_type);
    Py_CLEAR(state->callback_type);
    Py_CLEAR(state->event_type);
    Py_CLEAR(state->range_type);
    Py_CLEAR(state->range_sink);
    Py_CLEAR(state->thread_bootstrap);
    Py_CLEAR(state->str_py);
    Py_CLEAR(state->str_c);
    Py_CLEAR(state->str_builtin);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if FT_HAVE_MOD_MULTIPLE_INTERPRETERS
    /* One tracer per process at a time, and thread states walked directly:
     * not ready for several interpreters. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if FT_HAVE_MOD_GIL
    /* The truth: the hook, the rings, the function table and start/stop
     * rely on the GIL (docs/free-threading.md).  A free-threaded build
     * never reads it: PyInit__tracer() refuses first. */
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

PyModuleDef ft_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "frametrace._tracer",
    .m_doc = "frametrace's C core: the profile hook, per-thread ring buffers "
             "and the replay of records into events.",
    .m_size = sizeof(ft_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__tracer(void)
{
#ifdef Py_GIL_DISABLED
    /* Refused here, before a module object exists, rather than in the exec
     * slot: CPython reads Py_mod_gil when it creates the module, and a
     * Py_MOD_GIL_USED module would turn the GIL on for the whole process
     * (with a RuntimeWarning) only to fail its exec.  Not tested on a
     * free-threaded interpreter: there was none to build against. */
    PyErr_Format(PyExc_ImportError,
                 "frametrace does not support the free-threaded build of "
                 "CPython (Py_GIL_DISABLED) yet: its hook, rings, function "
                 "table and start/stop rely on the GIL (see "
                 "docs/free-threading.md in frametrace's source); use the "
                 "regular build, with the GIL (python%d.%d rather than "
                 "python%d.%dt)", PY_MAJOR_VERSION, PY_MINOR_VERSION,
                 PY_MAJOR_VERSION, PY_MINOR_VERSION);
    return NULL;
#else
    return PyModuleDef_Init(&ft_module_def);
#endif
}
