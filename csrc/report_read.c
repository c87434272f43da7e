/* The reports' pass (report_pass.c): reading one event as Python
 * unpacks it, its thread and function, and the errors naming it. */
#include "report_pass.h"

#include <string.h>

static const char CALL_ORDER[] =
    " (events must be tracer.getEvents()'s list: each thread's events in "
    "call order, parent the index of an earlier event of the same thread, "
    "or -1)";

/* Raises exc "event i <repr>: <why>[ (events must be ...)]" (why a str,
 * stolen); -1. */
int
ft_rp_event_error(pass *p, Py_ssize_t i, PyObject *exc, PyObject *why,
                  int order)
{
    if (why == NULL) {
        return -1;
    }
    PyObject *ev = PySequence_GetItem(p->events, i);
    PyObject *repr = ev != NULL ? PyObject_Repr(ev) : NULL;
    if (repr != NULL) {
        PyErr_Format(exc, "event %zd %U: %U%s", i, repr, why,
                     order ? CALL_ORDER : "");
        p->named = 1;
    }
    Py_XDECREF(ev);
    Py_XDECREF(repr);
    Py_DECREF(why);
    return -1;
}

/* "parent <parent><rest>" as an f-string spells the parent. */
PyObject *
ft_rp_parent_why(const view *v, const char *rest)
{
    if (v->small_parent) {
        return PyUnicode_FromFormat("parent %lld%s", (long long)v->e.parent,
                                    rest);
    }
    PyObject *text = PyObject_Format(v->parent, NULL);
    if (text == NULL) {
        return NULL;
    }
    PyObject *why = PyUnicode_FromFormat("parent %U%s", text, rest);
    Py_DECREF(text);
    return why;
}

/* a != b as Python says it (no identity shortcut but for exact ints and
 * strs): 1, 0, or -1 with an exception. */
int
ft_rp_differ(PyObject *a, PyObject *b)
{
    if (a == b && (PyLong_CheckExact(a) || PyUnicode_CheckExact(a))) {
        return 0;
    }
    PyObject *ne = PyObject_RichCompare(a, b, Py_NE);
    if (ne == NULL) {
        return -1;
    }
    int rc = PyObject_IsTrue(ne);
    Py_DECREF(ne);
    return rc;
}

/* obj <op> k as Python says it: 1, 0, or -1 with an exception. */
int
ft_rp_compare_int(PyObject *obj, long long k, int op)
{
    PyObject *boxed = PyLong_FromLongLong(k);
    if (boxed == NULL) {
        return -1;
    }
    int rc = PyObject_RichCompareBool(obj, boxed, op);
    Py_DECREF(boxed);
    return rc;
}

/* lst[obj] for a list of len items, as list indexing reads obj: the
 * index, or -1 with an exception. */
Py_ssize_t
ft_rp_list_index(PyObject *obj, Py_ssize_t len)
{
    if (!PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "list indices must be integers or "
                     "slices, not %.200s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    Py_ssize_t i = PyNumber_AsSsize_t(obj, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (i < 0) {
        i += len;
    }
    if (i < 0 || i >= len) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return -1;
    }
    return i;
}

/* Unpacks event ev into v (as `name, ..., open_at_loss = ev` does): 0, or
 * -1 with an exception. */
