/* The reports' one pass over the events, in C: _report_pass(events, mode)
 * does what frametrace/reports.py's _Paths (mode 0: the events merged by
 * call path, for the collapsed stacks and the flame graph) and _Functions
 * (mode 1, and 2 with the caller -> callee pairs: the summary and pstats)
 * do, at C speed.  It takes the Events that getEvents() and the loader's C
 * path build (sharing each function's and thread's tuples: one lookup per
 * pair), and Event(values) (the loader's Python path); anything else, and
 * anything out of the ordinary (events out of call order, a parent that
 * is not an earlier event of the same thread, a name that is not a str, a
 * sum past int64), returns None: the Python pass, which reports.py runs
 * then, is the reference and raises the errors. */
#include "state.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- a hash table of (a, b) pairs -> int64 ------------------------------ */

typedef struct {
    uint64_t a, b;
    int64_t value;  /* -1: empty slot */
} pair_slot;

typedef struct {
    pair_slot *slots;
    size_t mask;
    size_t used;
} pair_table;

static int
pairs_init(pair_table *t, size_t slots)
{
    t->slots = PyMem_Malloc(slots * sizeof(pair_slot));
    if (t->slots == NULL) {
        return -1;
    }
    for (size_t i = 0; i < slots; i++) {
        t->slots[i].value = -1;
    }
    t->mask = slots - 1;
    t->used = 0;
    return 0;
}

static size_t
pair_hash(uint64_t a, uint64_t b)
{
    uint64_t h = a * 0x9E3779B97F4A7C15u ^ (b + 0x632BE59BD9B4E019u);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9u;
    return (size_t)(h ^ (h >> 32));
}

/* The slot of (a, b): its own, or the empty one where it would go. */
static pair_slot *
pairs_find(const pair_table *t, uint64_t a, uint64_t b)
{
    size_t i = pair_hash(a, b) & t->mask;
    while (t->slots[i].value >= 0
           && (t->slots[i].a != a || t->slots[i].b != b)) {
        i = (i + 1) & t->mask;
    }
    return &t->slots[i];
}

/* Stores value in the empty slot s found for (a, b); 0, or -1 when out of
 * memory (no exception set). */
static int
pairs_put(pair_table *t, pair_slot *s, uint64_t a, uint64_t b, int64_t value)
{
    s->a = a;
    s->b = b;
    s->value = value;
    if (++t->used * 2 <= t->mask + 1) {
        return 0;
    }
    pair_table bigger;
    if (pairs_init(&bigger, (t->mask + 1) * 2) < 0) {
        return -1;
    }
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].value >= 0) {
            *pairs_find(&bigger, t->slots[i].a, t->slots[i].b) = t->slots[i];
        }
    }
    bigger.used = t->used;
    PyMem_Free(t->slots);
    *t = bigger;
    return 0;
}

/* ---- the pass -------------------------------------------------------------- */

enum { MODE_PATHS, MODE_FUNCTIONS, MODE_EDGES };

/* Per function (name, filename, lineno, kind, thread key). */
typedef struct {
    int64_t calls, prim, selfs, totals, active;
    int64_t thread;  /* index into the threads */
    uint8_t capped;
} func_acc;

/* Per call path, or per caller -> callee pair. */
typedef struct {
    int64_t up;      /* the parent path, or -1 / the caller's function */
    int64_t func;    /* the function (the callee) */
    int64_t calls, prim, selfs, totals, active;
    uint8_t capped;
} node_acc;

typedef struct {
    int64_t *items;
    size_t len, cap;
} i64vec;

typedef struct {
    PyObject *key;     /* strong: thread_serial, or thread_id where it is 0 */
    PyObject *ident;   /* strong: thread_id */
    int64_t roots;     /* the sum of its root events' durations */
    int has_roots;
    i64vec stack;      /* MODE_FUNCTIONS: its open events */
} thread_acc;

