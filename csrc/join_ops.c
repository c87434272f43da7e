/* frametrace.torch's join, _join_ops(): torch's activities placed on a
 * stopped tracer's threads, nested in the frames that ran them (nest.c),
 * as frametrace.export.Slices.  Only reading the activities and making
 * the Slices hold the GIL; each thread's replay and the sweep run without
 * it, so that a writer thread joining a window leaves the training loop
 * the interpreter. */
#include "state.h"
#include "gil_share.h"
#include "nest.h"
#include "replay.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject *name, *cat, *args;    /* strong; args NULL: none */
    int64_t start, end;             /* on the tracer's clock */
    long long device, resource;
    Py_ssize_t thread;              /* index in the tracer's threads, or
                                       -1: a track of its own */
} op_rec;

typedef struct {
    Py_ssize_t thread;
    size_t *members;    /* indices in the records, activity order */
    size_t n, cap;
    ft_nest_op *ops;    /* after the sweep: nested ones in their order */
    uint8_t *crossing;  /* by position in members */
} thread_ops;

static int
as_int64(PyObject *value, const char *what, Py_ssize_t i, long long *out)
{
    if (value == NULL) {
        return -1;
    }
    if (!PyLong_Check(value) || PyBool_Check(value)) {
        PyErr_Format(PyExc_TypeError, "_join_ops(): activity %zd: %s must be "
                     "an int, not %.100s", i, what, Py_TYPE(value)->tp_name);
        Py_DECREF(value);
        return -1;
    }
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *
as_str(PyObject *value, const char *what, Py_ssize_t i)
{
    if (value != NULL && !PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "_join_ops(): activity %zd: %s must be "
                     "a str, not %.100s", i, what, Py_TYPE(value)->tp_name);
        Py_CLEAR(value);
    }
    return value;
}

/* Reads activity i: torch's own (its methods: name(), type(),
 * timestamp(), duration(), device_id(), resource_id(), metadata_json()
 * through args_of) or one with attributes (name, category, start, end,
 * device, resource, args). */
/* The names of what is read of an activity, made once a call. */
enum { M_NAME, M_TYPE, M_TIMESTAMP, M_DURATION, M_DEVICE_ID, M_RESOURCE_ID,
       M_METADATA_JSON, N_METHODS };
static const char *const method_names[N_METHODS] = {
    "name", "type", "timestamp", "duration", "device_id", "resource_id",
    "metadata_json",
};

/* An activity's methods are called as the functions they bind (for
 * torch's pybind11 objects, the functions of their type's
 * instancemethods) with the activity as argument: no attribute lookup nor
 * bound method each time, about 15% of the reads' time with the GIL.
 * funcs[m]: a's method m's function (strong) when every instance of a's
 * type resolves m to it (no instance __dict__, no attribute hook of its
 * own), else NULL: called as a.m(). */
static void
methods_of(PyObject *a, PyObject *const *names, PyObject **funcs)
{
    PyTypeObject *type = a != NULL ? Py_TYPE(a) : NULL;
    int direct = type != NULL && type->tp_getattro == PyObject_GenericGetAttr
                 && type->tp_dictoffset == 0;
    for (int m = 0; m < N_METHODS; m++) {
        Py_CLEAR(funcs[m]);
        if (!direct) {
            continue;
        }
        PyObject *bound = PyObject_GetAttr(a, names[m]);
        if (bound != NULL && PyMethod_Check(bound)
            && PyMethod_GET_SELF(bound) == a) {
            funcs[m] = Py_NewRef(PyMethod_GET_FUNCTION(bound));
        }
        else if (bound == NULL) {
            PyErr_Clear();  /* the call reports it, as before */
        }
        Py_XDECREF(bound);
    }
}

static PyObject *
call(PyObject *a, PyObject *const *names, PyObject *const *funcs, int which)
{
    if (funcs[which] != NULL) {
        /* Not PyObject_Vectorcall: before 3.11 it inlines private API. */
        return PyObject_CallFunctionObjArgs(funcs[which], a, NULL);
    }
    return PyObject_CallMethodNoArgs(a, names[which]);
}

/* args_of(text) for torch's metadata_json() text, made once per distinct
 * text (the same ops with the same shapes repeat every step): memo maps
 * the text to it, so Slices of equal metadata share one args dict. */
