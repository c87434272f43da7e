/* The .pftrace writer's tracks (export_tracks.h). */
#include "export_tracks.h"
#include "export_pb.h"

#include <stdlib.h>

void
ft_free_tracks(track_t *tracks, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; tracks != NULL && i < n; i++) {
        for (Py_ssize_t j = 0; j < tracks[i].nspans; j++) {
            Py_XDECREF(tracks[i].spans[j].name);
            Py_XDECREF(tracks[i].spans[j].cat);
            Py_XDECREF(tracks[i].spans[j].name8);
            Py_XDECREF(tracks[i].spans[j].cat8);
        }
        free(tracks[i].spans);
        Py_XDECREF(tracks[i].name);
    }
    free(tracks);
}

/* obj as an int64; TypeError or ValueError naming what. */
static int
as_int64(PyObject *obj, const char *what, int64_t *out)
{
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (overflow) {
        PyErr_Format(PyExc_ValueError, "%s is out of the 64-bit range", what);
        return -1;
    }
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = v;
    return 0;
}

/* A tuple of n items (or n + 1 with extra) with a str first, copied out of
 * item. */
static PyObject *
named_tuple_of_n(PyObject *item, Py_ssize_t n, int extra, const char *what)
{
    if (!PyTuple_Check(item)
        || (PyTuple_GET_SIZE(item) != n
            && !(extra && PyTuple_GET_SIZE(item) == n + 1))
        || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))) {
        PyErr_Format(PyExc_TypeError, "%s, not %.100s", what,
                     Py_TYPE(item)->tp_name);
        return NULL;
    }
    return Py_NewRef(item);
}

static PyObject *
named_tuple_of(PyObject *item, Py_ssize_t n, const char *what)
{
    return named_tuple_of_n(item, n, 0, what);
}

static int
parse_spans(PyObject *list, track_t *track)
{
    if (!PyList_Check(list)) {
        PyErr_Format(PyExc_TypeError, "a track's spans must be a list, not "
                     "%.100s", Py_TYPE(list)->tp_name);
        return -1;
    }
    PyObject *snapshot = PySequence_Tuple(list);
    if (snapshot == NULL) {
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(snapshot);
    track->spans = calloc((size_t)n + 1, sizeof(span_t));
    if (track->spans == NULL) {
        Py_DECREF(snapshot);
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *span = named_tuple_of_n(PyTuple_GET_ITEM(snapshot, i), 3, 1,
                                          "a span is (name, start_ns, end_ns"
                                          "[, category])");
        if (span == NULL) {
            rc = -1;
            break;
        }
        span_t *out = &track->spans[track->nspans];
        if (as_int64(PyTuple_GET_ITEM(span, 1), "a span's start_ns", &out->start) < 0
            || as_int64(PyTuple_GET_ITEM(span, 2), "a span's end_ns", &out->end) < 0) {
            rc = -1;
        }
        else if (!PyUnicode_Check(PyTuple_GET_ITEM(span, 0))) {
            PyErr_Format(PyExc_TypeError, "a span's name must be a str, "
                         "not %.100s", Py_TYPE(PyTuple_GET_ITEM(span, 0))->tp_name);
            rc = -1;
        }
        else if (PyTuple_GET_SIZE(span) == 4
                 && !PyUnicode_Check(PyTuple_GET_ITEM(span, 3))) {
            PyErr_Format(PyExc_TypeError, "a span's category must be a str, "
                         "not %.100s", Py_TYPE(PyTuple_GET_ITEM(span, 3))->tp_name);
            rc = -1;
        }
        else {
            out->name = Py_NewRef(PyTuple_GET_ITEM(span, 0));
            out->cat = PyTuple_GET_SIZE(span) == 4
                       ? Py_NewRef(PyTuple_GET_ITEM(span, 3)) : NULL;
            out->name8 = encoded(out->name);
            /* Not with an exception set: name8 may have failed. */
            out->cat8 = out->cat != NULL && out->name8 != NULL
                        ? encoded(out->cat) : NULL;
            track->nspans++;
            if (out->name8 == NULL || (out->cat != NULL && out->cat8 == NULL)) {
                rc = -1;
            }
        }
        Py_DECREF(span);
    }
    Py_DECREF(snapshot);
    return rc;
}

int
ft_parse_tracks(PyObject *list, track_t **tracks, Py_ssize_t *ntracks)
{
    *tracks = NULL;
    *ntracks = 0;
    PyObject *snapshot = PySequence_Tuple(list);
    if (snapshot == NULL) {
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(snapshot);
    *tracks = calloc((size_t)n + 1, sizeof(track_t));
    if (*tracks == NULL) {
        Py_DECREF(snapshot);
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *item = named_tuple_of(PyTuple_GET_ITEM(snapshot, i), 3,
                                        "a track is (name, category, spans)");
        if (item == NULL) {
            rc = -1;
            break;
        }
        track_t *track = &(*tracks)[*ntracks];
        int64_t category;
        track->name = Py_NewRef(PyTuple_GET_ITEM(item, 0));
        (*ntracks)++;
        if (as_int64(PyTuple_GET_ITEM(item, 1), "a track's category", &category) < 0
            || parse_spans(PyTuple_GET_ITEM(item, 2), track) < 0) {
            rc = -1;
        }
        track->category = category == 1;
        Py_DECREF(item);
    }
    Py_DECREF(snapshot);
    return rc;
}

/* thread_slices: one list of spans (name, start_ns, end_ns, category) per
 * thread, in registration order, sorted by start and then longest first,
 * nested among themselves and with the thread's events (the caller,
 * frametrace.torch, made sure). */
int
ft_parse_thread_slices(PyObject *list, Py_ssize_t nthreads, track_t **out)
{
    *out = NULL;
    if (list == NULL || list == Py_None) {
        return 0;
    }
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != nthreads) {
        PyErr_Format(PyExc_ValueError, "_write_perfetto(): thread_slices "
                     "must be a list of one list per thread (%zd)", nthreads);
        return -1;
    }
    *out = calloc((size_t)nthreads + 1, sizeof(track_t));
    if (*out == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t t = 0; t < nthreads; t++) {
        if (parse_spans(PyList_GET_ITEM(list, t), &(*out)[t]) < 0) {
            return -1;
        }
        for (Py_ssize_t i = 0; i < (*out)[t].nspans; i++) {
            if ((*out)[t].spans[i].cat == NULL) {
                PyErr_SetString(PyExc_TypeError, "a thread slice is (name, "
                                "start_ns, end_ns, category)");
                return -1;
            }
        }
    }
    return 0;
}
