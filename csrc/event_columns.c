/* _event_columns(): a list of Events as column buffers, for the Parquet
 * writer (frametrace/_dataset.py, which wraps them as Arrow arrays without
 * a copy).  One pass, no Python object made per event: functions and
 * threads are numbered by first appearance (by their shared tuples'
 * identity; an Event(values) by its values), self times (a call's
 * duration less its children's) summed here, and whether a call is its
 * function's outermost activation on its thread's stack (the summary's
 * rule for total time), so that a total is a plain sum in SQL. */
#include "state.h"

#include <stdlib.h>
#include <string.h>

/* Pointer -> index, open addressing; cap a power of two. */
typedef struct {
    const void **keys;
    int32_t *vals;
    size_t cap, len;
} ptrmap;

static size_t
ptr_slot(const ptrmap *m, const void *key)
{
    uintptr_t h = (uintptr_t)key;
    h ^= h >> 17;
    h *= (uintptr_t)0x9E3779B97F4A7C15u;
    size_t i = (size_t)(h >> 7) & (m->cap - 1);
    while (m->keys[i] != NULL && m->keys[i] != key) {
        i = (i + 1) & (m->cap - 1);
    }
    return i;
}

static int
ptrmap_grow(ptrmap *m)
{
    ptrmap bigger = {NULL, NULL, m->cap ? m->cap * 2 : 64, m->len};
    bigger.keys = calloc(bigger.cap, sizeof(*bigger.keys));
    bigger.vals = malloc(bigger.cap * sizeof(*bigger.vals));
    if (bigger.keys == NULL || bigger.vals == NULL) {
        free(bigger.keys);
        free(bigger.vals);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] != NULL) {
            size_t j = ptr_slot(&bigger, m->keys[i]);
            bigger.keys[j] = m->keys[i];
            bigger.vals[j] = m->vals[i];
        }
    }
    free(m->keys);
    free(m->vals);
    *m = bigger;
    return 0;
}

/* key's number in m, given the next one (and key appended to order) if
 * new; -1 with an exception when out of memory or past int32. */
static int32_t
number_of(ptrmap *m, PyObject *key, PyObject *order)
{
    if (m->cap == 0 || (m->len + 1) * 2 > m->cap) {
        if (ptrmap_grow(m) < 0) {
            PyErr_NoMemory();
            return -1;
        }
    }
    size_t i = ptr_slot(m, key);
    if (m->keys[i] != NULL) {
        return m->vals[i];
    }
    if (m->len >= INT32_MAX || PyList_Append(order, key) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_OverflowError, "too many functions or threads");
        }
        return -1;
    }
    m->keys[i] = key;  /* kept alive by order */
    m->vals[i] = (int32_t)m->len;
    return (int32_t)m->len++;
}

/* An Event(values)'s function or thread: the tuple of its values at idx,
 * one object per distinct tuple (memo: tuple -> itself), borrowed. */
static PyObject *
values_key(PyObject *values, const int *idx, Py_ssize_t n, PyObject *memo)
{
    PyObject *key = PyTuple_New(n);
    if (key == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(key, i, Py_NewRef(PyTuple_GET_ITEM(values, idx[i])));
    }
    PyObject *found = PyDict_GetItemWithError(memo, key);  /* borrowed */
    if (found == NULL && !PyErr_Occurred() && PyDict_SetItem(memo, key, key) == 0) {
        found = key;
    }
    Py_DECREF(key);  /* memo holds the one returned */
    return found;
}

/* (thread, function) -> how many of its calls are on the thread's stack;
 * open addressing, cap a power of two, EMPTY keys free. */
#define EMPTY UINT64_MAX
typedef struct {
    uint64_t *keys;
    int32_t *counts;
    size_t cap, len;
} countmap;