static PyObject *
args_of_text(PyObject *args_of, PyObject *memo, PyObject *text)
{
    PyObject *args = PyDict_GetItemWithError(memo, text);
    if (args != NULL) {
        return Py_NewRef(args);
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    args = PyObject_CallFunctionObjArgs(args_of, text, NULL);
    if (args != NULL && PyDict_SetItem(memo, text, args) < 0) {
        Py_CLEAR(args);
    }
    return args;
}

static int
read_activity(PyObject *a, Py_ssize_t i, int methods, PyObject *args_of,
              PyObject *memo, PyObject *const *names, PyObject *const *funcs,
              op_rec *r)
{
    long long start, end, dur;
    if (methods) {
        r->name = as_str(call(a, names, funcs, M_NAME), "name()", i);
        r->cat = as_str(call(a, names, funcs, M_TYPE), "type()", i);
        if (r->name == NULL || r->cat == NULL
            || as_int64(call(a, names, funcs, M_TIMESTAMP), "timestamp()",
                        i, &start) < 0
            || as_int64(call(a, names, funcs, M_DURATION), "duration()", i,
                        &dur) < 0
            || as_int64(call(a, names, funcs, M_DEVICE_ID), "device_id()",
                        i, &r->device) < 0
            || as_int64(call(a, names, funcs, M_RESOURCE_ID),
                        "resource_id()", i, &r->resource) < 0) {
            return -1;
        }
        end = start + (dur > 0 ? dur : 0);
        if (args_of != Py_None) {
            PyObject *text = call(a, names, funcs, M_METADATA_JSON);
            if (text == NULL) {
                return -1;
            }
            r->args = PyUnicode_CheckExact(text)
                      ? args_of_text(args_of, memo, text)
                      : PyObject_CallFunctionObjArgs(args_of, text, NULL);
            Py_DECREF(text);
            if (r->args == NULL) {
                return -1;
            }
        }
    }
    else {
        r->name = as_str(PyObject_GetAttrString(a, "name"), "name", i);
        r->cat = as_str(PyObject_GetAttrString(a, "category"), "category",
                        i);
        if (r->name == NULL || r->cat == NULL
            || as_int64(PyObject_GetAttrString(a, "start"), "start", i,
                        &start) < 0
            || as_int64(PyObject_GetAttrString(a, "end"), "end", i, &end) < 0
            || as_int64(PyObject_GetAttrString(a, "device"), "device", i,
                        &r->device) < 0
            || as_int64(PyObject_GetAttrString(a, "resource"), "resource", i,
                        &r->resource) < 0) {
            return -1;
        }
        r->args = PyObject_GetAttrString(a, "args");
        if (r->args == NULL) {
            return -1;
        }
    }
    if (r->args == Py_None) {
        Py_CLEAR(r->args);
    }
    if (r->resource < 0) {
        r->resource = -r->resource;
    }
    r->start = start;
    r->end = end;
    return 0;
}

static PyObject *
make_slice(PyObject *slice_type, const op_rec *r, int64_t start, int64_t end,
           PyObject *args)
{
    /* Slice is a NamedTuple: filled as tuple_new fills a subtype's
     * instance, without the two tuples its __new__ would make first. */
    PyObject *s = PyLong_FromLongLong(start);
    PyObject *e = s != NULL ? PyLong_FromLongLong(end) : NULL;
    PyObject *result = e != NULL
        ? ((PyTypeObject *)slice_type)->tp_alloc((PyTypeObject *)slice_type, 5)
        : NULL;
    if (result == NULL) {
        Py_XDECREF(s);
        Py_XDECREF(e);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, Py_NewRef(r->name));
    PyTuple_SET_ITEM(result, 1, Py_NewRef(r->cat));
    PyTuple_SET_ITEM(result, 2, s);
    PyTuple_SET_ITEM(result, 3, e);
    PyTuple_SET_ITEM(result, 4, Py_NewRef(args != NULL ? args : Py_None));
    return result;
}

/* A nested op's Slice: moved ones say by how much in their args. */
static PyObject *
nested_slice(PyObject *slice_type, const op_rec *r, const ft_nest_op *x)
{
    if (x->start == r->start && x->end == r->end) {
        return make_slice(slice_type, r, r->start, r->end, r->args);
    }
    PyObject *args = r->args != NULL ? PyDict_Copy(r->args) : PyDict_New();
    if (args == NULL) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *d = NULL;
    if (x->start != r->start) {
        d = PyLong_FromLongLong(x->start - r->start);
        if (d == NULL || PyDict_SetItemString(args, "frametrace_moved_start_ns",
                                              d) < 0) {
            goto done;
        }
        Py_CLEAR(d);
    }
    if (x->end != r->end) {
        d = PyLong_FromLongLong(x->end - r->end);
        if (d == NULL || PyDict_SetItemString(args, "frametrace_moved_end_ns",
                                              d) < 0) {
            goto done;
        }
        Py_CLEAR(d);
    }
    result = make_slice(slice_type, r, x->start, x->end, args);
done:
    Py_XDECREF(d);
    Py_DECREF(args);
    return result;
}

static int
append_to(PyObject *dict, PyObject *key, PyObject *item)
{
    if (item == NULL || key == NULL) {
        Py_XDECREF(item);
        return -1;
    }
    PyObject *list = PyDict_GetItemWithError(dict, key);
    if (list == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(item);
            return -1;
        }
        list = PyList_New(0);
        if (list == NULL || PyDict_SetItem(dict, key, list) < 0) {
            Py_XDECREF(list);
            Py_DECREF(item);
            return -1;
        }
        Py_DECREF(list);  /* the dict holds it */
    }
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

/* The replay and the sweep of every thread that has ops: pure C, run
 * without the GIL.  0, or -1 when out of memory. */
static int
nest_all(const ft_export *ex, thread_ops *threads, size_t nthreads,
         const op_rec *recs, int64_t tol)
{
    ft_thread_events te = {0};
    ft_nest_frame *frames = NULL;
    size_t frames_cap = 0;
    int rc = -1;
    for (size_t k = 0; k < nthreads; k++) {
        thread_ops *t = &threads[k];
        if (ft_export_thread(ex, t->thread, &te) < 0) {
            goto done;
        }
        size_t nf = te.head.len + te.body.len;
        if (nf > frames_cap) {
            ft_nest_frame *grown = realloc(frames, nf * sizeof(*frames));
            if (grown == NULL) {
                goto done;
            }
            frames = grown;
            frames_cap = nf;
        }
        for (size_t i = 0; i < nf; i++) {
            const ft_event *ev = ft_thread_event(&te, i);
            frames[i] = (ft_nest_frame){ev->start_ns, ev->end_ns, ev->parent};
        }
        t->ops = malloc(t->n * sizeof(ft_nest_op));
        t->crossing = calloc(t->n, 1);
        if (t->ops == NULL || t->crossing == NULL) {
            goto done;
        }
        for (size_t i = 0; i < t->n; i++) {
            const op_rec *r = &recs[t->members[i]];
            t->ops[i] = (ft_nest_op){r->start, r->end, i};
        }
        ft_nest_sort(t->ops, t->n);
        if (ft_nest_ops(frames, nf, t->ops, t->n, tol, t->crossing) < 0) {
            goto done;
        }
    }
    rc = 0;
done:
    free(frames);
    ft_thread_events_free(&te);
    return rc;
}

/* thread_of's entry for a resource (a native thread id): *t its index in
 * the tracer's threads, *where the entry (borrowed), or *t -1 when the
 * thread was not traced.  0, or -1 with an exception. */
enum { NOT_CACHED = -2 };

static int
thread_where(PyObject *thread_of, long long resource, Py_ssize_t ntracer,
             PyObject **where, Py_ssize_t *t)
{
    PyObject *key = PyLong_FromLongLong(resource);
    if (key == NULL) {
        return -1;
    }
    *where = PyDict_GetItemWithError(thread_of, key);
    Py_DECREF(key);
    *t = -1;
    if (*where == NULL) {
        return PyErr_Occurred() != NULL ? -1 : 0;
    }
    if (!PyTuple_Check(*where) || PyTuple_GET_SIZE(*where) != 3
        || (*t = PyLong_AsSsize_t(PyTuple_GET_ITEM(*where, 0))) < 0
        || *t >= ntracer) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "_join_ops(): thread_of's "
                            "values are (thread index, serial, label)");
        }
        return -1;
    }
    return 0;
}

