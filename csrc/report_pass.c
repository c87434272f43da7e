/* The reports' one pass over the events, in C: _report_pass(events, mode)
 * does what frametrace/reports.py's _Paths (mode 0: the events merged by
 * call path, for the collapsed stacks and the flame graph) and _Functions
 * (mode 1, and 2 with the caller -> callee pairs: the summary and pstats)
 * do, at C speed.  It takes the Events that getEvents() and the loader's C
 * path build (sharing each function's and thread's tuples: found by the
 * info tuple's address), and Event(values) (the loader's Python path, by
 * value); anything else, and
 * anything out of the ordinary (events out of call order, a parent that
 * is not an earlier event of the same thread, a name that is not a str, a
 * sum past int64), returns None: the Python pass, which reports.py runs
 * then, is the reference and raises the errors.  Also the collapsed
 * stacks' labels (_collapse_labels) and lines (_collapsed_batch) made from
 * the paths. */
#include "state.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- a hash table of 64-bit keys -> int64 ----------------------------------- */

static size_t
key_hash(uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15u;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9u;
    return (size_t)(h ^ (h >> 32));
}

/* For the paths, pairs and labels (two ids that fit in 32 bits each) and
 * the functions' info tuples (by address): 16 bytes a slot, filled up to
 * 70%, as there are as many paths as events in the worst case. */
typedef struct {
    uint64_t key;
    int64_t value;  /* -1: empty slot */
} key_slot;

typedef struct {
    key_slot *slots;
    size_t mask;
    size_t used;
} key_table;

static int
keys_init(key_table *t, size_t slots)
{
    t->slots = PyMem_Malloc(slots * sizeof(key_slot));
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

static uint64_t
two_ids(int64_t a, int64_t b)
{
    return (uint64_t)a << 32 | (uint32_t)b;
}

static key_slot *
keys_find(const key_table *t, uint64_t key)
{
    size_t i = key_hash(key) & t->mask;
    while (t->slots[i].value >= 0 && t->slots[i].key != key) {
        i = (i + 1) & t->mask;
    }
    return &t->slots[i];
}

/* Stores value in the empty slot s found for key; 0, or -1 when out of
 * memory (no exception set). */
static int
keys_put(key_table *t, key_slot *s, uint64_t key, int64_t value)
{
    s->key = key;
    s->value = value;
    if (++t->used * 10 <= (t->mask + 1) * 7) {
        return 0;
    }
    key_table bigger;
    if (keys_init(&bigger, (t->mask + 1) * 2) < 0) {
        return -1;
    }
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].value >= 0) {
            *keys_find(&bigger, t->slots[i].key) = t->slots[i];
        }
    }
    bigger.used = t->used;
    PyMem_Free(t->slots);
    *t = bigger;
    return 0;
}

/* ---- the pass -------------------------------------------------------------- */

enum { MODE_PATHS, MODE_FUNCTIONS, MODE_EDGES };

/* What a function, a call path or a caller -> callee pair adds up: times
 * in ns; counts and ids in 32 bits, as there are fewer than 2**31 events
 * (paths and pairs can be as many as the events: they are kept small). */
typedef struct {
    int64_t selfs, totals;
    int32_t calls, prim, active;
    uint8_t capped;
} sums;

/* Per function (name, filename, lineno, kind, thread key). */
typedef struct {
    sums s;
    int64_t thread;  /* index into the threads */
} func_acc;