int
ft_rp_read_event(pass *p, PyObject *ev, view *v)
{
    /* Not memset: this is per event. */
    v->values = v->info = v->thread = v->parent = NULL;
    v->d.big = NULL;
    v->have_numbers = v->small_parent = 0;
    PyObject *info, *thread;
    if (ft_event_parts(p->state, ev, &info, &thread, &v->e) == 0) {
        v->have_numbers = v->small_parent = 1;
        if (thread != NULL) {  /* getEvents()'s or the loader's */
            ft_rp_view_parts(v, info, thread);
            return 0;
        }
        v->values = Py_NewRef(info);
    }
    else {
        v->values = PySequence_Tuple(ev);
        if (v->values == NULL) {
            return -1;
        }
        Py_ssize_t n = PyTuple_GET_SIZE(v->values);
        if (n != N_FIELDS) {
            if (n < N_FIELDS) {
                PyErr_Format(PyExc_ValueError, "not enough values to unpack "
                             "(expected %d, got %zd)", N_FIELDS, n);
            }
            else {
                PyErr_Format(PyExc_ValueError, "too many values to unpack "
                             "(expected %d)", N_FIELDS);
            }
            return -1;
        }
        PyObject *parent = PyTuple_GET_ITEM(v->values, 9);
        int overflow = 1;
        if (PyLong_CheckExact(parent)) {
            v->e.parent = PyLong_AsLongLongAndOverflow(parent, &overflow);
        }
        v->small_parent = !overflow;
        v->parent = parent;
    }
    PyObject *const *f = &PyTuple_GET_ITEM(v->values, 0);
    v->name = f[0];
    v->filename = f[1];
    v->lineno = f[2];
    v->kind = f[3];
    v->ident = f[4];
    v->serial = f[12];
    return 0;
}

/* v->d = end - start, an int (TypeError naming the event if not): 0, or
 * -1 with an exception. */
int
ft_rp_duration_slow(pass *p, Py_ssize_t i, view *v)
{
    PyObject *start, *end;
    if (v->have_numbers) {
        start = PyLong_FromLongLong(v->e.start_ns);
        end = PyLong_FromLongLong(v->e.end_ns);
    }
    else {
        start = Py_NewRef(PyTuple_GET_ITEM(v->values, 6));
        end = Py_NewRef(PyTuple_GET_ITEM(v->values, 7));
    }
    PyObject *d = start && end ? PyNumber_Subtract(end, start) : NULL;
    Py_XDECREF(start);
    Py_XDECREF(end);
    if (d == NULL) {
        return -1;
    }
    if (!PyLong_CheckExact(d)) {
        /* A float time (inf, nan) would reach the flame graph's pixels. */
        Py_DECREF(d);
        return ft_rp_event_error(p, i, PyExc_TypeError, PyUnicode_FromString(
            "its start_ns and end_ns must be int"), 0);
    }
    int overflow;
    v->d.small = PyLong_AsLongLongAndOverflow(d, &overflow);
    if (overflow) {
        v->d.big = d;
        return 0;
    }
    Py_DECREF(d);
    return 0;
}

/* The thread of the event's thread key (its thread_serial, or thread_id
 * where that is falsy): its index, or -1 with an exception. */
