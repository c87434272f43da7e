/* The collapsed stacks' labels (_collapse_labels) and lines
 * (_collapsed_batch), made from the reports' call paths (report_pass.c). */
#include "report.h"

#include <string.h>

/* A column of ints given through the buffer protocol: a memoryview or
 * array of int64 ("q") or int32 ("i"), or bytes of packed int64. */
typedef struct {
    Py_buffer view;
    const char *items;
    size_t n;
    size_t width;
} int_column;

/* 0, or -1 with an exception (nothing to release then). */
static int
column_open(PyObject *obj, int_column *c)
{
    if (PyObject_GetBuffer(obj, &c->view,
                           PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    const char *fmt = c->view.format ? c->view.format : "B";
    Py_ssize_t size = c->view.itemsize;
    if ((strcmp(fmt, "q") == 0 || strcmp(fmt, "l") == 0) && size == 8) {
        c->width = 8;
    }
    else if (strcmp(fmt, "i") == 0 && size == 4) {
        c->width = 4;
    }
    else if (strcmp(fmt, "B") == 0 && size == 1
             && c->view.len % (Py_ssize_t)sizeof(int64_t) == 0) {
        c->width = 8;
    }
    else {
        PyBuffer_Release(&c->view);
        PyErr_SetString(PyExc_ValueError,
                        "a column of int64 or int32 expected");
        return -1;
    }
    c->items = c->view.buf;
    c->n = (size_t)c->view.len / c->width;
    return 0;
}

static int64_t
column_at(const int_column *c, size_t i)
{
    if (c->width == 4) {
        int32_t x;
        memcpy(&x, c->items + i * 4, 4);
        return x;
    }
    int64_t x;
    memcpy(&x, c->items + i * 8, 8);
    return x;
}

/* A list of ints as a PyMem array (*n of them); 0, or -1 with an
 * exception. */
static int
int64_list(PyObject *list, int64_t **items, size_t *n)
{
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "a list of int expected");
        return -1;
    }
    *n = (size_t)PyList_GET_SIZE(list);
    *items = PyMem_Malloc((*n ? *n : 1) * sizeof(int64_t));
    if (*items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < *n; i++) {
        (*items)[i] = PyLong_AsLongLong(PyList_GET_ITEM(list, (Py_ssize_t)i));
        if ((*items)[i] == -1 && PyErr_Occurred()) {
            PyMem_Free(*items);
            *items = NULL;
            return -1;
        }
    }
    return 0;
}

typedef struct {
    ft_key_table ids;    /* (up + 1, frame) -> label */
    ft_i64vec up, frame, value;
    uint8_t *big;        /* per label: its value passed int64 (in bigs) */
    size_t big_cap;
    PyObject *bigs;
} labels;

/* The label (up, frame): its index, or -1 when out of memory. */
static int64_t
label_of(labels *l, int64_t up, int64_t frame)
{
    uint64_t key = ft_two_ids(up + 1, frame);
    ft_key_slot *s = ft_keys_find(&l->ids, key);
    if (s->value >= 0) {
        return s->value;
    }
    int64_t id = (int64_t)l->up.len;
    ft_i64vec *cols[3] = {&l->up, &l->frame, &l->value};
    int64_t init[3] = {up, frame, 0};
    for (int k = 0; k < 3; k++) {
        if (ft_grow((void **)&cols[k]->items, &cols[k]->cap, cols[k]->len,
                    sizeof(int64_t)) < 0) {
            return -1;
        }
        cols[k]->items[cols[k]->len++] = init[k];
    }
    if (ft_grow((void **)&l->big, &l->big_cap, (size_t)id, 1) < 0) {
        return -1;
    }
    l->big[id] = 0;
    if (ft_keys_put(&l->ids, s, key, id) < 0) {
        return -1;
    }
    return id;
}

/* Path p's value (of a packed column, or a list of ints where a sum
 * passed int64) into *x (x->big strong): 0, or -1 with an exception. */