/* Per call path, or per caller -> callee pair. */
typedef struct {
    sums s;
    int32_t up;      /* the parent path, or -1 / the caller's function */
    int32_t func;    /* the function (the callee) */
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

/* What an info tuple (one per function, shared by its Events) last led
 * to: the function of that info on thread, by identity.  A thread's events
 * come together, so one entry per info hits but at thread changes.  Both
 * tuples are held, so that their addresses are not reused meanwhile. */
typedef struct {
    PyObject *info;    /* strong */
    PyObject *thread;  /* strong */
    int64_t func;
} info_cache;

typedef struct {
    ft_state *state;
    int mode;
    key_table infos;           /* info tuple's address -> its cache entry */
    info_cache *cache;         /* per info tuple: the last thread, function */
    size_t ncache, cache_cap;
    key_table nodes;           /* (up + 1, func) -> path or pair */
    PyObject *func_ids;        /* key tuple -> function, by value */
    PyObject *thread_ids;      /* thread key -> thread, by value */
    PyObject *func_keys;       /* list: function -> key tuple */
    func_acc *funcs;
    size_t nfuncs, funcs_cap;
    node_acc *nodes_acc;
    size_t nnodes, nodes_cap;
    thread_acc *threads;
    size_t nthreads, threads_cap;
    int32_t *ev_func;          /* per event (not for the paths) */
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
    key_slot *s = keys_find(&p->infos, (uintptr_t)info);
    info_cache *c = s->value >= 0 ? &p->cache[s->value] : NULL;
    if (c != NULL && c->thread == thread) {
        return c->func;
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
    if (c == NULL) {
        if (grow((void **)&p->cache, &p->cache_cap, p->ncache,
                 sizeof(info_cache)) < 0
            || keys_put(&p->infos, s, (uintptr_t)info,
                        (int64_t)p->ncache) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        c = &p->cache[p->ncache++];
        c->info = Py_NewRef(info);
        c->thread = NULL;
    }
    Py_XSETREF(c->thread, Py_NewRef(thread));
    c->func = index;
    return index;
}

/* The path or pair (up, func): its index, or -1 when out of memory. */
static int64_t
node_of(pass *p, int64_t up, int64_t func)
{
    uint64_t key = two_ids(up + 1, func);
    key_slot *s = keys_find(&p->nodes, key);
    if (s->value >= 0) {
        return s->value;
    }
    if (grow((void **)&p->nodes_acc, &p->nodes_cap, p->nnodes,
             sizeof(node_acc)) < 0) {
        return -1;
    }
    node_acc *n = &p->nodes_acc[p->nnodes];
    memset(n, 0, sizeof(*n));
    n->up = (int32_t)up;
    n->func = (int32_t)func;
    if (keys_put(&p->nodes, s, key, (int64_t)p->nnodes) < 0) {
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

/* One more call, of duration d: its total counts only where it is not
 * within another of the same function (or pair) on its thread's stack,
 * the primitive calls of cProfile.  0, or -1 past int64. */
static int
enter(sums *s, int64_t d)
{
    s->calls++;
    if (!s->active) {
        s->prim++;
        if (add(&s->totals, d) < 0) {
            return -1;
        }
    }
    s->active++;
    return add(&s->selfs, d);
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
        p->funcs[p->ev_func[j]].s.active--;
        if (p->mode == MODE_EDGES && p->ev_node[j] >= 0) {
            p->nodes_acc[p->ev_node[j]].s.active--;
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
                || add(&parent->s.selfs, -d) < 0) {
                return 1;
            }
        }
        int64_t node = node_of(p, up, f);
        if (node < 0) {
            PyErr_NoMemory();
            return -1;
        }
        node_acc *n = &p->nodes_acc[node];
        if (add(&n->s.totals, d) < 0 || add(&n->s.selfs, d) < 0) {
            return 1;
        }
        n->s.calls++;
        n->s.capped |= e.open_at_stop;
        p->ev_node[i] = (int32_t)node;
        return 0;
    }
    p->ev_func[i] = (int32_t)f;
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
        if (add(&p->funcs[pf].s.selfs, -d) < 0) {
            return 1;
        }
        if (p->mode == MODE_EDGES) {
            int64_t pe = p->ev_node[e.parent];
            if (pe >= 0 && add(&p->nodes_acc[pe].s.selfs, -d) < 0) {
                return 1;
            }
            int64_t edge = node_of(p, pf, f);
            if (edge < 0) {
                PyErr_NoMemory();
                return -1;
            }
            if (enter(&p->nodes_acc[edge].s, d) < 0) {
                return 1;
            }
            p->ev_node[i] = (int32_t)edge;
        }
    }
    fn = &p->funcs[f];
    if (enter(&fn->s, d) < 0) {
        return 1;
    }
    fn->s.capped |= e.open_at_stop;
    if (grow((void **)&t->stack.items, &t->stack.cap, t->stack.len,
             sizeof(int64_t)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    t->stack.items[t->stack.len++] = i;
    return 0;
}

/* A memoryview of bytes read as fmt ("q", "i" or "?"); steals bytes. */
static PyObject *
typed_view(PyObject *bytes, const char *fmt)
{
    if (bytes == NULL) {
        return NULL;
    }
    PyObject *raw = PyMemoryView_FromObject(bytes);
    Py_DECREF(bytes);
    if (raw == NULL) {
        return NULL;
    }
    PyObject *view = PyObject_CallMethod(raw, "cast", "s", fmt);
    Py_DECREF(raw);
    return view;
}

/* A field (of width bytes: 8 int64, 4 int32, 1 bool) of each of n structs
 * of the given size, packed and read through a memoryview by reports.py:
 * its width a value instead of a list's int objects. */
static PyObject *
column(const void *items, size_t n, size_t size, size_t offset, size_t width)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * width));
    if (out == NULL) {
        return NULL;
    }
    char *to = PyBytes_AS_STRING(out);
    for (size_t i = 0; i < n; i++) {
        memcpy(to + i * width, (const char *)items + i * size + offset,
               width);
    }
    return typed_view(out, width == 8 ? "q" : width == 4 ? "i" : "?");
}

/* The call paths' tree: each path's first child and next sibling (-1: none),
 * children in the order they were first called; int32 memoryviews. */
static int
path_links(const pass *p, PyObject **first, PyObject **next)
{
    Py_ssize_t bytes = (Py_ssize_t)(p->nnodes * sizeof(int32_t));
    PyObject *fb = PyBytes_FromStringAndSize(NULL, bytes);
    PyObject *nb = PyBytes_FromStringAndSize(NULL, bytes);
    if (fb == NULL || nb == NULL) {
        Py_XDECREF(fb);
        Py_XDECREF(nb);
        return -1;
    }
    int32_t *fc = (int32_t *)PyBytes_AS_STRING(fb);
    int32_t *ns = (int32_t *)PyBytes_AS_STRING(nb);
    for (size_t i = 0; i < p->nnodes; i++) {
        fc[i] = -1;
    }
    for (size_t i = p->nnodes; i-- > 0;) {
        int32_t up = p->nodes_acc[i].up;
        ns[i] = up >= 0 ? fc[up] : -1;
        if (up >= 0) {
            fc[up] = (int32_t)i;
        }
    }
    *first = typed_view(fb, "i");
    *next = typed_view(nb, "i");
    return *first == NULL || *next == NULL ? -1 : 0;
}

#define FUNCS(field) column(p->funcs, p->nfuncs, sizeof(func_acc), \
                           offsetof(func_acc, field), \
                           sizeof(((func_acc *)0)->field))
