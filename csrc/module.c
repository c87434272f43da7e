/* The module frametrace._tracer: multi-phase init, the exec slot (its
 * types, functions and constants), module state traverse/clear/free, the
 * module-level method table, and ft_state_of_type().  The functions the
 * exec slot installs for threading and os.fork() are bootstrap.c's and
 * fork.c's. */
#include "state.h"
#include "bootstrap.h"
#include "fork.h"
#include "install.h"
#include "recording.h"
#include "clock.h"
#include "gil_share.h"

ft_state *
ft_state_of_type(PyTypeObject *type)
{
#if FT_HAVE_TYPE_GETMODULEBYDEF
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

static PyObject *
monotonic_ns(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong(ft_clock_now());
}

/* 16 bracketed reads: about 1 us in all, the tightest 30-60 ns wide. */
#define FT_WALL_PAIR_TRIES 16

static PyObject *
wall_anchor(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    int64_t mono, wall, width;
    ft_clock_wall_pair(FT_WALL_PAIR_TRIES, &mono, &wall, &width);
    return Py_BuildValue("(LLL)", (long long)mono, (long long)wall,
                         (long long)width);
}

/* The Tracer armed or active in this interpreter, or None: lets code that
 * would start one (attach's agent) refuse before it changes anything. */
static PyObject *
active_tracer(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_tracer *active = ft_get_state(module)->active;
    return Py_NewRef(active != NULL ? (PyObject *)active : Py_None);
}

static PyMethodDef module_methods[] = {
    {"_active_tracer", active_tracer, METH_NOARGS,
     "_active_tracer($module, /)\n--\n\nThe Tracer armed or active in this "
     "interpreter, or None."},
    {"_export_tids", ft_export_tids_of, METH_O,
     "_export_tids($module, threads, /)\n--\n\n[tid] the writers give "
     "threads (serial, thread_id, native_thread_id, ...), in serial order: "
     "as Tracer._export_tids."},
    {"_clock_ns", monotonic_ns, METH_NOARGS,
     "_clock_ns($module, /)\n--\n\nThe tracer's clock, in ns."},
    {"_wall_anchor", wall_anchor, METH_NOARGS,
     "_wall_anchor($module, /)\n--\n\n(monotonic_ns, wall_ns, width_ns): "
     "one moment on CLOCK_MONOTONIC and\nCLOCK_REALTIME, the tightest of "
     "several bracketed reads, and the bracket's width."},
    {NULL, NULL, 0, NULL},
};

static int
module_exec(PyObject *module)
{
    /* Before 3.12 no slot refuses subinterpreters, and from 3.12 the slot
     * refuses only those that check extensions (not Py_NewInterpreter()'s
     * legacy ones): one tracer per process, and thread states walked
     * directly, are for the main interpreter. */
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        PyErr_SetString(PyExc_ImportError, "frametrace cannot be imported in "
                        "a subinterpreter: it traces the main interpreter only");
        return -1;
    }
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
    state->recording_type = ft_recording_type_new(module);
    if (state->recording_type == NULL) {
        return -1;
    }
    state->hook_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &ft_hook_spec, NULL);
    if (state->hook_type == NULL) {
        return -1;
    }
