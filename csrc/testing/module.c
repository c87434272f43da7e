/* frametrace._testing: module init, state, and the method table.  Private:
 * for frametrace's tests and benchmarks only, never imported by the
 * package. */
#include "testing.h"

static PyMethodDef testing_methods[] = {
    {"set_noop_profile", (PyCFunction)(void (*)(void))ftt_set_noop_profile,
     METH_VARARGS | METH_KEYWORDS,
     "set_noop_profile($module, enable, /, *, clock=False)\n--\n\n"
     "Install (or remove) a do-nothing C profile function on this thread: "
     "the overhead floor, for benchmarks.  With clock, it reads the "
     "tracer's tick counter and stores a word into a ring per event.  "
     "Removing leaves any other profile function alone."},
#if FT_HAVE_MONITORING
    {"set_noop_monitoring",
     (PyCFunction)(void (*)(void))ftt_set_noop_monitoring,
     METH_VARARGS | METH_KEYWORDS,
     "set_noop_monitoring($module, enable, /, *, clock=False, c_calls=True)"
     "\n--\n\n"
     "Take (or free) sys.monitoring tool id 2 with do-nothing callbacks on "
     "the events of the monitoring backend: its floor, for benchmarks.  "
     "clock as for set_noop_profile()."},
#endif
    {"replay", (PyCFunction)(void (*)(void))ftt_replay,
     METH_VARARGS | METH_KEYWORDS,
     "replay($module, records, *, base_ts, stop_ns, capacity=None, "
     "base_stack=[], stop_stack=None, with_dropped=False, loss_ns=0, "
     "packed=False, discarded=0)"
     "\n--\n\n"
     "Replay hand-written (ts, kind, func_id) records of one thread through "
     "a ring of capacity 8-byte words (default: room for all); returns "
     "(func, kind, start, end, parent, depth, open_at_start, open_at_stop, "
     "open_at_loss) tuples; with_dropped (events, records overwritten, "
     "events lost entirely).  loss_ns: when the thread's recording ended "
     "early (0: it did not).  packed: the ring is packed, as an ended "
     "thread's is, before the replay.  discarded: records of the thread's "
     "earlier ring that the memory bound discarded."},
    {"lifecycle_counts", ftt_lifecycle_counts, METH_O,
     "lifecycle_counts($module, tracer, /)\n--\n\n"
     "{'rings', 'hook_installs', 'tool_takes', 'restarts'} of frametrace._tracer's "
     "module state (tracer: any Tracer, to reach it): rings its start() "
     "and arm() allocated, profile functions they set (every thread at "
     "once counts one), sys.monitoring tool ids they took, since it was "
     "loaded; restarts: sys.monitoring.restart_events() calls."},
    {"bound_function", ftt_bound_function, METH_VARARGS,
     "bound_function($module, name, module, /)\n--\n\n"
     "A C function made as binding generators make them: its self a "
     "capsule owning its method definition, module (a str or None) its "
     "__module__.  Calling it returns its arguments."},
    {"pattern_match", ftt_pattern_match, METH_VARARGS,
     "pattern_match($module, pattern, name, /)\n--\n\n"
     "Whether the filters' pattern matches the name module.qualname "
     "(csrc/glob.c): for checking it against fnmatch."},
    {"nest", ftt_nest, METH_VARARGS,
     "nest($module, frames, ops, tolerance_ns, /)\n--\n\n"
     "The join's sweep (csrc/nest.c): frames (start, end, parent index) in "
     "call order, ops (start, end); returns ([(start, end, op index)] of "
     "the ops that nest, as placed, in order, [op index] of those that "
     "cross)."},
    {"ticks_to_ns", ftt_ticks_to_ns, METH_VARARGS,
     "ticks_to_ns($module, anchors, ticks, /)\n--\n\n"
     "Convert ticks to ns through (ticks, ns) anchors."},
    {NULL, NULL, 0, NULL},
};

static int
testing_exec(PyObject *module)
{
    ftt_state *state = ftt_get_state(module);
    state->floor_ring_type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &ftt_floor_ring_spec, NULL);
    if (state->floor_ring_type == NULL) {
        return -1;
    }
#if FT_HAVE_MONITORING
    state->callback_type = ft_callback_type_new(
        module, "frametrace._testing._MonitoringCallback");
    if (state->callback_type == NULL) {
        return -1;
    }
#endif
    return ftt_add_profile_toggles(module);
}

static int
testing_traverse(PyObject *module, visitproc visit, void *arg)
{
    ftt_state *state = ftt_get_state(module);
    Py_VISIT(state->floor_ring_type);
    Py_VISIT(state->callback_type);
    return 0;
}

static int
testing_clear(PyObject *module)
{
    ftt_state *state = ftt_get_state(module);
    Py_CLEAR(state->floor_ring_type);
    Py_CLEAR(state->callback_type);
    return 0;
}

static void
testing_free(void *module)
{
    testing_clear((PyObject *)module);
}

static PyModuleDef_Slot testing_slots[] = {
    {Py_mod_exec, testing_exec},
    FT_MODULE_SLOTS_END
};

static PyModuleDef testing_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "frametrace._testing",
    .m_doc = "frametrace's test and benchmark helpers (private): the "
             "benchmarks' reference hooks and the replay driven by hand.",
    .m_size = sizeof(ftt_state),
    .m_methods = testing_methods,
    .m_slots = testing_slots,
    .m_traverse = testing_traverse,
    .m_clear = testing_clear,
    .m_free = testing_free,
};

PyMODINIT_FUNC
PyInit__testing(void)
{
    return PyModuleDef_Init(&testing_def);
}