#define NODES(field) column(p->nodes_acc, p->nnodes, sizeof(node_acc), \
                           offsetof(node_acc, field), \
                           sizeof(((node_acc *)0)->field))

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
         * idents, roots, first children, next siblings, functions, the
         * paths' functions */
        out = Py_BuildValue("(NNNNNNOOONNON)", NODES(up), info,
                            NODES(s.totals), NODES(s.selfs),
                            NODES(s.calls), NODES(s.capped),
                            keys, idents, roots, first, next, p->func_keys,
                            NODES(func));
        goto done;
    }
    /* keys, calls, prim, selfs, totals, capped, thread keys, idents,
     * roots; the pairs' callers, callees, calls, prim, selfs, totals */
    out = Py_BuildValue("(ONNNNNOOONNNNNN)", p->func_keys, FUNCS(s.calls),
                        FUNCS(s.prim), FUNCS(s.selfs), FUNCS(s.totals),
                        FUNCS(s.capped), keys, idents, roots,
                        NODES(up), NODES(func), NODES(s.calls),
                        NODES(s.prim), NODES(s.selfs), NODES(s.totals));
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
    PyMem_Free(p->nodes.slots);
    Py_XDECREF(p->func_ids);
    Py_XDECREF(p->thread_ids);
    Py_XDECREF(p->func_keys);
    for (size_t i = 0; i < p->ncache; i++) {
        Py_DECREF(p->cache[i].info);
        Py_DECREF(p->cache[i].thread);
    }
    PyMem_Free(p->cache);
    PyMem_Free(p->infos.slots);
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
    /* Per event: its path (paths); its function and pair (functions). */
    size_t per_event = n > 0 ? (size_t)n : 1;
    if (mode != MODE_PATHS) {
        p.ev_func = PyMem_Malloc(per_event * sizeof(int32_t));
    }
    if (mode != MODE_FUNCTIONS) {
        p.ev_node = PyMem_Malloc(per_event * sizeof(int32_t));
    }
    if ((mode != MODE_PATHS && p.ev_func == NULL)
        || (mode != MODE_FUNCTIONS && p.ev_node == NULL)
        || keys_init(&p.infos, 1024) < 0
        || keys_init(&p.nodes, 1024) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    p.func_ids = PyDict_New();
    p.thread_ids = PyDict_New();
    p.func_keys = PyList_New(0);
    if (p.func_ids == NULL || p.thread_ids == NULL || p.func_keys == NULL) {
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
    /* What only the pass needed goes before the results are made: the
     * peak is the larger of the two, not their sum. */
    PyMem_Free(p.ev_func);
    PyMem_Free(p.ev_node);
    PyMem_Free(p.nodes.slots);
    p.ev_func = NULL;
    p.ev_node = NULL;
    p.nodes.slots = NULL;
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
    "siblings, the functions' keys, each path's function); 1: per function (keys, calls, prim, selfs, totals, capped,\n"
    "thread keys, thread ids, root sums, and empty pair columns); 2: also\n"
    "per caller -> callee pair (callers, callees, calls, prim, selfs,\n"
    "totals).  Numbers come as memoryviews of packed int64 or int32 (the\n"
    "per-path ids and counts), capped as bools.\n"
    "None where the events are not getEvents()'s or the loader's (the\n"
    "Python pass then runs and says what is wrong).",
};

/* ---- the collapsed stacks' labels and lines ------------------------------- */

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
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
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
        PyErr_SetString(PyExc_ValueError, "a column of int64 or int32 expected");
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
    key_table ids;    /* (up + 1, frame) -> label */
    i64vec up, frame, value;
} labels;