typedef struct {
    ft_state *state;
    int mode;
    pair_table funcs_by_ptr;   /* (info, thread) pointers -> function */
    pair_table nodes;          /* (up + 1, func) -> path or pair */
    PyObject *func_ids;        /* key tuple -> function, by value */
    PyObject *thread_ids;      /* thread key -> thread, by value */
    PyObject *func_keys;       /* list: function -> key tuple */
    PyObject *held;            /* list: the tuples funcs_by_ptr points at */
    func_acc *funcs;
    size_t nfuncs, funcs_cap;
    node_acc *nodes_acc;
    size_t nnodes, nodes_cap;
    thread_acc *threads;
    size_t nthreads, threads_cap;
    int32_t *ev_func;          /* per event */
    int32_t *ev_node;          /* per event: its path, or its pair (-1) */
} pass;

static int
grow(void **items, size_t *cap, size_t len, size_t size)
{
    if (len < *cap) {
        return 0;
    }
    size_t want = *cap ? *cap * 2 : 64;
    void *grown = PyMem_Realloc(*items, want * size);
    if (grown == NULL) {
        return -1;
    }
    *items = grown;
    *cap = want;
    return 0;
}

/* The thread of an event's thread_id and thread_serial: its index, -2 for
 * the C path to give up, -1 with an exception. */
