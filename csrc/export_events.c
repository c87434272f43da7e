/* The writers' second source: a list of frametrace.Event (a trace read
 * from a file) taken into what a tracer's replay gives, so that the same
 * encoders write it: a function table, and each thread's events sorted by
 * start (a parent before its children) with their parents.
 *
 * Also _write_events(), the module function that writes such a list. */
#include "export_driver.h"

#include <stdlib.h>

/* ft_event.parent holds the event's index in the list until the events
 * are sorted: ties keep the list's order. */
static int
event_order(const void *a, const void *b)
{
    const ft_event *x = a, *y = b;
    if (x->start_ns != y->start_ns) {
        return x->start_ns < y->start_ns ? -1 : 1;
    }
    if (x->depth != y->depth) {
        return x->depth < y->depth ? -1 : 1;
    }
    return x->parent < y->parent ? -1 : x->parent > y->parent;
}

/* The function id of info's (name, filename, lineno, kind), given in
 * order of first use: funcs maps the 4-tuple to its id. */
static int
func_id(ft_driver *d, PyObject *funcs, PyObject *info, Py_ssize_t i,
        uint32_t *id, uint32_t *cap)
{
    PyObject *key = PyTuple_GET_SIZE(info) == 4 ? Py_NewRef(info)
                    : PyTuple_GetSlice(info, 0, 4);
    if (key == NULL) {
        return -1;
    }
    PyObject *found = PyDict_GetItemWithError(funcs, key);
    if (found != NULL) {
        Py_DECREF(key);
        *id = (uint32_t)PyLong_AsUnsignedLong(found);
        return 0;
    }
    int rc = -1;
    PyObject *name = PyTuple_GET_ITEM(key, 0);
    PyObject *filename = PyTuple_GET_ITEM(key, 1);
    PyObject *kind = PyTuple_GET_ITEM(key, 3);
    if (PyErr_Occurred() || ft_check_function(key, i) < 0) {
        goto done;
    }
    int lineno = (int)PyLong_AsLong(PyTuple_GET_ITEM(key, 2));  /* an int32 */
    if (d->nfuncs == FT_ID_IGNORED - 1) {
        PyErr_SetString(PyExc_ValueError, "too many functions");
        goto done;
    }
    if (d->nfuncs == *cap) {
        uint32_t grown_cap = *cap ? *cap * 2 : 256;
        ft_func *grown = realloc(d->own_funcs, grown_cap * sizeof(ft_func));
        if (grown == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        d->own_funcs = grown;
        *cap = grown_cap;
    }
    PyObject *value = PyLong_FromUnsignedLong(d->nfuncs);
    if (value == NULL || PyDict_SetItem(funcs, key, value) < 0) {
        Py_XDECREF(value);
        goto done;
    }
    Py_DECREF(value);
    /* The dict keeps key, and so the names borrowed here. */
    d->own_funcs[d->nfuncs] = (ft_func){
        .name = name, .filename = filename, .lineno = lineno,
        .is_c = PyUnicode_CompareWithASCIIString(kind, "c") == 0,
        .state = FT_FUNC_LIVE};
    *id = d->nfuncs++;
    rc = 0;
done:
    Py_DECREF(key);
    return rc;
}

/* The thread index of each (serial, tid) of threads, by serial; the tids
 * into d->tids. */
static PyObject *
take_threads(ft_driver *d, PyObject *threads)
{
    if (!PyList_Check(threads)) {
        PyErr_SetString(PyExc_TypeError, "threads must be a list of "
                        "(thread_serial, tid)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(threads);
    PyObject *index = PyDict_New();
    d->tids = calloc((size_t)n + 1, sizeof(uint64_t));
    d->vecs = calloc((size_t)n + 1, sizeof(ft_eventvec));
    if (index == NULL || d->tids == NULL || d->vecs == NULL) {
        Py_XDECREF(index);
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        return NULL;
    }
    d->nthreads = n;
    for (Py_ssize_t t = 0; t < n; t++) {
        PyObject *pair = PyList_GET_ITEM(threads, t);
        PyObject *pos = PyLong_FromSsize_t(t);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2
            || !PyLong_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "threads must be a list of "
                            "(thread_serial, tid)");
        }
        else if (pos != NULL) {
            d->tids[t] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 1));
        }
        if (pos == NULL || PyErr_Occurred()
            || PyDict_SetItem(index, PyTuple_GET_ITEM(pair, 0), pos) < 0) {
            Py_XDECREF(pos);
            Py_DECREF(index);
            return NULL;
        }
        Py_DECREF(pos);
    }
    return index;
}