static int32_t *
count_of(countmap *m, uint64_t key)
{
    if (m->cap == 0 || (m->len + 1) * 2 > m->cap) {
        countmap bigger = {NULL, NULL, m->cap ? m->cap * 2 : 64, m->len};
        bigger.keys = malloc(bigger.cap * sizeof(*bigger.keys));
        bigger.counts = malloc(bigger.cap * sizeof(*bigger.counts));
        if (bigger.keys == NULL || bigger.counts == NULL) {
            free(bigger.keys);
            free(bigger.counts);
            return NULL;
        }
        memset(bigger.keys, 0xff, bigger.cap * sizeof(*bigger.keys));
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] != EMPTY) {
                size_t j = (size_t)(m->keys[i] * 0x9E3779B97F4A7C15u >> 17)
                           & (bigger.cap - 1);
                while (bigger.keys[j] != EMPTY) {
                    j = (j + 1) & (bigger.cap - 1);
                }
                bigger.keys[j] = m->keys[i];
                bigger.counts[j] = m->counts[i];
            }
        }
        free(m->keys);
        free(m->counts);
        *m = bigger;
    }
    size_t i = (size_t)(key * 0x9E3779B97F4A7C15u >> 17) & (m->cap - 1);
    while (m->keys[i] != EMPTY && m->keys[i] != key) {
        i = (i + 1) & (m->cap - 1);
    }
    if (m->keys[i] == EMPTY) {
        m->keys[i] = key;
        m->counts[i] = 0;
        m->len++;
    }
    return &m->counts[i];
}

typedef struct {
    Py_ssize_t *items;
    size_t len, cap;
} stack;

static int
push(stack *s, Py_ssize_t i)
{
    if (s->len == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        Py_ssize_t *items = realloc(s->items, cap * sizeof(*items));
        if (items == NULL) {
            return -1;
        }
        s->items = items;
        s->cap = cap;
    }
    s->items[s->len++] = i;
    return 0;
}

/* For each of keys (numbered by identity), the number of the first equal
 * to it: one number per function or thread however its tuples were made
 * (a loader's are equal, not one object).  NULL with an exception. */
static int32_t *
by_value(PyObject *keys)
{
    Py_ssize_t n = PyList_GET_SIZE(keys);
    int32_t *first = malloc(((size_t)n + 1) * sizeof(*first));
    PyObject *seen = PyDict_New();
    if (first == NULL || seen == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *at = PyLong_FromSsize_t(j);
        PyObject *key = PyList_GET_ITEM(keys, j);
        PyObject *got = at == NULL ? NULL : PyDict_SetDefault(seen, key, at);
        Py_XDECREF(at);
        if (got == NULL) {
            goto fail;
        }
        first[j] = (int32_t)PyLong_AsLong(got);  /* < n <= INT32_MAX */
    }
    Py_DECREF(seen);
    return first;
fail:
    free(first);
    Py_XDECREF(seen);
    return NULL;
}

static inline uint64_t
pair(const int32_t *thread, const int32_t *func, Py_ssize_t i)
{
    return ((uint64_t)(uint32_t)thread[i] << 32) | (uint32_t)func[i];
}

/* outer[i]: no call of event i's function is open below it on its
 * thread's stack.  The stack is followed as the reports' pass does
 * (report_pass.c): popped down to the parent, rebuilt from the parent
 * links where the parent is not on it (events out of call order); a
 * parent that is no earlier event of the thread makes a root.  0, or -1
 * when out of memory (no exception set). */