static int64_t
thread_of(pass *p, PyObject *ident, PyObject *serial)
{
    if (!PyLong_CheckExact(ident) || !PyLong_CheckExact(serial)) {
        return -2;
    }
    /* As reports._thread_key: the serial, or the ident for an event with
     * none.  Exact ints: no Python code runs in the lookups. */
    PyObject *key = PyObject_IsTrue(serial) ? serial : ident;
    PyObject *found = PyDict_GetItemWithError(p->thread_ids, key);
    if (found != NULL) {
        return PyLong_AsLongLong(found);
    }
    if (PyErr_Occurred()) {
        return -1;
    }
    if (grow((void **)&p->threads, &p->threads_cap, p->nthreads,
             sizeof(thread_acc)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *boxed = PyLong_FromSize_t(p->nthreads);
    if (boxed == NULL) {
        return -1;
    }
    int rc = PyDict_SetItem(p->thread_ids, key, boxed);
    Py_DECREF(boxed);
    if (rc < 0) {
        return -1;
    }
    thread_acc *t = &p->threads[p->nthreads];
    memset(t, 0, sizeof(*t));
    t->key = Py_NewRef(key);
    t->ident = Py_NewRef(ident);
    return (int64_t)p->nthreads++;
}

/* The function (name, filename, lineno, kind, thread key) of an event, by
 * value: its index, -2 for the C path to give up, -1 with an exception. */
static int64_t
func_by_value(pass *p, PyObject *const *fields, PyObject *ident,
              PyObject *serial)
{
    if (!PyUnicode_CheckExact(fields[0]) || !PyUnicode_CheckExact(fields[1])
        || !PyLong_CheckExact(fields[2]) || !PyUnicode_CheckExact(fields[3])) {
        return -2;
    }
    int64_t thread = thread_of(p, ident, serial);
    if (thread < 0) {
        return thread;
    }
    PyObject *key = PyTuple_Pack(5, fields[0], fields[1], fields[2],
                                 fields[3], p->threads[thread].key);
    if (key == NULL) {
        return -1;
    }
    int64_t index = -1;
    PyObject *found = PyDict_GetItemWithError(p->func_ids, key);
    if (found != NULL) {
        index = PyLong_AsLongLong(found);
    }
    else if (!PyErr_Occurred()) {
        PyObject *boxed = NULL;
        if (grow((void **)&p->funcs, &p->funcs_cap, p->nfuncs,
                 sizeof(func_acc)) < 0) {
            PyErr_NoMemory();
        }
        else if ((boxed = PyLong_FromSize_t(p->nfuncs)) != NULL
                 && PyDict_SetItem(p->func_ids, key, boxed) == 0
                 && PyList_Append(p->func_keys, key) == 0) {
            func_acc *f = &p->funcs[p->nfuncs];
            memset(f, 0, sizeof(*f));
            f->thread = thread;
            index = (int64_t)p->nfuncs++;
        }
        Py_XDECREF(boxed);
    }
    Py_DECREF(key);
    return index;
}

/* The function of an Event: of one that getEvents() or the loader's C
 * path built, by its shared tuples (the same pair, the same function);
 * of an Event(values), by value.  Its index, -2 for the C path to give
 * up, -1 with an exception. */
static int64_t
func_of(pass *p, PyObject *info, PyObject *thread)
{
    if (thread == NULL) {
        PyObject *const *values = PySequence_Fast_ITEMS(info);
        return func_by_value(p, values, values[4], values[12]);
    }
    pair_slot *s = pairs_find(&p->funcs_by_ptr, (uintptr_t)info,
                              (uintptr_t)thread);
    if (s->value >= 0) {
        return s->value;
    }
    if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 4
        || !PyTuple_CheckExact(thread) || PyTuple_GET_SIZE(thread) != 3) {
        return -2;
    }
    int64_t index = func_by_value(p, PySequence_Fast_ITEMS(info),
                                  PyTuple_GET_ITEM(thread, 0),
                                  PyTuple_GET_ITEM(thread, 2));
    if (index < 0) {
        return index;
    }
    /* The pair is held: its addresses are not reused during the pass. */
    if (PyList_Append(p->held, info) < 0
        || PyList_Append(p->held, thread) < 0) {
        return -1;
    }
    if (pairs_put(&p->funcs_by_ptr, s, (uintptr_t)info, (uintptr_t)thread,
                  index) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return index;
}

/* The path or pair (up, func): its index, or -1 when out of memory. */
static int64_t
node_of(pass *p, int64_t up, int64_t func)
{
    pair_slot *s = pairs_find(&p->nodes, (uint64_t)(up + 1), (uint64_t)func);
    if (s->value >= 0) {
        return s->value;
    }
    if (grow((void **)&p->nodes_acc, &p->nodes_cap, p->nnodes,
             sizeof(node_acc)) < 0) {
        return -1;
    }
    node_acc *n = &p->nodes_acc[p->nnodes];
    memset(n, 0, sizeof(*n));
    n->up = up;
    n->func = func;
    if (pairs_put(&p->nodes, s, (uint64_t)(up + 1), (uint64_t)func,
                  (int64_t)p->nnodes) < 0) {
        return -1;
    }
    return (int64_t)p->nnodes++;
}

/* Adds d to *sum; 0, or -1 past int64 (the C path gives up). */
static int
add(int64_t *sum, int64_t d)
{
    return __builtin_add_overflow(*sum, d, sum) ? -1 : 0;
}

/* Pops thread t's open events down to (not including) parent; 1 when
 * parent is there, 0 when the stack ran out (events out of call order). */
static int
unwind(pass *p, thread_acc *t, int64_t parent)
{
    while (t->stack.len > 0) {
        int64_t j = t->stack.items[t->stack.len - 1];
        if (j == parent) {
            return 1;
        }
        t->stack.len--;
        p->funcs[p->ev_func[j]].active--;
        if (p->mode == MODE_EDGES && p->ev_node[j] >= 0) {
            p->nodes_acc[p->ev_node[j]].active--;
        }
    }
    return parent < 0;
}

/* One event: 0, 1 for the C path to give up, -1 with an exception. */
static int
take(pass *p, Py_ssize_t i, PyObject *ev)
{
    PyObject *info, *thread;
    ft_event e;
    if (ft_event_parts(p->state, ev, &info, &thread, &e) < 0) {
        return 1;
    }
    int64_t f = func_of(p, info, thread);
    if (f < 0) {
        return f == -2 ? 1 : -1;
    }
    int64_t d;
    if (__builtin_sub_overflow(e.end_ns, e.start_ns, &d) || d == INT64_MIN
        || e.parent < -1 || e.parent >= i) {
        return 1;
    }
    func_acc *fn = &p->funcs[f];
    thread_acc *t = &p->threads[fn->thread];
    p->ev_func[i] = (int32_t)f;
    if (p->mode == MODE_PATHS) {
        int64_t up = -1;
        if (e.parent < 0) {
            if (add(&t->roots, d) < 0) {
                return 1;
            }
            t->has_roots = 1;
        }
        else {
            up = p->ev_node[e.parent];
            node_acc *parent = &p->nodes_acc[up];
            if (p->funcs[parent->func].thread != fn->thread
                || add(&parent->selfs, -d) < 0) {
                return 1;
            }
        }
        int64_t node = node_of(p, up, f);
        if (node < 0) {
            PyErr_NoMemory();
            return -1;
        }
        node_acc *n = &p->nodes_acc[node];
        if (add(&n->totals, d) < 0 || add(&n->selfs, d) < 0) {
            return 1;
        }
        n->calls++;
        n->capped |= e.open_at_stop;
        p->ev_node[i] = (int32_t)node;
        return 0;
    }
    if (!unwind(p, t, e.parent)) {
        return 1;  /* the parent is not open: out of call order */
    }
    if (e.parent < 0) {
        if (add(&t->roots, d) < 0) {
            return 1;
        }
        t->has_roots = 1;
        if (p->mode == MODE_EDGES) {
            p->ev_node[i] = -1;
        }
    }
    else {
        int64_t pf = p->ev_func[e.parent];
        if (add(&p->funcs[pf].selfs, -d) < 0) {
            return 1;
        }
        if (p->mode == MODE_EDGES) {
            int64_t pe = p->ev_node[e.parent];
            if (pe >= 0 && add(&p->nodes_acc[pe].selfs, -d) < 0) {
                return 1;
            }
            int64_t edge = node_of(p, pf, f);
            if (edge < 0) {
                PyErr_NoMemory();
                return -1;
            }
            node_acc *n = &p->nodes_acc[edge];
            n->calls++;
            if (!n->active) {
                n->prim++;
                if (add(&n->totals, d) < 0) {
                    return 1;
                }
            }
            n->active++;
            if (add(&n->selfs, d) < 0) {
                return 1;
            }
            p->ev_node[i] = (int32_t)edge;
        }
    }
    fn = &p->funcs[f];
    fn->calls++;
    if (!fn->active) {
        fn->prim++;
        if (add(&fn->totals, d) < 0) {
            return 1;
        }
    }
    fn->active++;
    if (add(&fn->selfs, d) < 0) {
        return 1;
    }
    fn->capped |= e.open_at_stop;
    if (grow((void **)&t->stack.items, &t->stack.cap, t->stack.len,
             sizeof(int64_t)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    t->stack.items[t->stack.len++] = i;
    return 0;
}

/* A field of each of n structs of the given size, packed in a bytes
 * object (int64, or one byte where as_bool) that reports.py reads through
 * a memoryview: 8 bytes a value instead of a list's int objects. */
static PyObject *
column(const void *items, size_t n, size_t size, size_t offset, int as_bool)
{
    size_t width = as_bool ? 1 : sizeof(int64_t);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * width));
    if (out == NULL) {
        return NULL;
    }
    char *to = PyBytes_AS_STRING(out);
    for (size_t i = 0; i < n; i++) {
        memcpy(to + i * width, (const char *)items + i * size + offset,
               width);
    }
    return out;
}

/* The call paths' tree: each path's first child and next sibling (-1: none),
 * children in the order they were first called. */
static int
path_links(const pass *p, PyObject **first, PyObject **next)
{
    Py_ssize_t bytes = (Py_ssize_t)(p->nnodes * sizeof(int64_t));
    *first = PyBytes_FromStringAndSize(NULL, bytes);
    *next = PyBytes_FromStringAndSize(NULL, bytes);
    if (*first == NULL || *next == NULL) {
        return -1;
    }
    int64_t *fc = (int64_t *)PyBytes_AS_STRING(*first);
    int64_t *ns = (int64_t *)PyBytes_AS_STRING(*next);
    for (size_t i = 0; i < p->nnodes; i++) {
        fc[i] = -1;
    }
    for (size_t i = p->nnodes; i-- > 0;) {
        int64_t up = p->nodes_acc[i].up;
        ns[i] = up >= 0 ? fc[up] : -1;
        if (up >= 0) {
            fc[up] = (int64_t)i;
        }
    }
    return 0;
}

#define FUNCS(field, b) column(p->funcs, p->nfuncs, sizeof(func_acc), \
                               offsetof(func_acc, field), b)
#define NODES(field, b) column(p->nodes_acc, p->nnodes, sizeof(node_acc), \
                               offsetof(node_acc, field), b)

