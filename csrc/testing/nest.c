/* nest(frames, ops, tolerance_ns): the join's sweep (csrc/nest.c) on
 * hand-made frames and ops, for the tests. */
#include "testing.h"
#include "../nest.h"

#include <stdlib.h>

static int
read_pairs(PyObject *seq, const char *what, int64_t *a, int64_t *b,
           int64_t *c, Py_ssize_t i)
{
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    long long x, y, z = -1;
    int ok = PyTuple_Check(item) && (c != NULL ? PyArg_ParseTuple(item, "LLL", &x, &y, &z)
                       : PyArg_ParseTuple(item, "LL", &x, &y));
    if (!ok) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "nest(): %s[%zd] must be a tuple of "
                     "ints", what, i);
        return -1;
    }
    *a = x;
    *b = y;
    if (c != NULL) {
        *c = z;
    }
    return 0;
}

PyObject *
ftt_nest(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *frames_obj, *ops_obj;
    long long tol;
    if (!PyArg_ParseTuple(args, "OOL:nest", &frames_obj, &ops_obj, &tol)) {
        return NULL;
    }
    PyObject *fs = PySequence_Fast(frames_obj, "nest(): frames: a list");
    PyObject *os = fs != NULL ? PySequence_Fast(ops_obj, "nest(): ops: a "
                                                "list") : NULL;
    PyObject *result = NULL;
    Py_ssize_t nf = fs != NULL ? PySequence_Fast_GET_SIZE(fs) : 0;
    Py_ssize_t n = os != NULL ? PySequence_Fast_GET_SIZE(os) : 0;
    ft_nest_frame *frames = calloc((size_t)nf + 1, sizeof(*frames));
    ft_nest_op *ops = calloc((size_t)n + 1, sizeof(*ops));
    uint8_t *crossing = calloc((size_t)n + 1, 1);
    if (os == NULL) {
        goto done;
    }
    if (frames == NULL || ops == NULL || crossing == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nf; i++) {
        if (read_pairs(fs, "frames", &frames[i].start, &frames[i].end,
                       &frames[i].parent, i) < 0) {
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (read_pairs(os, "ops", &ops[i].start, &ops[i].end, NULL, i) < 0) {
            goto done;
        }
        ops[i].idx = (size_t)i;
    }
    ft_nest_sort(ops, (size_t)n);
    if (ft_nest_ops(frames, (size_t)nf, ops, (size_t)n, tol, crossing) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *nested = PyList_New(0);
    PyObject *crossed = PyList_New(0);
    if (nested == NULL || crossed == NULL) {
        Py_XDECREF(nested);
        Py_XDECREF(crossed);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = crossing[ops[i].idx] ? NULL
            : Py_BuildValue("(LLn)", (long long)ops[i].start,
                            (long long)ops[i].end, (Py_ssize_t)ops[i].idx);
        if (!crossing[ops[i].idx]
            && (item == NULL || PyList_Append(nested, item) < 0)) {
            Py_XDECREF(item);
            Py_DECREF(nested);
            Py_DECREF(crossed);
            goto done;
        }
        Py_XDECREF(item);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!crossing[i]) {
            continue;
        }
        PyObject *k = PyLong_FromSsize_t(i);
        if (k == NULL || PyList_Append(crossed, k) < 0) {
            Py_XDECREF(k);
            Py_DECREF(nested);
            Py_DECREF(crossed);
            goto done;
        }
        Py_DECREF(k);
    }
    result = PyTuple_Pack(2, nested, crossed);
    Py_DECREF(nested);
    Py_DECREF(crossed);
done:
    free(frames);
    free(ops);
    free(crossing);
    Py_XDECREF(fs);
    Py_XDECREF(os);
    return result;
}
