/* Test-only entry points: the replay driven by hand-written records, so its
 * rules can be tested on streams CPython rarely produces; the filters'
 * pattern matcher (glob.c), to check it against fnmatch. */
#include "testing.h"
#include "../glob.h"

#include <limits.h>
#include <string.h>

static int
parse_kind(PyObject *name, uint32_t *kind)
{
    static const char *names[] = {"call", "return", "c_call", "c_return",
                                  "c_exception"};
    for (uint32_t i = 0; i < 5; i++) {
        if (PyUnicode_Check(name)
            && PyUnicode_CompareWithASCIIString(name, names[i]) == 0) {
            *kind = i;  /* the FT_REC_* order */
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "record kind must be one of call, return, "
                 "c_call, c_return, c_exception; got %R", name);
    return -1;
}

/* A list of ints as a malloc'd uint32_t array (NULL, 0 for None). */
static int
parse_ids(PyObject *list, const char *what, uint32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (list == NULL || list == Py_None) {
        return 0;
    }
    if (!PyList_Check(list)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of ints", what);
        return -1;
    }
    Py_ssize_t len = PyList_GET_SIZE(list);
    *ids = PyMem_Malloc(((size_t)len + 1) * sizeof(uint32_t));
    if (*ids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PyList_GET_ITEM(list, i));
        if (v == (unsigned long)-1 && PyErr_Occurred()) {
            goto error;
        }
        if (v >= FT_ID_IGNORED) {
            PyErr_Format(PyExc_ValueError, "%s: ids must be below 2**31", what);
            goto error;
        }
        (*ids)[i] = (uint32_t)v;
    }
    *n = (size_t)len;
    return 0;

error:
    PyMem_Free(*ids);
    *ids = NULL;
    return -1;
}