/* The label (up, frame): its index, or -1 when out of memory. */
static int64_t
label_of(labels *l, int64_t up, int64_t frame)
{
    uint64_t key = two_ids(up + 1, frame);
    key_slot *s = keys_find(&l->ids, key);
    if (s->value >= 0) {
        return s->value;
    }
    int64_t id = (int64_t)l->up.len;
    i64vec *cols[3] = {&l->up, &l->frame, &l->value};
    int64_t init[3] = {up, frame, 0};
    for (int k = 0; k < 3; k++) {
        if (grow((void **)&cols[k]->items, &cols[k]->cap, cols[k]->len,
                 sizeof(int64_t)) < 0) {
            return -1;
        }
        cols[k]->items[cols[k]->len++] = init[k];
    }
    if (keys_put(&l->ids, s, key, id) < 0) {
        return -1;
    }
    return id;
}

static PyObject *
packed(const i64vec *v)
{
    return PyBytes_FromStringAndSize((const char *)v->items,
                                     (Py_ssize_t)(v->len * sizeof(int64_t)));
}

/* _collapse_labels(parents, path_funcs, frame_of_func, top_of_func, values)
 * -> (label_up, label_frame, label_value) int64 memoryviews, or None past
 * int64. */
static PyObject *
collapse_labels(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_collapse_labels(parents, path_funcs, "
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
    static const int at[3] = {0, 1, 4};
    for (; held < 3; held++) {
        if (column_open(args[at[held]], &cols[held]) < 0) {
            goto done;
        }
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
        out = Py_NewRef(Py_None);  /* labels' ids must fit in 32 bits */
        goto done;
    }
    path_label = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    if (path_label == NULL || keys_init(&l.ids, 1024) < 0) {
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
        if (__builtin_add_overflow(l.value.items[lid], column_at(&cols[2], p),
                                   &l.value.items[lid])) {
            out = Py_NewRef(Py_None);  /* the Python code has big ints */
            break;
        }
    }
    PyMem_Free(path_label);
    PyMem_Free(l.ids.slots);
    path_label = NULL;
    l.ids.slots = NULL;
    if (out == NULL && !PyErr_Occurred()) {
        out = Py_BuildValue("(NNN)", typed_view(packed(&l.up), "q"),
                            typed_view(packed(&l.frame), "q"),
                            typed_view(packed(&l.value), "q"));
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
    "label_frame, label_value) packed, or None when a sum passes int64.",
};

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
    for (; held < 3; held++) {
        if (column_open(args[held], &cols[held]) < 0) {
            goto done;
        }
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
        int64_t value = column_at(&cols[2], lid);
        if (self_weight) {
            value = value < 0 ? 0 : value;
            value = value > INT64_MAX - 500 ? INT64_MAX / 1000
                                            : (value + 500) / 1000;
        }
        if (value <= 0) {
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
        PyObject *line = PyUnicode_FromFormat("%U %lld", joined,
                                              (long long)value);
        Py_DECREF(joined);
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