static int
mark_outermost(Py_ssize_t n, const int64_t *parent, const int32_t *func,
               const int32_t *thread, Py_ssize_t nthreads, uint8_t *outer)
{
    stack *stacks = calloc((size_t)nthreads + 1, sizeof(*stacks));
    countmap open = {0};
    int rc = -1;
    if (stacks == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        stack *s = &stacks[thread[i]];
        int64_t p = parent[i];
        int linked = p >= 0 && p < i && thread[p] == thread[i];
        while (s->len > 0 && !(linked && s->items[s->len - 1] == p)) {
            s->len--;
            int32_t *c = count_of(&open, pair(thread, func, s->items[s->len]));
            if (c == NULL) {
                goto done;
            }
            (*c)--;
        }
        if (linked && s->len == 0) {  /* rebuilt, root first */
            for (int64_t j = p;; j = parent[j]) {
                if (push(s, (Py_ssize_t)j) < 0) {
                    goto done;
                }
                int64_t up = parent[j];
                if (!(up >= 0 && up < j && thread[up] == thread[i])) {
                    break;
                }
            }
            for (size_t a = 0, b = s->len; a + 1 < b; a++, b--) {
                Py_ssize_t x = s->items[a];
                s->items[a] = s->items[b - 1];
                s->items[b - 1] = x;
            }
            for (size_t k = 0; k < s->len; k++) {
                int32_t *c = count_of(&open, pair(thread, func, s->items[k]));
                if (c == NULL) {
                    goto done;
                }
                (*c)++;
            }
        }
        int32_t *c = count_of(&open, pair(thread, func, i));
        if (c == NULL) {
            goto done;
        }
        outer[i] = *c == 0;
        (*c)++;
        if (push(s, i) < 0) {
            goto done;
        }
    }
    rc = 0;
done:
    for (Py_ssize_t t = 0; t <= nthreads; t++) {
        free(stacks[t].items);
    }
    free(stacks);
    free(open.keys);
    free(open.counts);
    return rc;
}

/* A thread's (thread_id, native_thread_id, thread_serial): its serial is
 * the int32 that the thread column holds and every writer orders threads
 * by; 0, or -1 with an error naming events[i]. */
static int
check_serial(PyObject *thread, Py_ssize_t i)
{
    long long serial;
    return ft_event_int_field(PyTuple_GET_ITEM(thread, 2), i, "thread_serial",
                              INT32_MIN, INT32_MAX, &serial);
}

static const int FUNC_VALUES[] = {0, 1, 2, 3};       /* name .. kind */
static const int THREAD_VALUES[] = {4, 5, 12};      /* ids, serial */

enum { C_ID, C_START, C_END, C_PARENT, C_SELF, C_DEPTH, C_FUNC, C_THREAD,
       C_OPEN_START, C_OPEN_STOP, C_OUTERMOST, N_COLUMNS };