static int
value_at(PyObject *list, const int_column *c, size_t p, ft_num *x)
{
    x->big = NULL;
    if (list == NULL) {
        x->small = column_at(c, p);
        return 0;
    }
    PyObject *item = PyList_GET_ITEM(list, (Py_ssize_t)p);
    int overflow;
    x->small = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (x->small == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        x->big = Py_NewRef(item);
    }
    return 0;
}

/* The labels' values: packed, or a list of ints where one passed int64. */
static PyObject *
label_values(const labels *l)
{
    size_t n = l->value.len, k = 0;
    while (k < n && !l->big[k]) {
        k++;
    }
    if (k == n) {
        return ft_typed_view(PyBytes_FromStringAndSize(
            (const char *)l->value.items, (Py_ssize_t)(n * sizeof(int64_t))),
            "q");
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (k = 0; list != NULL && k < n; k++) {
        PyObject *v = ft_sum_value(l->bigs, l->value.items[k], l->big[k], 1,
                                   k);
        if (v == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, v);
    }
    return list;
}

static PyObject *
packed(const ft_i64vec *v)
{
    return PyBytes_FromStringAndSize((const char *)v->items,
                                     (Py_ssize_t)(v->len * sizeof(int64_t)));
}

/* _collapse_labels(parents, path_funcs, frame_of_func, top_of_func, values)
 * -> (label_up, label_frame, label_value) int64 memoryviews (values: a
 * list of ints where one passed int64). */
static PyObject *
collapse_labels(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_collapse_labels(parents, "
                        "path_funcs, "
                        "frame_of_func, top_of_func, values)");
        return NULL;
    }
    int_column cols[3];
    int held = 0;
    int64_t *frame_of = NULL, *top_of = NULL, *path_label = NULL;
    size_t nframe_of = 0, ntop_of = 0;
    labels l;
    memset(&l, 0, sizeof(l));
    PyObject *out = NULL;
    /* The values: packed, or a list where a sum passed int64. */
    PyObject *list = PyList_CheckExact(args[4]) ? args[4] : NULL;
    static const int at[3] = {0, 1, 4};
    for (; held < (list != NULL ? 2 : 3); held++) {
        if (column_open(args[at[held]], &cols[held]) < 0) {
            goto done;
        }
    }
    if (list != NULL) {
        cols[2].n = (size_t)PyList_GET_SIZE(list);
    }
    l.bigs = PyDict_New();
    if (l.bigs == NULL) {
        goto done;
    }
    if (int64_list(args[2], &frame_of, &nframe_of) < 0
        || int64_list(args[3], &top_of, &ntop_of) < 0) {
        goto done;
    }
    size_t n = cols[0].n;
    if (cols[1].n != n || cols[2].n != n || nframe_of != ntop_of) {
        PyErr_SetString(PyExc_ValueError, "_collapse_labels(): columns of "
                        "different lengths");
        goto done;
    }
    if (n >= INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "_collapse_labels(): too many "
                        "paths (labels' ids are 32 bits)");
        goto done;
    }
    path_label = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    if (path_label == NULL || ft_keys_init(&l.ids, 1024) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t p = 0; p < n; p++) {
        int64_t up = column_at(&cols[0], p), f = column_at(&cols[1], p), lid;
        if (f < 0 || (size_t)f >= nframe_of || up >= (int64_t)p || up < -1
            || frame_of[f] < 0 || frame_of[f] > INT32_MAX
            || top_of[f] > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "_collapse_labels(): a path's "
                            "parent or function is out of range");
            break;
        }
        if (up >= 0) {
            lid = label_of(&l, path_label[up], frame_of[f]);
        }
        else if (top_of[f] >= 0) {
            lid = label_of(&l, -1, top_of[f]);
            lid = lid < 0 ? lid : label_of(&l, lid, frame_of[f]);
        }
        else {
            lid = label_of(&l, -1, frame_of[f]);
        }
        if (lid < 0) {
            PyErr_NoMemory();
            break;
        }
        path_label[p] = lid;
        ft_num x;
        if (value_at(list, &cols[2], p, &x) < 0) {
            break;
        }
        int rc = ft_sum_add(l.bigs, &l.value.items[lid], &l.big[lid], 1,
                            (uint64_t)lid, x.small, x.big, 1);
        Py_XDECREF(x.big);
        if (rc < 0) {
            break;
        }
    }
    PyMem_Free(path_label);
    PyMem_Free(l.ids.slots);
    path_label = NULL;
    l.ids.slots = NULL;
    if (!PyErr_Occurred()) {
        out = Py_BuildValue("(NNN)", ft_typed_view(packed(&l.up), "q"),
                            ft_typed_view(packed(&l.frame), "q"),
                            label_values(&l));
    }