/* The threads: (keys, idents, {key: roots}) in order of first event. */
static int
thread_columns(pass *p, PyObject **keys, PyObject **idents, PyObject **roots)
{
    *keys = PyList_New((Py_ssize_t)p->nthreads);
    *idents = PyList_New((Py_ssize_t)p->nthreads);
    *roots = PyDict_New();
    if (*keys == NULL || *idents == NULL || *roots == NULL) {
        return -1;
    }
    for (size_t i = 0; i < p->nthreads; i++) {
        thread_acc *t = &p->threads[i];
        PyList_SET_ITEM(*keys, (Py_ssize_t)i, Py_NewRef(t->key));
        PyList_SET_ITEM(*idents, (Py_ssize_t)i, Py_NewRef(t->ident));
        if (t->has_roots) {
            PyObject *sum = PyLong_FromLongLong(t->roots);
            if (sum == NULL) {
                return -1;
            }
            int rc = PyDict_SetItem(*roots, t->key, sum);
            Py_DECREF(sum);
            if (rc < 0) {
                return -1;
            }
        }
    }
    return 0;
}

static PyObject *
results(pass *p)
{
    PyObject *keys = NULL, *idents = NULL, *roots = NULL, *out = NULL;
    if (thread_columns(p, &keys, &idents, &roots) < 0) {
        goto done;
    }
    if (p->mode == MODE_PATHS) {
        PyObject *info = PyList_New((Py_ssize_t)p->nnodes);
        if (info == NULL) {
            goto done;
        }
        for (size_t i = 0; i < p->nnodes; i++) {
            PyObject *key = PyList_GET_ITEM(p->func_keys,
                                            p->nodes_acc[i].func);
            PyList_SET_ITEM(info, (Py_ssize_t)i, Py_NewRef(key));
        }
        PyObject *first = NULL, *next = NULL;
        if (path_links(p, &first, &next) < 0) {
            Py_DECREF(info);
            Py_XDECREF(first);
            Py_XDECREF(next);
            goto done;
        }
        /* parents, info, totals, selfs, calls, capped, thread keys,
         * idents, roots, first children, next siblings */
        out = Py_BuildValue("(NNNNNNOOONN)", NODES(up, 0), info,
                            NODES(totals, 0), NODES(selfs, 0),
                            NODES(calls, 0), NODES(capped, 1),
                            keys, idents, roots, first, next);
        goto done;
    }
    /* keys, calls, prim, selfs, totals, capped, thread keys, idents,
     * roots; the pairs' callers, callees, calls, prim, selfs, totals */
    out = Py_BuildValue("(ONNNNNOOONNNNNN)", p->func_keys, FUNCS(calls, 0),
                        FUNCS(prim, 0), FUNCS(selfs, 0), FUNCS(totals, 0),
                        FUNCS(capped, 1), keys, idents, roots,
                        NODES(up, 0), NODES(func, 0), NODES(calls, 0),
                        NODES(prim, 0), NODES(selfs, 0), NODES(totals, 0));
done:
    Py_XDECREF(keys);
    Py_XDECREF(idents);
    Py_XDECREF(roots);
    return out;
}