int64_t
ft_rp_thread_of(pass *p, view *v, PyObject **key)
{
    ft_rp_view_fill(v);
    int truth = PyObject_IsTrue(v->serial);
    if (truth < 0) {
        return -1;
    }
    *key = truth ? v->serial : v->ident;
    PyObject *found = PyDict_GetItemWithError(p->thread_ids, *key);
    if (found != NULL) {
        return PyLong_AsLongLong(found);
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    if (ft_grow((void **)&p->threads, &p->threads_cap, p->nthreads,
                sizeof(thread_acc)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *boxed = PyLong_FromSize_t(p->nthreads);
    if (boxed == NULL) {
        return -1;
    }
    int rc = PyDict_SetItem(p->thread_ids, *key, boxed);
    Py_DECREF(boxed);
    if (rc < 0) {
        return -1;
    }
    thread_acc *t = &p->threads[p->nthreads];
    memset(t, 0, sizeof(*t));
    t->key = Py_NewRef(*key);
    t->ident = Py_NewRef(v->ident);
    return (int64_t)p->nthreads++;
}

int
ft_rp_not_str(pass *p, Py_ssize_t i)
{
    return ft_rp_event_error(p, i, PyExc_TypeError, PyUnicode_FromString(
        "its name and filename must be str"), 0);
}

/* The function (name, filename, lineno, kind, thread key) of the event,
 * by value (check_str: a new one's name and filename must be str): its
 * index, or -1 with an exception. */
int64_t
ft_rp_func_by_value(pass *p, Py_ssize_t i, view *v, PyObject *tkey,
                    int64_t thread, int check_str)
{
    ft_rp_view_fill(v);
    PyObject *key = PyTuple_Pack(5, v->name, v->filename, v->lineno,
                                 v->kind, tkey);
    if (key == NULL) {
        return -1;
    }
    int64_t index = -1;
    PyObject *found = PyDict_GetItemWithError(p->func_ids, key);
    if (found != NULL) {
        index = PyLong_AsLongLong(found);
    }
    else if (PyErr_Occurred()) {
        /* index -1 */
    }
    else if (check_str && (!PyUnicode_CheckExact(v->name)
                           || !PyUnicode_CheckExact(v->filename))) {
        ft_rp_not_str(p, i);
    }
    else {
        PyObject *boxed = NULL;
        if (ft_grow((void **)&p->funcs, &p->funcs_cap, p->nfuncs,
                    sizeof(func_acc)) < 0) {
            PyErr_NoMemory();
        }
        else if ((boxed = PyLong_FromSize_t(p->nfuncs)) != NULL
                 && PyDict_SetItem(p->func_ids, key, boxed) == 0
                 && PyList_Append(p->func_keys, key) == 0) {
            func_acc *f = &p->funcs[p->nfuncs];
            memset(f, 0, sizeof(*f));
            f->thread = thread;
            f->made_from = v->info;
            f->s.plain = PyLong_CheckExact(tkey) || PyUnicode_CheckExact(tkey);
            index = (int64_t)p->nfuncs++;
        }
        Py_XDECREF(boxed);
    }
    Py_DECREF(key);
    return index;
}

/* Remembers func as the function of the Event's tuples: 0, or -1 with an
 * exception. */
int
ft_rp_remember(pass *p, const view *v, int64_t func)
{
    if (v->thread == NULL) {
        return 0;
    }
    ft_key_slot *s = ft_keys_find(&p->infos, (uintptr_t)v->info);
    info_cache *c;
    if (s->value >= 0) {
        c = &p->cache[s->value];
    }
    else {
        if (ft_grow((void **)&p->cache, &p->cache_cap, p->ncache,
                    sizeof(info_cache)) < 0
            || ft_keys_put(&p->infos, s, (uintptr_t)v->info,
                           (int64_t)p->ncache) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        c = &p->cache[p->ncache++];
        c->info = Py_NewRef(v->info);
        c->thread = NULL;
    }
    Py_XSETREF(c->thread, Py_NewRef(v->thread));
    c->func = func;
    return 0;
}

/* A TypeError or ValueError met in the pass that named no event: where an
 * event is not 14 values, a TypeError naming the first such one instead. */
void
ft_rp_unpack_error(PyObject *events)
{
    if (!PyErr_ExceptionMatches(PyExc_TypeError)
        && !PyErr_ExceptionMatches(PyExc_ValueError)) {
        return;
    }
    ft_saved_exc saved, other;
    FT_SAVE_EXC(saved);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(events); i++) {
        PyObject *ev = Py_NewRef(PySequence_Fast_GET_ITEM(events, i));
        Py_ssize_t n = PyObject_Size(ev);
        if (n < 0 && !PyErr_ExceptionMatches(PyExc_TypeError)
            && !PyErr_ExceptionMatches(PyExc_ValueError)) {
            Py_DECREF(ev);
            goto replaced;  /* len() raised something else: that */
        }
        PyErr_Clear();
        if (n != N_FIELDS) {
            PyErr_Format(PyExc_TypeError, "event %zd %R is not a "
                         "frametrace.Event (14 fields: name, filename, "
                         "lineno, kind, thread_id, native_thread_id, "
                         "start_ns, end_ns, depth, parent, open_at_start, "
                         "open_at_stop, thread_serial, open_at_loss)", i, ev);
            Py_DECREF(ev);
            goto replaced;
        }
        Py_DECREF(ev);
    }
    FT_RESTORE_EXC(saved);
    return;
replaced:
    FT_SAVE_EXC(other);
    FT_RESTORE_EXC(saved);
    PyErr_Clear();
    FT_RESTORE_EXC(other);
}