done:
    while (held-- > 0) {
        PyBuffer_Release(&cols[held].view);
    }
    PyMem_Free(frame_of);
    PyMem_Free(top_of);
    PyMem_Free(path_label);
    PyMem_Free(l.ids.slots);
    PyMem_Free(l.up.items);
    PyMem_Free(l.frame.items);
    PyMem_Free(l.value.items);
    PyMem_Free(l.big);
    Py_XDECREF(l.bigs);
    return out;
}

PyMethodDef ft_collapse_labels_def = {
    "_collapse_labels", (PyCFunction)(void (*)(void))collapse_labels,
    METH_FASTCALL,
    "_collapse_labels($module, parents, path_funcs, frame_of_func, "
    "top_of_func, values, /)\n--\n\n"
    "For frametrace.reports' collapsed stacks: the call paths (parents and\n"
    "functions packed as int64, the C pass's) merged into labels (parent\n"
    "label, frame id), each function's frame id and its thread's top frame\n"
    "id (-1: none) given; values summed per label.  (label_up,\n"
    "label_frame, label_value) packed (the values a list of ints where a\n"
    "sum passes int64).",
};

/* obj < 0 (or <= 0): 1, 0, or -1 with an exception. */
static int
below_zero(PyObject *obj, int op)
{
    PyObject *zero = PyLong_FromLong(0);
    int rc = zero == NULL ? -1 : PyObject_RichCompareBool(obj, zero, op);
    Py_XDECREF(zero);
    return rc;
}

/* A label's weight as its line shows it (self_weight: ns to us, rounded
 * to nearest; x->big stolen): a new int, None for a label weighing 0 or
 * less (left out), or NULL with an exception. */