/* _join_ops(tracer, activities, slice_type, thread_of, offset_ns, pid,
 * tolerance_ns, args_of): ({thread serial: [Slice]}, [(track name,
 * [Slice])]) as frametrace.torch.torch_trace_slices() describes;
 * thread_of: {native thread id: (index in tracer.threads, serial,
 * label)}; args_of: None, or what makes an activity's args of torch's
 * metadata_json() text. */
static PyObject *
join_ops(PyObject *module, PyObject *args)
{
    PyObject *tracer_obj, *activities, *slice_type, *thread_of, *args_of;
    long long offset, pid, tol;
    /* Positional only (every name ""): the _Tuple_SizeT variant is not
     * in compat.h's list, ParseTupleAndKeywords is. */
    static char *kwlist[] = {"", "", "", "", "", "", "", "", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, NULL, "OOOO!LLLO:_join_ops",
                                     kwlist, &tracer_obj, &activities,
                                     &slice_type, &PyDict_Type, &thread_of,
                                     &offset, &pid, &tol, &args_of)) {
        return NULL;
    }
    ft_state *state = ft_get_state(module);
    if (tracer_obj != Py_None
        && !PyObject_TypeCheck(tracer_obj, state->tracer_type)) {
        PyErr_Format(PyExc_TypeError, "_join_ops(): a frametrace.Tracer or "
                     "None expected, not %.100s", Py_TYPE(tracer_obj)->tp_name);
        return NULL;
    }
    if (!PyType_Check(slice_type)
        || !PyType_IsSubtype((PyTypeObject *)slice_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "_join_ops(): slice_type must be a "
                        "NamedTuple");
        return NULL;
    }
    /* None: no Python traced, every op on a track of its own. */
    ft_tracer *tracer = tracer_obj != Py_None ? (ft_tracer *)tracer_obj
                                              : NULL;
    /* A tuple of its own: reading an activity may run Python code, which
     * must not shrink what is being read. */
    PyObject *seq = PySequence_Tuple(activities);
    if (seq == NULL) {
        return NULL;
    }
    PyObject *names[N_METHODS] = {NULL};
    PyObject *funcs[N_METHODS] = {NULL};
    for (int m = 0; m < N_METHODS; m++) {
        names[m] = PyUnicode_InternFromString(method_names[m]);
        if (names[m] == NULL) {
            for (int k = 0; k < m; k++) {
                Py_DECREF(names[k]);
            }
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    op_rec *recs = calloc((size_t)n + 1, sizeof(op_rec));
    thread_ops *threads = NULL;
    size_t nthreads = 0;
    PyObject *serials = NULL, *labels = NULL;
    PyObject *slices = NULL, *own = NULL, *result = NULL, *memo = NULL;
    ft_export ex = {0};
    if (recs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Pinned before the activities are read: reading them runs Python
     * (and gives the GIL away in turns), during which another thread may
     * clear() the tracer. */
    if (tracer != NULL && ft_export_begin(&ex, tracer, "_join_ops()") < 0) {
        goto done;
    }
    Py_ssize_t ntracer = tracer != NULL ? ex.nthreads : 0;
    /* Per tracer thread: where its ops go (index in threads), its serial
     * and its label. */
    size_t *slot = malloc(((size_t)ntracer + 1) * sizeof(size_t));
    serials = PyList_New(ntracer);
    labels = PyList_New(ntracer);
    threads = calloc((size_t)ntracer + 1, sizeof(thread_ops));
    if (slot == NULL || threads == NULL) {
        free(slot);
        slot = NULL;
        PyErr_NoMemory();
        goto done;
    }
    if (serials == NULL || labels == NULL) {
        free(slot);
        goto done;
    }
    for (Py_ssize_t t = 0; t < ntracer; t++) {
        slot[t] = SIZE_MAX;
    }
    PyTypeObject *last_type = NULL;
    long long cached_resource = 0;
    Py_ssize_t cached_t = NOT_CACHED;
    int methods = 0;
    int failed = 0;
    ft_gil_share share;
    ft_gil_share_begin(&share);
    memo = PyDict_New();
    if (memo == NULL) {
        free(slot);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        ft_gil_share_point(&share);
        PyObject *a = PyTuple_GET_ITEM(seq, i);
        if (Py_TYPE(a) != last_type) {
            last_type = Py_TYPE(a);
            methods = PyObject_HasAttrString(a, "timestamp");
            methods_of(methods ? a : NULL, names, funcs);
        }
        op_rec *r = &recs[i];
        r->thread = -1;
        if (read_activity(a, i, methods, args_of, memo, names, funcs,
                          r) < 0) {
            failed = 1;
            break;
        }
        if (!(r->device == pid || r->device < 0)) {
            continue;
        }
        /* An op's thread is most often the previous op's: looked up
         * again only when it changes. */
        Py_ssize_t t = cached_t;
        if (t == NOT_CACHED || r->resource != cached_resource) {
            PyObject *where;
            if (thread_where(thread_of, r->resource, ntracer, &where,
                             &t) < 0) {
                failed = 1;
                break;
            }
            if (t >= 0 && slot[t] == SIZE_MAX) {
                slot[t] = nthreads;
                threads[nthreads++].thread = t;
                PyList_SET_ITEM(serials, t,
                                Py_NewRef(PyTuple_GET_ITEM(where, 1)));
                PyList_SET_ITEM(labels, t,
                                Py_NewRef(PyTuple_GET_ITEM(where, 2)));
            }
            cached_resource = r->resource;
            cached_t = t;
        }
        if (t < 0) {
            continue;
        }
        thread_ops *to = &threads[slot[t]];
        if (to->n == to->cap) {
            size_t cap = to->cap ? 2 * to->cap : 64;
            size_t *grown = realloc(to->members, cap * sizeof(size_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                failed = 1;
                break;
            }
            to->members = grown;
            to->cap = cap;
        }
        to->members[to->n++] = (size_t)i;
        r->thread = t;
    }
    free(slot);
    if (failed) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        recs[i].start -= offset;
        recs[i].end -= offset;
    }
    if (nthreads > 0) {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = nest_all(&ex, threads, nthreads, recs, tol);
        Py_END_ALLOW_THREADS
        if (rc < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    /* The Slices, with the GIL: a thread's nested ops, then the tracks of
     * their own (ops of threads not traced, devices, ops that cross their
     * thread's frames). */
    slices = PyDict_New();
    own = PyDict_New();
    if (slices == NULL || own == NULL) {
        goto done;
    }
    ft_gil_share_begin(&share);
    for (Py_ssize_t i = 0; i < n; i++) {
        op_rec *r = &recs[i];
        if (r->thread >= 0) {
            continue;
        }
        ft_gil_share_point(&share);
        PyObject *key = (r->device == pid || r->device < 0)
            ? PyUnicode_FromFormat("torch: thread %lld", r->resource)
            : PyUnicode_FromFormat("torch: device %lld stream %lld", r->device,
                                   r->resource);
        int rc = append_to(own, key, make_slice(slice_type, r, r->start,
                                                 r->end, r->args));
        Py_XDECREF(key);
        if (rc < 0) {
            goto done;
        }
    }
    for (size_t k = 0; k < nthreads; k++) {
        thread_ops *t = &threads[k];
        PyObject *serial = PyList_GET_ITEM(serials, t->thread);
        PyObject *nested = PyList_New(0);
        if (nested == NULL) {
            goto done;
        }
        for (size_t i = 0; i < t->n; i++) {
            const ft_nest_op *x = &t->ops[i];
            if (t->crossing[x->idx]) {
                continue;
            }
            ft_gil_share_point(&share);
            PyObject *s = nested_slice(slice_type, &recs[t->members[x->idx]],
                                       x);
            if (s == NULL || PyList_Append(nested, s) < 0) {
                Py_XDECREF(s);
                Py_DECREF(nested);
                goto done;
            }
            Py_DECREF(s);
        }
        int rc = PyList_GET_SIZE(nested) > 0
                 ? PyDict_SetItem(slices, serial, nested) : 0;
        Py_DECREF(nested);
        if (rc < 0) {
            goto done;
        }
        PyObject *key = NULL;
        for (size_t i = 0; i < t->n; i++) {  /* in activity order */
            if (!t->crossing[i]) {
                continue;
            }
            if (key == NULL) {
                key = PyUnicode_FromFormat("torch: %S (not nested in its "
                                           "frames)",
                                           PyList_GET_ITEM(labels, t->thread));
                if (key == NULL) {
                    goto done;
                }
            }
            const op_rec *r = &recs[t->members[i]];
            if (append_to(own, key, make_slice(slice_type, r, r->start,
                                               r->end, r->args)) < 0) {
                Py_DECREF(key);
                goto done;
            }
        }
        Py_XDECREF(key);
    }
    PyObject *tracks = PyDict_Items(own);
    if (tracks == NULL) {
        goto done;
    }
    if (PyList_Sort(tracks) < 0) {
        Py_DECREF(tracks);
        goto done;
    }
    result = PyTuple_Pack(2, slices, tracks);
    Py_DECREF(tracks);
done:
    ft_export_end(&ex);
    if (threads != NULL) {
        for (size_t k = 0; k < nthreads; k++) {
            free(threads[k].members);
            free(threads[k].ops);
            free(threads[k].crossing);
        }
        free(threads);
    }
    if (recs != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_XDECREF(recs[i].name);
            Py_XDECREF(recs[i].cat);
            Py_XDECREF(recs[i].args);
        }
        free(recs);
    }
    Py_XDECREF(serials);
    Py_XDECREF(labels);
    Py_XDECREF(slices);
    Py_XDECREF(own);
    Py_XDECREF(memo);
    for (int m = 0; m < N_METHODS; m++) {
        Py_DECREF(names[m]);
        Py_XDECREF(funcs[m]);
    }
    Py_DECREF(seq);
    return result;
}

PyMethodDef ft_join_ops_def = {
    "_join_ops", join_ops, METH_VARARGS,
    "_join_ops(tracer, activities, slice_type, thread_of, offset_ns, pid, "
    "tolerance_ns, args_of): frametrace.torch's join, the sweep without the "
    "GIL.",
};
