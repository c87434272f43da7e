/* A traced thread as the API and the writers show it: the
 * frametrace.ThreadInfo type, one for each of a tracer's threads, and the
 * tid each thread gets in the exports. */
#include "state.h"

#include <stdlib.h>

static PyStructSequence_Field thread_info_fields[] = {
    {"serial", "1, 2, ... in the order the tracer registered the thread: "
               "its Event.thread_serial"},
    {"thread_id", "threading.get_ident() (CPython reuses it for later "
                  "threads)"},
    {"native_thread_id", "threading.get_native_id(), 0 if unknown (the OS "
                         "may reuse it for a later thread)"},
    {"name", "threading's name for the thread, or None"},
    {"dropped", "events of the thread lost entirely; None while tracing"},
    {NULL, NULL},
};

static PyStructSequence_Desc thread_info_desc = {
    .name = "frametrace.ThreadInfo",
    .doc = "One traced OS thread: ThreadInfo(serial, thread_id, "
           "native_thread_id, name, dropped); an item of tracer.threads",
    .fields = thread_info_fields,
    .n_in_sequence = 5,
};

PyTypeObject *
ft_thread_info_type_new(void)
{
    return PyStructSequence_NewType(&thread_info_desc);
}

PyObject *
ft_thread_info(ft_tracer *tracer, Py_ssize_t index, PyObject *dropped)
{
    const ft_thread *th = tracer->threads[index];
    PyObject *info = PyStructSequence_New(tracer->state->thread_info_type);
    if (info == NULL) {
        return NULL;
    }
    PyObject *values[5] = {
        PyLong_FromSsize_t(index + 1),
        PyLong_FromUnsignedLong(th->thread_id),
        PyLong_FromUnsignedLong(th->native_id),
        Py_NewRef(th->name != NULL ? th->name : Py_None),
        Py_NewRef(dropped != NULL ? dropped : Py_None),
    };
    int failed = 0;
    for (Py_ssize_t i = 0; i < 5; i++) {
        failed |= values[i] == NULL;
        /* Steals the value; a NULL one is left for the check below. */
        PyStructSequence_SetItem(info, i, values[i]);
    }
    if (failed) {
        Py_DECREF(info);
        return NULL;
    }
    return info;
}

/* Viewers key threads by (pid, tid): a thread gets its native id (else
 * its ident) unless an earlier thread of the trace has that tid (the OS
 * reused it); then a synthetic one.  The tids given so far are kept in an
 * open-addressing set, so that a trace of a thread per request (hundreds
 * of thousands) is not quadratic. */
typedef struct {
    uint64_t *slots;  /* tid + 1; 0 is an empty slot */
    size_t mask;
    int has_max;      /* UINT64_MAX given (it has no tid + 1) */
} tid_set;

static int
tid_set_init(tid_set *set, Py_ssize_t n)
{
    size_t size = 16;
    while (size < 2 * (size_t)n) {
        size <<= 1;
    }
    set->slots = calloc(size, sizeof(uint64_t));
    set->mask = size - 1;
    set->has_max = 0;
    return set->slots != NULL ? 0 : -1;
}

/* Adds tid; 1 if it was there already. */
static int
tid_set_add(tid_set *set, uint64_t tid)
{
    if (tid == UINT64_MAX) {
        int had = set->has_max;
        set->has_max = 1;
        return had;
    }
    size_t i = (size_t)((tid * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & set->mask;
    while (set->slots[i] != 0) {
        if (set->slots[i] == tid + 1) {
            return 1;
        }
        i = (i + 1) & set->mask;
    }
    set->slots[i] = tid + 1;
    return 0;
}

static uint64_t
export_tid(tid_set *given, uint64_t thread_id, uint64_t native_id,
           uint64_t serial)
{
    uint64_t tid = native_id ? native_id : thread_id;
    if (tid_set_add(given, tid)) {
        tid = FT_SYNTHETIC_TID_BASE + serial;
        (void)tid_set_add(given, tid);
    }
    return tid;
}

uint64_t *
ft_export_tids(const ft_tracer *tracer)
{
    Py_ssize_t n = tracer->nthreads;
    uint64_t *tids = malloc(((size_t)n + 1) * sizeof(uint64_t));
    tid_set given;
    if (tids == NULL || tid_set_init(&given, n) < 0) {
        free(tids);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const ft_thread *th = tracer->threads[i];
        tids[i] = export_tid(&given, th->thread_id, th->native_id,
                             (uint64_t)i + 1);
    }
    free(given.slots);
    return tids;
}

PyObject *
ft_export_tids_of(PyObject *Py_UNUSED(module), PyObject *threads)
{
    PyObject *seq = PySequence_Fast(threads, "_export_tids() takes a "
                                    "sequence of (serial, thread_id, "
                                    "native_thread_id)");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    tid_set given;
    PyObject *result = tid_set_init(&given, n) == 0 ? PyList_New(n)
                                                    : PyErr_NoMemory();
    for (Py_ssize_t i = 0; result != NULL && i < n; i++) {
        /* ThreadInfo, or any tuple (serial, thread_id, native_id, ...). */
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 3) {
            PyErr_SetString(PyExc_TypeError, "_export_tids(): each thread "
                            "is a tuple (serial, thread_id, "
                            "native_thread_id, ...)");
            Py_CLEAR(result);
            break;
        }
        unsigned long long v[3];  /* serial, thread_id, native_id */
        int k = 0;
        for (; k < 3; k++) {
            v[k] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, k));
            if (v[k] == (unsigned long long)-1 && PyErr_Occurred()) {
                break;
            }
        }
        PyObject *tid = NULL;
        if (k == 3) {
            tid = PyLong_FromUnsignedLongLong(
                export_tid(&given, v[1], v[2], v[0]));
        }
        if (tid == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, tid);
    }
    free(given.slots);
    Py_DECREF(seq);
    return result;
}