/* Event i's thread index (by its serial). */
static int
thread_of(PyObject *index, PyObject *info, PyObject *thread, Py_ssize_t i,
          Py_ssize_t *t)
{
    PyObject *serial = thread != NULL
        ? (PyTuple_GET_SIZE(thread) == 3 ? PyTuple_GET_ITEM(thread, 2) : NULL)
        : PyTuple_GET_ITEM(info, 12);
    PyObject *pos = serial != NULL ? PyDict_GetItemWithError(index, serial)
                                   : NULL;
    if (pos == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "events[%zd]: its thread_serial "
                         "%R is none of the threads'", i, serial);
        }
        return -1;
    }
    *t = PyLong_AsSsize_t(pos);
    return 0;
}

/* Pops the calls that do not hold ev off the stack of open ones (depth
 * of them); with check, -1 with a ValueError where one of them ends after
 * ev starts (ev->parent and the stack's still the list indices). */
static int
pop_to_holder(const ft_eventvec *vec, const size_t *stack, size_t *depth,
              const ft_event *ev, int check)
{
    while (*depth) {
        const ft_event *top = &vec->items[stack[*depth - 1]];
        if (top->depth < ev->depth && ev->end_ns <= top->end_ns) {
            break;
        }
        if (check && top->end_ns > ev->start_ns) {
            PyErr_Format(PyExc_ValueError, "events[%lld] and events[%lld] "
                         "overlap, neither holding the other",
                         (long long)top->parent, (long long)ev->parent);
            return -1;
        }
        (*depth)--;
    }
    return 0;
}

/* Sorts a thread's events and finds their parents: the innermost open
 * call of lower depth that holds it.  -1 with a ValueError when two
 * overlap without one holding the other. */
static int
nest(ft_eventvec *vec, size_t *stack)
{
    qsort(vec->items, vec->len, sizeof(ft_event), event_order);
    size_t depth = 0;
    for (size_t i = 0; i < vec->len; i++) {
        if (pop_to_holder(vec, stack, &depth, &vec->items[i], 1) < 0) {
            return -1;
        }
        stack[depth++] = i;
    }
    /* The parents, now that the list indices are no longer needed. */
    depth = 0;
    for (size_t i = 0; i < vec->len; i++) {
        ft_event *ev = &vec->items[i];
        pop_to_holder(vec, stack, &depth, ev, 0);
        ev->parent = depth ? (int64_t)stack[depth - 1] : -1;
        stack[depth++] = i;
    }
    return 0;
}