static void
pass_free(pass *p)
{
    for (size_t i = 0; i < p->nthreads; i++) {
        Py_DECREF(p->threads[i].key);
        Py_DECREF(p->threads[i].ident);
        PyMem_Free(p->threads[i].stack.items);
    }
    PyMem_Free(p->threads);
    PyMem_Free(p->funcs);
    PyMem_Free(p->nodes_acc);
    PyMem_Free(p->ev_func);
    PyMem_Free(p->ev_node);
    PyMem_Free(p->funcs_by_ptr.slots);
    PyMem_Free(p->nodes.slots);
    Py_XDECREF(p->func_ids);
    Py_XDECREF(p->thread_ids);
    Py_XDECREF(p->func_keys);
    Py_XDECREF(p->held);
}

/* _report_pass(events, mode) -> a tuple of columns, or None. */
static PyObject *
report_pass(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_report_pass(events, mode: int)");
        return NULL;
    }
    long mode = PyLong_AsLong(args[1]);
    if (mode == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (mode < MODE_PATHS || mode > MODE_EDGES) {
        PyErr_Format(PyExc_ValueError, "_report_pass(): mode %ld is not 0, "
                     "1 or 2", mode);
        return NULL;
    }
    PyObject *events = args[0];
    if (!PyList_CheckExact(events) && !PyTuple_CheckExact(events)) {
        Py_RETURN_NONE;
    }
    /* The events are read by index with the length checked each time: a
     * finalizer run by the GC during the pass could shorten a list. */
    Py_INCREF(events);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(events);
    PyObject *out = NULL;
    pass p;
    memset(&p, 0, sizeof(p));
    p.state = ft_get_state(module);
    p.mode = (int)mode;
    if (n >= INT32_MAX) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    size_t per_event = n > 0 ? (size_t)n : 1;
    p.ev_func = PyMem_Malloc(per_event * sizeof(int32_t));
    if (mode != MODE_FUNCTIONS) {
        p.ev_node = PyMem_Malloc(per_event * sizeof(int32_t));
    }
    if (p.ev_func == NULL || (mode != MODE_FUNCTIONS && p.ev_node == NULL)
        || pairs_init(&p.funcs_by_ptr, 1024) < 0
        || pairs_init(&p.nodes, 1024) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    p.func_ids = PyDict_New();
    p.thread_ids = PyDict_New();
    p.func_keys = PyList_New(0);
    p.held = PyList_New(0);
    if (p.func_ids == NULL || p.thread_ids == NULL || p.func_keys == NULL
        || p.held == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PySequence_Fast_GET_SIZE(events)) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        PyObject *ev = Py_NewRef(PySequence_Fast_GET_ITEM(events, i));
        int rc = take(&p, i, ev);
        Py_DECREF(ev);
        if (rc < 0) {
            goto done;
        }
        if (rc > 0) {
            out = Py_NewRef(Py_None);
            goto done;
        }
    }
    out = results(&p);
done:
    pass_free(&p);
    Py_DECREF(events);
    return out;
}

PyMethodDef ft_report_pass_def = {
    "_report_pass", (PyCFunction)(void (*)(void))report_pass, METH_FASTCALL,
    "_report_pass($module, events, mode, /)\n--\n\n"
    "For frametrace.reports: the one pass over the events in C.  mode 0:\n"
    "the events merged by call path (parents, info, totals, selfs, calls,\n"
    "capped, thread keys, thread ids, root sums, first children, next\n"
    "siblings); 1: per function (keys, calls, prim, selfs, totals, capped,\n"
    "thread keys, thread ids, root sums, and empty pair columns); 2: also\n"
    "per caller -> callee pair (callers, callees, calls, prim, selfs,\n"
    "totals).  Numbers come packed in bytes (int64; capped: one byte).\n"
    "None where the events are not getEvents()'s or the loader's (the\n"
    "Python pass then runs and says what is wrong).",
};