PyObject *
ftt_replay(PyObject *Py_UNUSED(module), PyObject *args,
                  PyObject *kwargs)
{
    static char *kwlist[] = {"records", "base_ts", "stop_ns", "capacity",
                             "base_stack", "stop_stack", "with_dropped",
                             "loss_ns", "packed", "discarded", NULL};
    PyObject *records, *capacity_obj = Py_None;
    PyObject *base_obj = NULL, *stop_obj = Py_None;
    PyObject *base_ts_obj = NULL, *stop_ns_obj = NULL;  /* required */
    long long base_ts, stop_ns, loss_ns = 0, discarded = 0;
    ft_ring ring = {0};
    ft_eventvec out = {0};
    uint32_t *base = NULL, *stop = NULL;
    size_t nbase, nstop;
    PyObject *result = NULL;
    int with_dropped = 0, packed = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|$OOOOOpLpL:replay",
                                     kwlist, &PyList_Type, &records,
                                     &base_ts_obj, &stop_ns_obj, &capacity_obj,
                                     &base_obj, &stop_obj, &with_dropped,
                                     &loss_ns, &packed, &discarded)) {
        return NULL;
    }
    if (base_ts_obj == NULL || stop_ns_obj == NULL) {
        PyErr_SetString(PyExc_TypeError, "replay() needs base_ts and stop_ns");
        return NULL;
    }
    /* Any int64, INT64_MIN included: "given" is not a value. */
    base_ts = PyLong_AsLongLong(base_ts_obj);
    if (base_ts == -1 && PyErr_Occurred()) {
        return NULL;
    }
    stop_ns = PyLong_AsLongLong(stop_ns_obj);
    if (stop_ns == -1 && PyErr_Occurred()) {
        return NULL;
    }
    /* A copy: parsing may call __index__, which could change the list. */
    records = PySequence_Tuple(records);
    if (records == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(records);
    /* By default room for every record, even all in two words. */
    long long capacity = n ? 2 * (long long)n : 1;
    if (capacity_obj != Py_None) {
        capacity = PyLong_AsLongLong(capacity_obj);
        if (capacity == -1 && PyErr_Occurred()) {
            goto done;
        }
        if (capacity < 1 || capacity > (1 << 24)) {
            PyErr_SetString(PyExc_ValueError, "capacity must be 1..2**24");
            goto done;
        }
    }
    if (parse_ids(base_obj, "base_stack", &base, &nbase) < 0
        || parse_ids(stop_obj, "stop_stack", &stop, &nstop) < 0) {
        goto done;
    }
    if (stop_obj != Py_None && stop == NULL) {
        stop = PyMem_Malloc(sizeof(uint32_t));  /* an empty stop stack */
        if (stop == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    /* capacity is in ring words: a record that needs two (an id past
     * 2**21, a delta past 2**40) takes two. */
    if (ft_ring_alloc(&ring, (uint64_t)capacity, base_ts) < 0
        || (ring.capacity < (uint64_t)capacity
            && ft_ring_grow(&ring, (uint64_t)capacity) < 0)) {
        PyErr_NoMemory();
        goto done;
    }
    if (discarded < 0) {
        PyErr_SetString(PyExc_ValueError, "discarded must be >= 0");
        goto done;
    }
    /* As a ring adopted after the memory bound discarded its thread's
     * previous one. */
    ring.discarded = (uint64_t)discarded;
    long long prev_ts = base_ts;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyTuple_GET_ITEM(records, i);
        long long ts;
        PyObject *kind_obj;
        unsigned long func;
        uint32_t kind;
        if (!PyTuple_Check(rec)) {
            PyErr_Format(PyExc_TypeError, "a record is a (ts, kind, func_id) "
                         "tuple, not %.100s", Py_TYPE(rec)->tp_name);
            goto done;
        }
        if (!PyArg_ParseTuple(rec, "LOk;a record is (ts, kind, func_id)",
                              &ts, &kind_obj, &func)
            || parse_kind(kind_obj, &kind) < 0) {
            goto done;
        }
        if (func >= FT_ID_IGNORED) {
            PyErr_SetString(PyExc_ValueError, "func ids must be below 2**31");
            goto done;
        }
        if (i && ts < prev_ts) {
            PyErr_SetString(PyExc_ValueError,
                            "records must be in time order, as a ring's are");
            goto done;
        }
        /* A ring stores deltas of up to 2**59 ticks (years of a real
         * clock), the first from base_ts. */
        unsigned long long gap = ts >= prev_ts
            ? (unsigned long long)ts - (unsigned long long)prev_ts
            : (unsigned long long)prev_ts - (unsigned long long)ts;
        if (gap >= (1ULL << 59)) {
            PyErr_SetString(PyExc_ValueError,
                            "records must be less than 2**59 ns apart, and "
                            "the first from base_ts");
            goto done;
        }
        prev_ts = ts;
        ft_ring_push(&ring, ts, (uint32_t)func, kind);
    }
    /* As an ended thread's ring is packed: its records must replay the
     * same. */
    if (packed && ft_ring_pack(&ring) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    ft_replay_input in = {
        .ring = &ring,
        .clock = NULL,
        .base_ticks = base_ts,
        .base_stack = base,
        .base_depth = nbase,
        .base_known = base_obj != NULL && base_obj != Py_None,
        .stop_stack = stop,
        .stop_depth = nstop,
        .stop_ns = stop_ns,
        .loss_ns = loss_ns,
    };
    int64_t partial;
    if (ft_replay_thread(&in, &out, &partial) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyList_New((Py_ssize_t)out.len);
    if (result == NULL) {
        goto done;
    }
    for (size_t i = 0; i < out.len; i++) {
        const ft_event *ev = &out.items[i];
        PyObject *item = Py_BuildValue(
            "(IsLLLINNN)", ev->func, ev->is_c ? "c" : "py", ev->start_ns,
            ev->end_ns, ev->parent, ev->depth,
            PyBool_FromLong(ev->open_at_start),
            PyBool_FromLong(ev->open_at_stop),
            PyBool_FromLong(ev->open_at_loss));
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, item);
    }
    if (with_dropped) {
        uint64_t lost = ft_ring_overwritten(&ring);
        Py_SETREF(result, Py_BuildValue(
            "(OKK)", result, (unsigned long long)lost,
            (unsigned long long)ft_dropped_events(lost, partial)));
    }

done:
    Py_DECREF(records);
    ft_ring_free(&ring);
    ft_eventvec_free(&out);
    PyMem_Free(base);
    PyMem_Free(stop);
    return result;
}

/* (ticks, ns) pairs and ticks from Python: tuples copied first, so that an
 * __index__ changing the caller's lists cannot change what is read. */
static int
parse_anchor(PyObject *item, long long *t, long long *ns)
{
    if (!PyTuple_Check(item)) {
        PyErr_Format(PyExc_TypeError, "an anchor is a (ticks, ns) tuple, not "
                     "%.100s", Py_TYPE(item)->tp_name);
        return -1;
    }
    return PyArg_ParseTuple(item, "LL;an anchor is (ticks, ns)", t, ns) ? 0 : -1;
}

PyObject *
ftt_ticks_to_ns(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *anchor_list, *tick_list;
    if (!PyArg_ParseTuple(args, "O!O!:ticks_to_ns", &PyList_Type, &anchor_list,
                          &PyList_Type, &tick_list)) {
        return NULL;
    }
    PyObject *anchors = PySequence_Tuple(anchor_list);
    PyObject *ticks = anchors ? PySequence_Tuple(tick_list) : NULL;
    PyObject *result = NULL;
    ft_clock clock = {.use_cycles = 1};
    long long *values = NULL;
    if (ticks == NULL) {
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(anchors), nticks = PyTuple_GET_SIZE(ticks);
    /* No anchors: ticks are ns. */
    clock.anchors = PyMem_Malloc(((size_t)n + 1) * sizeof(ft_anchor));
    values = PyMem_Malloc(((size_t)nticks + 1) * sizeof(long long));
    if (clock.anchors == NULL || values == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long t, ns;
        if (parse_anchor(PyTuple_GET_ITEM(anchors, i), &t, &ns) < 0) {
            goto done;
        }
        if (i && (t <= clock.anchors[i - 1].ticks
                  || ns < clock.anchors[i - 1].ns)) {
            PyErr_SetString(PyExc_ValueError, "anchors must increase");
            goto done;
        }
        clock.anchors[i].ticks = t;
        clock.anchors[i].ns = ns;
        clock.anchors[i].width = 0;
    }
    clock.nanchors = (size_t)n;
    for (Py_ssize_t i = 0; i < nticks; i++) {
        values[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(ticks, i));
        if (values[i] == -1 && PyErr_Occurred()) {
            goto done;
        }
    }
    result = PyList_New(nticks);
    ft_clock_cursor cursor = {0};
    for (Py_ssize_t i = 0; result && i < nticks; i++) {
        PyObject *ns = PyLong_FromLongLong(ft_clock_convert(&clock, values[i], &cursor));
        if (ns == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, ns);
    }

done:
    PyMem_Free(values);
    PyMem_Free(clock.anchors);
    Py_XDECREF(anchors);
    Py_XDECREF(ticks);
    return result;
}

/* An extension that takes the profile function away inside one C call and
 * gives it back inside another: the first call's return and the second's
 * call never reach the hook.  Bound to no module, so that the tracer
 * records them like any extension's functions. */
typedef struct {
    Py_tracefunc func;
    PyObject *obj;  /* strong */
} saved_profile;

static void
saved_profile_free(PyObject *capsule)
{
    saved_profile *saved = PyCapsule_GetPointer(capsule, "frametrace.saved_profile");
    if (saved != NULL) {
        Py_XDECREF(saved->obj);
        PyMem_Free(saved);
    }
}

static PyObject *
profile_off(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(ignored))
{
    PyThreadState *ts = PyThreadState_Get();
    saved_profile *saved = PyMem_Malloc(sizeof(*saved));
    if (saved == NULL) {
        return PyErr_NoMemory();
    }
    saved->func = ft_tstate_profile_func(ts);
    saved->obj = Py_XNewRef(ft_tstate_profile_obj(ts));
    PyObject *capsule = PyCapsule_New(saved, "frametrace.saved_profile",
                                      saved_profile_free);
    if (capsule == NULL) {
        Py_XDECREF(saved->obj);
        PyMem_Free(saved);
        return NULL;
    }
    PyEval_SetProfile(NULL, NULL);
    if (PyErr_Occurred()) {  /* an audit hook refused */
        Py_DECREF(capsule);
        return NULL;
    }
    return capsule;
}

static PyObject *
profile_on(PyObject *Py_UNUSED(self), PyObject *capsule)
{
    saved_profile *saved = PyCapsule_GetPointer(capsule, "frametrace.saved_profile");
    if (saved == NULL) {
        return NULL;
    }
    PyEval_SetProfile(saved->func, saved->obj);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef profile_toggle_defs[] = {
    {"profile_off", profile_off, METH_NOARGS,
     "Removes this thread's profile function; returns it, for profile_on()."},
    {"profile_on", profile_on, METH_O,
     "Installs the profile function profile_off() returned."},
};

int
ftt_add_profile_toggles(PyObject *module)
{
    static const char *const attrs[] = {"profile_off", "profile_on"};
    for (size_t i = 0; i < 2; i++) {
        PyObject *func = PyCFunction_NewEx(&profile_toggle_defs[i], NULL, NULL);
        if (func == NULL) {
            return -1;
        }
        int rc = PyModule_AddObjectRef(module, attrs[i], func);
        Py_DECREF(func);
        if (rc < 0) {
            return -1;
        }
    }
    return 0;
}

PyObject *
ftt_pattern_match(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *pattern, *name;
    if (!PyArg_ParseTuple(args, "UU:pattern_match", &pattern, &name)) {
        return NULL;
    }
    Py_UCS4 *pat = PyUnicode_AsUCS4Copy(pattern);
    Py_UCS4 *str = pat ? PyUnicode_AsUCS4Copy(name) : NULL;
    if (str == NULL) {
        PyMem_Free(pat);
        return NULL;
    }
    size_t plen = (size_t)PyUnicode_GetLength(pattern);
    int match = ft_pattern_match(pat, plen, ft_glob_is_glob(pat, plen), str,
                                 (size_t)PyUnicode_GetLength(name));
    PyMem_Free(pat);
    PyMem_Free(str);
    return PyBool_FromLong(match);
}