int
ft_events_take(ft_driver *d, const ft_source *src)
{
    if (!PyList_Check(src->events)) {
        PyErr_Format(PyExc_TypeError, "events must be a list of "
                     "frametrace.Event, not %.100s",
                     Py_TYPE(src->events)->tp_name);
        return -1;
    }
    /* A copy: nothing can change it while it is read. */
    PyObject *events = PyList_AsTuple(src->events);
    PyObject *funcs = PyDict_New();
    PyObject *index = funcs != NULL ? take_threads(d, src->threads) : NULL;
    d->keep = funcs;
    size_t *counts = NULL, *stack = NULL;
    uint32_t cap = 0;
    int rc = -1;
    if (events == NULL || index == NULL) {
        goto done;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(events);
    /* Each event's thread index; then the nesting stack. */
    size_t *where = calloc((size_t)n + 1, sizeof(size_t));
    counts = calloc((size_t)d->nthreads + 1, sizeof(size_t));
    stack = where;
    if (where == NULL || counts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Each event's thread first (the vectors' sizes), then its values. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *info, *thread;
        ft_event ev;
        Py_ssize_t t;
        if (ft_event_parts(src->state, PyTuple_GET_ITEM(events, i), &info,
                           &thread, &ev) < 0) {
            PyErr_Format(PyExc_TypeError, "events[%zd] is not a "
                         "frametrace.Event with int64 times, an int depth "
                         "and bool flags (%.100s)", i,
                         Py_TYPE(PyTuple_GET_ITEM(events, i))->tp_name);
            goto done;
        }
        if (thread_of(index, info, thread, i, &t) < 0) {
            goto done;
        }
        where[i] = (size_t)t;
        counts[t]++;
    }
    for (Py_ssize_t t = 0; t < d->nthreads; t++) {
        d->vecs[t].items = calloc(counts[t] + 1, sizeof(ft_event));
        if (d->vecs[t].items == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        d->vecs[t].cap = counts[t] + 1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = PyTuple_GET_ITEM(events, i);
        PyObject *info, *thread;
        ft_event ev = {0};
        ft_event_parts(src->state, obj, &info, &thread, &ev);  /* checked */
        if (func_id(d, funcs, info, i, &ev.func, &cap) < 0) {
            goto done;
        }
        if (ev.start_ns < 0 || ev.end_ns < ev.start_ns) {
            PyErr_Format(PyExc_ValueError, "events[%zd]: start_ns %lld and "
                         "end_ns %lld are not 0 <= start_ns <= end_ns", i,
                         (long long)ev.start_ns, (long long)ev.end_ns);
            goto done;
        }
        if (ev.end_ns > src->stop_ns) {
            PyErr_Format(PyExc_ValueError, "events[%zd] ends at %lld, after "
                         "the trace's stop (%lld)", i, (long long)ev.end_ns,
                         (long long)src->stop_ns);
            goto done;
        }
        ev.is_c = (uint8_t)d->own_funcs[ev.func].is_c;
        ev.parent = i;  /* the sort's tie-break: see event_order() */
        ft_eventvec *vec = &d->vecs[where[i]];
        vec->items[vec->len++] = ev;
    }
    for (Py_ssize_t t = 0; t < d->nthreads; t++) {
        if (nest(&d->vecs[t], stack) < 0) {
            goto done;
        }
    }
    d->funcs = d->own_funcs;
    rc = 0;
done:
    free(stack);
    free(counts);
    Py_XDECREF(events);
    Py_XDECREF(index);
    return rc;
}

void
ft_events_free(ft_driver *d)
{
    for (Py_ssize_t t = 0; d->vecs != NULL && t < d->nthreads; t++) {
        free(d->vecs[t].items);
    }
    free(d->vecs);
    d->vecs = NULL;
    free(d->own_funcs);
    d->own_funcs = NULL;
    Py_CLEAR(d->keep);
}

/* _write_events(path, *, events, threads, stop_ns, format, ...): the
 * format's own arguments as for Tracer._write_chrome()/_write_perfetto(). */
static PyObject *
write_events(PyObject *module, PyObject *args, PyObject *kwargs)
{
    ft_source src = {.state = ft_get_state(module), .stop_ns = INT64_MAX};
    PyObject *rest = kwargs != NULL ? PyDict_Copy(kwargs) : PyDict_New();
    PyObject *result = NULL;
    if (rest == NULL) {
        return NULL;
    }
    /* Borrowed from kwargs, which the call keeps. */
    src.events = kwargs != NULL ? PyDict_GetItemString(kwargs, "events")
                                : NULL;
    src.threads = kwargs != NULL ? PyDict_GetItemString(kwargs, "threads")
                                 : NULL;
    PyObject *format = kwargs != NULL ? PyDict_GetItemString(kwargs, "format")
                                      : NULL;
    PyObject *stop = kwargs != NULL ? PyDict_GetItemString(kwargs, "stop_ns")
                                    : NULL;
    if (src.events == NULL || src.threads == NULL || format == NULL
        || !PyUnicode_Check(format)) {
        PyErr_SetString(PyExc_TypeError, "_write_events() needs events, "
                        "threads and format");
        goto done;
    }
    if (stop != NULL && stop != Py_None) {
        src.stop_ns = PyLong_AsLongLong(stop);
        if (src.stop_ns == -1 && PyErr_Occurred()) {
            goto done;
        }
    }
    if (PyDict_DelItemString(rest, "events") < 0
        || PyDict_DelItemString(rest, "threads") < 0
        || PyDict_DelItemString(rest, "format") < 0
        || (stop != NULL && PyDict_DelItemString(rest, "stop_ns") < 0)) {
        goto done;
    }
    if (PyUnicode_CompareWithASCIIString(format, "chrome") == 0) {
        result = ft_write_chrome_source(&src, args, rest);
    }
    else if (PyUnicode_CompareWithASCIIString(format, "perfetto") == 0) {
        result = ft_write_perfetto_source(&src, args, rest);
    }
    else {
        PyErr_Format(PyExc_ValueError, "_write_events(): no format %R",
                     format);
    }
done:
    Py_DECREF(rest);
    return result;
}

PyMethodDef ft_write_events_def = {
    "_write_events", (PyCFunction)(void (*)(void))write_events,
    METH_VARARGS | METH_KEYWORDS,
    "_write_events($module, path, *, events, threads, stop_ns, format,\n"
    "              **format's)\n--\n\n"
    "Writes events (a list of frametrace.Event: a trace read from a file)\n"
    "through the C writers: format \"chrome\" takes _write_chrome()'s\n"
    "arguments, \"perfetto\" _write_perfetto()'s.  threads: [(thread_serial,\n"
    "tid)] of every thread an event names, in writing order; stop_ns: no\n"
    "event ends later (None: unchecked).  Returns (events, deepest depth).",
};