static PyObject *
weight(ft_num *x, int self_weight)
{
    if (x->big == NULL) {
        int64_t v = x->small;
        if (self_weight) {
            v = v < 0 ? 0 : v / 1000 + (v % 1000 >= 500);
        }
        return v > 0 ? PyLong_FromLongLong(v) : Py_NewRef(Py_None);
    }
    PyObject *v = x->big;
    x->big = NULL;
    int negative = below_zero(v, Py_LT);
    if (negative != 0) {
        Py_DECREF(v);
        return negative < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (self_weight) {
        PyObject *half = PyLong_FromLong(500), *k = PyLong_FromLong(1000);
        PyObject *sum = half ? PyNumber_Add(v, half) : NULL;
        Py_SETREF(v, sum && k ? PyNumber_FloorDivide(sum, k) : NULL);
        Py_XDECREF(half);
        Py_XDECREF(k);
        Py_XDECREF(sum);
        if (v == NULL) {
            return NULL;
        }
    }
    int none = below_zero(v, Py_LE);
    if (none != 0) {
        Py_DECREF(v);
        return none < 0 ? NULL : Py_NewRef(Py_None);
    }
    return v;
}

/* _collapsed_batch(label_up, label_frame, label_value, frames, self_weight,
 * start, count) -> (lines, next): the lines of the labels from start, at
 * most count of them, each its frames' texts joined by ";" and its value
 * (self_weight: ns -> us, rounded); labels weighing 0 are left out. */
static PyObject *
collapsed_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7 || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "_collapsed_batch(label_up, "
                        "label_frame, label_value, frames: list, self_weight, "
                        "start, count)");
        return NULL;
    }
    int self_weight = PyObject_IsTrue(args[4]);
    Py_ssize_t start = PyLong_AsSsize_t(args[5]);
    Py_ssize_t count = PyLong_AsSsize_t(args[6]);
    if (self_weight < 0 || (start == -1 && PyErr_Occurred())
        || (count == -1 && PyErr_Occurred())) {
        return NULL;
    }
    int_column cols[3];
    int held = 0;
    PyObject *lines = NULL, *parts = NULL, *sep = NULL, *out = NULL;
    PyObject *value = NULL;
    PyObject *list = PyList_CheckExact(args[2]) ? args[2] : NULL;
    for (; held < (list != NULL ? 2 : 3); held++) {
        if (column_open(args[held], &cols[held]) < 0) {
            goto done;
        }
    }
    if (list != NULL) {
        cols[2].n = (size_t)PyList_GET_SIZE(list);
    }
    if (cols[1].n != cols[0].n || cols[2].n != cols[0].n || start < 0) {
        PyErr_SetString(PyExc_ValueError, "_collapsed_batch(): bad columns");
        goto done;
    }
    size_t n = cols[0].n;
    PyObject *texts = args[3];
    lines = PyList_New(0);
    parts = PyList_New(0);
    sep = PyUnicode_FromString(";");
    if (lines == NULL || parts == NULL || sep == NULL) {
        goto done;
    }
    size_t lid = (size_t)start;
    for (; lid < n && PyList_GET_SIZE(lines) < count; lid++) {
        ft_num x;
        if (value_at(list, &cols[2], lid, &x) < 0) {
            goto done;
        }
        value = weight(&x, self_weight);
        if (value == NULL) {
            goto done;
        }
        if (value == Py_None) {
            Py_CLEAR(value);
            continue;
        }
        if (PyList_SetSlice(parts, 0, PY_SSIZE_T_MAX, NULL) < 0) {
            goto done;
        }
        /* The frames from this label down to its root, then reversed. */
        for (int64_t up = (int64_t)lid; up >= 0;) {
            int64_t frame = column_at(&cols[1], (size_t)up);
            int64_t next = column_at(&cols[0], (size_t)up);
            if (frame < 0 || frame >= PyList_GET_SIZE(texts)) {
                PyErr_SetString(PyExc_ValueError, "_collapsed_batch(): a "
                                "label's frame is out of range");
                goto done;
            }
            if (next >= up) {
                PyErr_SetString(PyExc_ValueError, "_collapsed_batch(): a "
                                "label's parent is not an earlier label");
                goto done;
            }
            if (PyList_Append(parts, PyList_GET_ITEM(texts, frame)) < 0) {
                goto done;
            }
            up = next;
        }
        if (PyList_Reverse(parts) < 0) {
            goto done;
        }
        PyObject *joined = PyUnicode_Join(sep, parts);
        if (joined == NULL) {
            goto done;
        }
        PyObject *line = PyUnicode_FromFormat("%U %S", joined, value);
        Py_DECREF(joined);
        Py_CLEAR(value);
        if (line == NULL) {
            goto done;
        }
        int rc = PyList_Append(lines, line);
        Py_DECREF(line);
        if (rc < 0) {
            goto done;
        }
    }
    out = Py_BuildValue("(On)", lines, (Py_ssize_t)lid);
done:
    Py_XDECREF(value);
    while (held-- > 0) {
        PyBuffer_Release(&cols[held].view);
    }
    Py_XDECREF(lines);
    Py_XDECREF(parts);
    Py_XDECREF(sep);
    return out;
}

PyMethodDef ft_collapsed_batch_def = {
    "_collapsed_batch", (PyCFunction)(void (*)(void))collapsed_batch,
    METH_FASTCALL,
    "_collapsed_batch($module, label_up, label_frame, label_value, frames, "
    "self_weight, start, count, /)\n--\n\n"
    "For frametrace.reports' collapsed stacks: up to count lines of the\n"
    "labels from start (frame texts joined by ';', then the value; ns to\n"
    "rounded us where self_weight; labels weighing 0 left out), and the\n"
    "label to go on from.",
};