static PyObject *
event_columns(PyObject *module, PyObject *given)
{
    ft_state *state = ft_get_state(module);
    if (!PyList_Check(given)) {
        return PyErr_Format(PyExc_TypeError, "events must be a list, not %s",
                            Py_TYPE(given)->tp_name);
    }
    /* A copy: hashing an Event(values)'s values may run Python code, which
     * could change the caller's list. */
    PyObject *events = PyList_GetSlice(given, 0, PyList_GET_SIZE(given));
    if (events == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(events);
    if (n > PY_SSIZE_T_MAX / 8) {
        Py_DECREF(events);
        return PyErr_NoMemory();
    }
    static const Py_ssize_t width[N_COLUMNS] = {8, 8, 8, 8, 8, 4, 4, 4, 1, 1, 1};
    PyObject *cols[N_COLUMNS] = {NULL};
    PyObject *funcs = PyList_New(0), *threads = PyList_New(0);
    PyObject *memo = PyDict_New();
    ptrmap fmap = {0}, tmap = {0};
    PyObject *result = NULL;
    if (funcs == NULL || threads == NULL || memo == NULL) {
        goto done;
    }
    for (int c = 0; c < N_COLUMNS; c++) {
        cols[c] = PyBytes_FromStringAndSize(NULL, n * width[c]);
        if (cols[c] == NULL) {
            goto done;
        }
    }
    int64_t *id = (int64_t *)PyBytes_AS_STRING(cols[C_ID]);
    int64_t *start = (int64_t *)PyBytes_AS_STRING(cols[C_START]);
    int64_t *end = (int64_t *)PyBytes_AS_STRING(cols[C_END]);
    int64_t *parent = (int64_t *)PyBytes_AS_STRING(cols[C_PARENT]);
    int64_t *self = (int64_t *)PyBytes_AS_STRING(cols[C_SELF]);
    int32_t *depth = (int32_t *)PyBytes_AS_STRING(cols[C_DEPTH]);
    int32_t *func = (int32_t *)PyBytes_AS_STRING(cols[C_FUNC]);
    int32_t *thread = (int32_t *)PyBytes_AS_STRING(cols[C_THREAD]);
    uint8_t *open_start = (uint8_t *)PyBytes_AS_STRING(cols[C_OPEN_START]);
    uint8_t *open_stop = (uint8_t *)PyBytes_AS_STRING(cols[C_OPEN_STOP]);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *info, *tinfo;
        ft_event ev;
        if (ft_event_parts(state, PyList_GET_ITEM(events, i), &info, &tinfo,
                           &ev) < 0 || ev.depth > INT32_MAX) {
            PyErr_Format(PyExc_TypeError, "events[%zd] is no frametrace.Event "
                         "with int64 times (a %s)", i,
                         Py_TYPE(PyList_GET_ITEM(events, i))->tp_name);
            goto done;
        }
        if (tinfo == NULL) {  /* an Event(values): its 14 values */
            tinfo = values_key(info, THREAD_VALUES, 3, memo);
            info = tinfo == NULL ? NULL : values_key(info, FUNC_VALUES, 4, memo);
            if (info == NULL) {
                goto done;
            }
        }
        size_t known_funcs = fmap.len, known_threads = tmap.len;
        int32_t f = number_of(&fmap, info, funcs);
        int32_t t = f < 0 ? -1 : number_of(&tmap, tinfo, threads);
        if (t < 0 || (fmap.len > known_funcs && ft_check_function(info, i) < 0)
            || (tmap.len > known_threads && check_serial(tinfo, i) < 0)) {
            goto done;
        }
        id[i] = i;
        start[i] = ev.start_ns;
        end[i] = ev.end_ns;
        parent[i] = ev.parent;
        self[i] = ev.end_ns - ev.start_ns;
        depth[i] = (int32_t)ev.depth;
        func[i] = f;
        thread[i] = t;
        open_start[i] = ev.open_at_start;
        open_stop[i] = ev.open_at_stop;
    }
    /* Functions and threads numbered by value (the first of equal tuples,
     * which the columns look the same names up by) for the stacks. */
    int32_t *func_first = by_value(funcs), *thread_first = by_value(threads);
    if (func_first != NULL && thread_first != NULL) {
        for (Py_ssize_t i = 0; i < n; i++) {
            func[i] = func_first[func[i]];
            thread[i] = thread_first[thread[i]];
        }
        uint8_t *outer = (uint8_t *)PyBytes_AS_STRING(cols[C_OUTERMOST]);
        if (mark_outermost(n, parent, func, thread, PyList_GET_SIZE(threads),
                           outer) < 0) {
            PyErr_NoMemory();
        }
    }
    free(func_first);
    free(thread_first);
    if (PyErr_Occurred()) {
        goto done;
    }
    /* Each parent less its children: a parent comes before them. */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = parent[i], dur = end[i] - start[i];
        if (p >= 0 && p < i && __builtin_sub_overflow(self[p], dur, &self[p])) {
            self[p] = INT64_MIN;
        }
    }
    result = Py_BuildValue("(OOOOOOOOOOOOO)", cols[0], cols[1], cols[2], cols[3],
                           cols[4], cols[5], cols[6], cols[7], cols[8], cols[9],
                           cols[10], funcs, threads);
done:
    for (int c = 0; c < N_COLUMNS; c++) {
        Py_XDECREF(cols[c]);
    }
    Py_XDECREF(funcs);
    Py_XDECREF(threads);
    Py_XDECREF(memo);
    Py_DECREF(events);
    free(fmap.keys);
    free(fmap.vals);
    free(tmap.keys);
    free(tmap.vals);
    return result;
}

PyMethodDef ft_event_columns_def = {
    "_event_columns", event_columns, METH_O,
    "_event_columns(events): (id, start, end, parent, self, depth, func, thread, "
    "open_at_start, open_at_stop, outermost) as bytes (int64, int32 or uint8 "
    "each), "
    "then the functions [(name, filename, lineno, kind)] and threads "
    "[(thread_id, native_thread_id, thread_serial)] func and thread number.",
};