#if FT_HAVE_MONITORING
    state->callback_type = ft_callback_type_new(
        module, "frametrace._tracer._MonitoringCallback");
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
    state->thread_info_type = ft_thread_info_type_new();
    if (state->thread_info_type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "ThreadInfo",
                              (PyObject *)state->thread_info_type) < 0) {
        return -1;
    }
    state->stats_type = ft_stats_type_new();
    if (state->stats_type == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "Stats",
                              (PyObject *)state->stats_type) < 0) {
        return -1;
    }
    /* A RuntimeError, as it was before it had a type of its own. */
    state->conflict_error = PyErr_NewExceptionWithDoc(
        "frametrace.ConflictError",
        "start() or arm() refused: another profiler holds the hook "
        "(cProfile, sys.setprofile(), a sys.monitoring profiler) or another "
        "frametrace Tracer of this interpreter is armed, active, starting "
        "or stopping.",
        PyExc_RuntimeError, NULL);
    if (state->conflict_error == NULL) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "ConflictError",
                              state->conflict_error) < 0) {
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
    PyObject *load_calls = PyCFunction_NewEx(&ft_load_chrome_calls_def,
                                             module, NULL);
    if (load_calls == NULL) {
        return -1;
    }
    rc = PyModule_AddObjectRef(module, "_load_chrome_calls", load_calls);
    Py_DECREF(load_calls);
    if (rc < 0) {
        return -1;
    }
    if (ft_add_chrome_columns(module) < 0) {
        return -1;
    }
    PyObject *load_pf = PyCFunction_NewEx(&ft_load_perfetto_def, module,
                                          NULL);
    if (load_pf == NULL) {
        return -1;
    }
    rc = PyModule_AddObjectRef(module, "_load_perfetto", load_pf);
    Py_DECREF(load_pf);
    if (rc < 0) {
        return -1;
    }
    PyObject *write_events = PyCFunction_NewEx(&ft_write_events_def, module,
                                               NULL);
    if (write_events == NULL) {
        return -1;
    }
    rc = PyModule_AddObjectRef(module, "_write_events", write_events);
    Py_DECREF(write_events);
    if (rc < 0) {
        return -1;
    }
    PyObject *merge_lines = PyCFunction_NewEx(&ft_merge_chrome_lines_def,
                                              module, NULL);
    if (merge_lines == NULL) {
        return -1;
    }
    rc = PyModule_AddObjectRef(module, "_merge_chrome_lines", merge_lines);
    Py_DECREF(merge_lines);
    if (rc < 0) {
        return -1;
    }
    PyMethodDef *const function_defs[] = {
        &ft_report_pass_def, &ft_collapse_labels_def, &ft_collapsed_batch_def,
        &ft_relay_signal_def, &ft_unrelay_signal_def, &ft_join_ops_def,
        &ft_watch_relayed_def, &ft_die_of_signal_def, &ft_share_gil_def,
        &ft_event_columns_def,
    };
    for (size_t i = 0; i < sizeof(function_defs) / sizeof(function_defs[0]);
         i++) {
        PyObject *func = PyCFunction_NewEx(function_defs[i], module, NULL);
        if (func == NULL) {
            return -1;
        }
        rc = PyModule_AddObjectRef(module, function_defs[i]->ml_name, func);
        Py_DECREF(func);
        if (rc < 0) {
            return -1;
        }
    }
    state->thread_bootstrap = PyCFunction_NewEx(&ft_thread_bootstrap_def,
                                                module, NULL);
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
    state->str_name = PyUnicode_InternFromString("__name__");
    state->str_module = PyUnicode_InternFromString("__module__");
    if (!state->str_py || !state->str_c || !state->str_builtin
        || !state->str_name || !state->str_module) {
        return -1;
    }
    if (PyModule_AddIntConstant(module, "DEFAULT_BUFFER_SIZE",
                                FT_DEFAULT_BUFFER_SIZE) < 0
        || PyModule_AddIntConstant(module, "DEFAULT_MAX_MEMORY",
                                   FT_DEFAULT_MAX_MEMORY) < 0
        || PyModule_AddIntConstant(module, "MAX_BUFFER_SIZE",
                                   FT_MAX_BUFFER_SIZE) < 0) {
        return -1;
    }
    return ft_register_at_fork(module);
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    ft_state *state = ft_get_state(module);
    Py_VISIT(state->tracer_type);
    Py_VISIT(state->recording_type);
    Py_VISIT(state->hook_type);
    Py_VISIT(state->callback_type);
    Py_VISIT(state->event_type);
    Py_VISIT(state->range_type);
    Py_VISIT(state->thread_info_type);
    Py_VISIT(state->stats_type);
    Py_VISIT(state->conflict_error);
    Py_VISIT(state->range_sink);
    Py_VISIT(state->thread_bootstrap);
    return 0;
}

static int
module_clear(PyObject *module)
{
    ft_state *state = ft_get_state(module);
    Py_CLEAR(state->tracer_type);
    Py_CLEAR(state->recording_type);
    Py_CLEAR(state->hook_type);
    Py_CLEAR(state->callback_type);
    Py_CLEAR(state->event_type);
    Py_CLEAR(state->range_type);
    Py_CLEAR(state->thread_info_type);
    Py_CLEAR(state->stats_type);
    Py_CLEAR(state->conflict_error);
    Py_CLEAR(state->range_sink);
    Py_CLEAR(state->thread_bootstrap);
    Py_CLEAR(state->str_py);
    Py_CLEAR(state->str_c);
    Py_CLEAR(state->str_builtin);
    Py_CLEAR(state->str_name);
    Py_CLEAR(state->str_module);
    Py_CLEAR(state->monitoring_disable);
    Py_CLEAR(state->disabled_spec);
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    FT_MODULE_SLOTS_END
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
