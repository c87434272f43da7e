/* The reports' one pass over the events, in C: _report_pass(events, mode)
 * gives what frametrace/reports.py's call paths (mode 0: the events merged
 * by call path, for the collapsed stacks and the flame graph) and
 * functions (mode 1, and 2 with the caller -> callee pairs: the summary
 * and pstats) are made of.  It takes any list or tuple: the Events that
 * getEvents() and the loader build (sharing each function's and thread's
 * tuples: found by the info tuple's address, their numbers read without
 * an int object each), and any other 14 values an event (Event(values),
 * tuples, lists) by value, with Python's semantics: sums past int64 go on
 * as ints, and what is wrong raises the TypeError or ValueError that names
 * the event (tests/report_oracle.py is the reference it is compared with).
 * Reading an event is report_read.c's; the collapsed stacks' labels and
 * lines are report_labels.c's. */
#include "report_pass.h"

#include <string.h>

/* The event's thread key: tkey where read, else its function's (f's). */
static inline PyObject *
thread_key(pass *p, int64_t f, PyObject *tkey)
{
    if (tkey != NULL) {
        return tkey;
    }
    return PyTuple_GET_ITEM(PyList_GET_ITEM(p->func_keys, f), 4);
}

/* The path or pair (up, func): its index (*made: new), or -1 when out of
 * memory (no exception set). */
static inline int64_t
node_of(pass *p, int64_t up, int64_t func, int *made)
{
    uint64_t key = ft_two_ids(up + 1, func);
    ft_key_slot *s = ft_keys_find(&p->nodes, key);
    *made = s->value < 0;
    if (!*made) {
        return s->value;
    }
    if (ft_grow((void **)&p->nodes_acc, &p->nodes_cap, p->nnodes,
                sizeof(node_acc)) < 0) {
        return -1;
    }
    node_acc *n = &p->nodes_acc[p->nnodes];
    memset(n, 0, sizeof(*n));
    n->up = (int32_t)up;
    n->func = (int32_t)func;
    if (ft_keys_put(&p->nodes, s, key, (int64_t)p->nnodes) < 0) {
        return -1;
    }
    return (int64_t)p->nnodes++;
}

static inline int
add_self(pass *p, sums *s, size_t index, int which, int64_t d, PyObject *dbig,
         int sign)
{
    return ft_sum_add(p->bigs, &s->selfs, &s->big, BIT_SELFS,
                      big_id(index, which), d, dbig, sign);
}

/* One more call, of duration d (dbig where not NULL): its total counts
 * only where it is not within another of the same function (or pair) on
 * its thread's stack, the primitive calls of cProfile.  0, or -1 with an
 * exception. */
static inline int
enter(pass *p, sums *s, size_t index, int node, int64_t d, PyObject *dbig)
{
    s->calls++;
    if (!s->active) {
        s->prim++;
        if (ft_sum_add(p->bigs, &s->totals, &s->big, BIT_TOTALS,
                       big_id(index, node ? BIG_NODE_TOTAL : BIG_FUNC_TOTAL),
                       d, dbig, 1) < 0) {
            return -1;
        }
    }
    s->active++;
    return add_self(p, s, index, node ? BIG_NODE_SELF : BIG_FUNC_SELF, d, dbig,
                    1);
}

static inline int
add_root(pass *p, int64_t thread, int64_t d, PyObject *dbig)
{
    thread_acc *t = &p->threads[thread];
    t->has_roots = 1;
    return ft_sum_add(p->bigs, &t->roots, &t->big, BIT_SELFS,
                      big_id((size_t)thread, BIG_ROOTS), d, dbig, 1);
}

/* The open flag: 1, 0, or -1 with an exception. */
static inline int
capped(const view *v, int rec)
{
    if (rec || v->have_numbers) {
        return v->e.open_at_stop;
    }
    return PyObject_IsTrue(PyTuple_GET_ITEM(v->values, 11));
}

/* parent < 0 (1, 0, or -1 with an exception); a negative parent other
 * than -1 raises, naming the event. */
static inline int
is_root(pass *p, Py_ssize_t i, const view *v, int rec)
{
    int neg = rec || v->small_parent ? v->e.parent < 0
                              : ft_rp_compare_int(v->parent, 0, Py_LT);
    if (neg <= 0) {
        return neg;
    }
    int ne = rec || v->small_parent ? v->e.parent != -1
                             : ft_rp_compare_int(v->parent, -1, Py_NE);
    if (ne < 0) {
        return -1;
    }
    if (ne) {
        return ft_rp_event_error(p, i, PyExc_ValueError,
                                 ft_rp_parent_why(v, ""), 1);
    }
    return 1;
}

/* Pops thread t's open events down to (not including) parent (small, or
 * the object; -1 with small: all): 0, or -1 with an exception. */
static inline int
unwind(pass *p, thread_acc *t, const view *v, int all, int rec)
{
    while (t->stack.len > 0) {
        int64_t j = t->stack.items[t->stack.len - 1];
        if (!all) {
            int ne;
            if (rec || v->small_parent) {
                ne = j != v->e.parent;
            }
            else {
                PyObject *boxed = PyLong_FromLongLong(j);
                ne = boxed == NULL ? -1 : ft_rp_differ(boxed, v->parent);
                Py_XDECREF(boxed);
            }
            if (ne <= 0) {
                return ne;
            }
        }
        t->stack.len--;
        p->funcs[p->ev_func[j]].s.active--;
        if (p->mode == MODE_EDGES && p->ev_node[j] >= 0) {
            p->nodes_acc[p->ev_node[j]].s.active--;
        }
    }
    return 0;
}

/* The parent is not on the thread's stack: events out of call order.  The
 * stack rebuilt from the parent links (parents come first): 0, or -1 with
 * an exception. */
static int
restack(pass *p, Py_ssize_t i, const view *v, thread_acc *t, PyObject *tkey)
{
    PyObject *j = v->small_parent ? PyLong_FromLongLong(v->e.parent)
                                  : Py_NewRef(v->parent);
    PyObject *zero = PyLong_FromLong(0), *nine = PyLong_FromLong(9);
    PyObject *end = PyLong_FromSsize_t(i);
    int rc = -1;
    if (j == NULL || zero == NULL || nine == NULL || end == NULL) {
        goto done;
    }
    int in = PyObject_RichCompareBool(zero, j, Py_LE);
    if (in > 0) {
        in = PyObject_RichCompareBool(j, end, Py_LT);
    }
    if (in <= 0) {
        if (in == 0) {
            ft_rp_event_error(p, i, PyExc_ValueError, ft_rp_parent_why(
                v, " is not an earlier event"), 1);
        }
        goto done;
    }
    t->stack.len = 0;
    for (Py_ssize_t steps = 0;; steps++) {
        int more = PyObject_RichCompareBool(j, zero, Py_GE);
        if (more <= 0) {
            rc = more;
            break;
        }
        Py_ssize_t at = ft_rp_list_index(j, i);
        if (at < 0) {
            break;
        }
        PyObject *key = PyList_GET_ITEM(p->func_keys, p->ev_func[at]);
        int ne = ft_rp_differ(PyTuple_GET_ITEM(key, 4), tkey);
        if (ne != 0 || steps >= i) {
            if (ne >= 0) {
                const char *why = ne ? "ancestor %U is on another thread"
                                     : "ancestor %U is its own ancestor";
                PyObject *text = PyObject_Format(j, NULL);
                ft_rp_event_error(p, i, PyExc_ValueError, text == NULL ? NULL
                                  : PyUnicode_FromFormat(why, text), 1);
                Py_XDECREF(text);
            }
            break;
        }
        if (ft_grow((void **)&t->stack.items, &t->stack.cap, t->stack.len,
                    sizeof(int64_t)) < 0) {
            PyErr_NoMemory();
            break;
        }
        t->stack.items[t->stack.len++] = at;
        PyObject *ev = PyObject_GetItem(p->events, j);
        PyObject *up = ev == NULL ? NULL : PyObject_GetItem(ev, nine);
        Py_XDECREF(ev);
        if (up == NULL) {
            break;
        }
        Py_SETREF(j, up);
    }
    if (rc == 0) {
        /* Root first, as the stack holds them. */
        for (size_t a = 0, b = t->stack.len; a + 1 < b; a++, b--) {
            int64_t x = t->stack.items[a];
            t->stack.items[a] = t->stack.items[b - 1];
            t->stack.items[b - 1] = x;
        }
        for (size_t k = 0; k < t->stack.len; k++) {
            int64_t at = t->stack.items[k];
            p->funcs[p->ev_func[at]].s.active++;
            if (p->mode == MODE_EDGES && p->ev_node[at] >= 0) {
                p->nodes_acc[p->ev_node[at]].s.active++;
            }
        }
    }
done:
    Py_XDECREF(j);
    Py_XDECREF(zero);
    Py_XDECREF(nine);
    Py_XDECREF(end);
    return rc;
}

/* The parent's index (an earlier event's): -1 with an exception. */
static inline Py_ssize_t
parent_index(const view *v, Py_ssize_t i, int rec)
{
    if ((rec || v->small_parent) && v->e.parent >= 0 && v->e.parent < i) {
        return (Py_ssize_t)v->e.parent;
    }
    if (v->small_parent) {
        PyObject *boxed = PyLong_FromLongLong(v->e.parent);
        if (boxed == NULL) {
            return -1;
        }
        Py_ssize_t at = ft_rp_list_index(boxed, i);
        Py_DECREF(boxed);
        return at;
    }
    return ft_rp_list_index(v->parent, i);
}

/* One event of the functions (and pairs): 0, or -1 with an exception.
 * rec: v is a recorded Event (ft_rp_read_recorded): inlined twice, so that
 * its numbers are read without checking, per event, that they are. */
static inline __attribute__((always_inline)) int
take_function(pass *p, Py_ssize_t i, view *v, int rec)
{
    PyObject *tkey = NULL;  /* the thread key, where read */
    int64_t f = ft_rp_cached_func(p, v);
    if (f < 0) {
        int64_t thread = ft_rp_thread_of(p, v, &tkey);
        if (thread < 0
            || (f = ft_rp_func_by_value(p, i, v, tkey, thread, 1)) < 0
            || ft_rp_remember(p, v, f) < 0) {
            return -1;
        }
    }
    if (ft_rp_duration(p, i, v, rec) < 0) {
        return -1;
    }
    /* A recorded Event's duration is an int64: no big one to check. */
    int64_t d = v->d.small;
    PyObject *dbig = rec ? NULL : v->d.big;
    int64_t thread = p->funcs[f].thread;
    thread_acc *t = &p->threads[thread];
    p->ev_func[i] = (int32_t)f;
    int root = is_root(p, i, v, rec);
    if (root < 0) {
        return -1;
    }
    if (root) {
        unwind(p, t, v, 1, rec);
        if (add_root(p, thread, d, dbig) < 0) {
            return -1;
        }
        if (p->mode == MODE_EDGES) {
            p->ev_node[i] = -1;
        }
    }
    else {
        if (unwind(p, t, v, 0, rec) < 0
            || (t->stack.len == 0
                && restack(p, i, v, t, thread_key(p, f, tkey)) < 0)) {
            return -1;
        }
        Py_ssize_t at = parent_index(v, i, rec);
        if (at < 0) {
            return -1;
        }
        int64_t pf = p->ev_func[at];
        if (add_self(p, &p->funcs[pf].s, (size_t)pf, BIG_FUNC_SELF, d, dbig,
                     -1) < 0) {
            return -1;
        }
        if (p->mode == MODE_EDGES) {
            int64_t pe = p->ev_node[at];
            if (pe >= 0 && add_self(p, &p->nodes_acc[pe].s, (size_t)pe,
                                    BIG_NODE_SELF, d, dbig, -1) < 0) {
                return -1;
            }
            int made;
            int64_t edge = node_of(p, pf, f, &made);
            if (edge < 0) {
                PyErr_NoMemory();
                return -1;
            }
            if (enter(p, &p->nodes_acc[edge].s, (size_t)edge, 1, d,
                      dbig) < 0) {
                return -1;
            }
            p->ev_node[i] = (int32_t)edge;
        }
    }
    if (enter(p, &p->funcs[f].s, (size_t)f, 0, d, dbig) < 0) {
        return -1;
    }
    int cap = capped(v, rec);
    if (cap < 0) {
        return -1;
    }
    p->funcs[f].s.capped |= (uint8_t)cap;
    if (ft_grow((void **)&t->stack.items, &t->stack.cap, t->stack.len,
                sizeof(int64_t)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    t->stack.items[t->stack.len++] = i;
    return 0;
}

/* A path's (name, filename, lineno, kind, thread key): its function's key
 * (borrowed). */
static PyObject *
path_info_of(pass *p, int64_t node)
{
    return PyList_GET_ITEM(p->func_keys, p->nodes_acc[node].func);
}

/* Whether a and b are one value as far as the reports show it. */
static int
same(PyObject *a, PyObject *b)
{
    if (a == b) {
        return 1;
    }
    if (Py_TYPE(a) != Py_TYPE(b)
        || !(PyUnicode_CheckExact(a) || PyLong_CheckExact(a))) {
        return 0;
    }
    return PyObject_RichCompareBool(a, b, Py_EQ) == 1;
}

/* A new path's info: its function's key, unless the event's values are
 * others (equal, of other types, as True and 1): then a function of its
 * own that only it shows (the paths are found by the first).  0, or -1. */
static int
new_path_info(pass *p, int64_t node, const view *v, PyObject *tkey)
{
    int64_t f = p->nodes_acc[node].func;
    PyObject *key = PyList_GET_ITEM(p->func_keys, f);
    PyObject *mine[5] = {v->name, v->filename, v->lineno, v->kind, tkey};
    int all = 1;
    for (int k = 0; k < 5 && all; k++) {
        all = same(PyTuple_GET_ITEM(key, k), mine[k]);
    }
    if (all) {
        return 0;
    }
    if (ft_grow((void **)&p->funcs, &p->funcs_cap, p->nfuncs,
                sizeof(func_acc)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *own = PyTuple_Pack(5, mine[0], mine[1], mine[2], mine[3],
                                 mine[4]);
    if (own == NULL || PyList_Append(p->func_keys, own) < 0) {
        Py_XDECREF(own);
        return -1;
    }
    Py_DECREF(own);
    memset(&p->funcs[p->nfuncs], 0, sizeof(func_acc));
    p->funcs[p->nfuncs].thread = p->funcs[f].thread;
    p->funcs[p->nfuncs].s.plain = PyLong_CheckExact(tkey)
                                  || PyUnicode_CheckExact(tkey);
    p->nodes_acc[node].func = (int32_t)p->nfuncs++;
    return 0;
}

/* One event of the call paths: 0, or -1 with an exception (rec: as
 * take_function's). */
static inline __attribute__((always_inline)) int
take_path(pass *p, Py_ssize_t i, view *v, int rec)
{
    PyObject *tkey = NULL;  /* the thread key, where read */
    int64_t thread, f = ft_rp_cached_func(p, v);
    if (f >= 0) {
        thread = p->funcs[f].thread;
    }
    else if ((thread = ft_rp_thread_of(p, v, &tkey)) < 0) {
        return -1;
    }
    if (ft_rp_duration(p, i, v, rec) < 0) {
        return -1;
    }
    /* A recorded Event's duration is an int64: no big one to check. */
    int64_t d = v->d.small;
    PyObject *dbig = rec ? NULL : v->d.big;
    int root = is_root(p, i, v, rec);
    if (root < 0) {
        return -1;
    }
    int64_t up = -1;
    if (root) {
        if (add_root(p, thread, d, dbig) < 0) {
            return -1;
        }
    }
    else {
        int late = rec || v->small_parent ? v->e.parent >= i
                                   : ft_rp_compare_int(v->parent, i, Py_GE);
        if (late < 0) {
            return -1;
        }
        if (late) {
            return ft_rp_event_error(p, i, PyExc_ValueError, ft_rp_parent_why(
                v, " is not an earlier event"), 1);
        }
        Py_ssize_t at = parent_index(v, i, rec);
        if (at < 0) {
            return -1;
        }
        up = p->ev_node[at];
        int64_t pf = p->nodes_acc[up].func;
        int ne = 0;
        /* Exact ints or strs of one thread: equal; anything else is
         * compared as Python compares it. */
        if (p->funcs[pf].thread != thread || !p->funcs[pf].s.plain
            || !(tkey == NULL ? p->funcs[f].s.plain
                              : PyLong_CheckExact(tkey)
                                || PyUnicode_CheckExact(tkey))) {
            ne = ft_rp_differ(PyTuple_GET_ITEM(path_info_of(p, up), 4),
                              thread_key(p, f, tkey));
        }
        if (ne < 0) {
            return -1;
        }
        if (ne) {
            return ft_rp_event_error(p, i, PyExc_ValueError, ft_rp_parent_why(
                v, " is on another thread"), 1);
        }
        if (add_self(p, &p->nodes_acc[up].s, (size_t)up, BIG_NODE_SELF,
                     d, dbig, -1) < 0) {
            return -1;
        }
    }
    if (f < 0 && ((f = ft_rp_func_by_value(p, i, v, tkey, thread, 0)) < 0
                  || ft_rp_remember(p, v, f) < 0)) {
        return -1;
    }
    int made;
    int64_t node = node_of(p, up, f, &made);
    if (node < 0) {
        PyErr_NoMemory();
        return -1;
    }
    if (made) {
        ft_rp_view_fill(v);
        if (!PyUnicode_CheckExact(v->name)
            || !PyUnicode_CheckExact(v->filename)) {
            return ft_rp_not_str(p, i);
        }
        /* Its function's key is the event's values where that function
         * was made from the event's info tuple (and thread key). */
        int own = v->info == NULL || p->funcs[f].made_from != v->info
                  || (tkey != NULL && !same(thread_key(p, f, NULL), tkey));
        if (own && new_path_info(p, node, v, thread_key(p, f, tkey)) < 0) {
            return -1;
        }
    }
    sums *s = &p->nodes_acc[node].s;
    if (ft_sum_add(p->bigs, &s->totals, &s->big, BIT_TOTALS,
                   big_id((size_t)node, BIG_NODE_TOTAL), d, dbig, 1) < 0
        || add_self(p, s, (size_t)node, BIG_NODE_SELF, d, dbig, 1) < 0) {
        return -1;
    }
    s->calls++;
    int cap = capped(v, rec);
    if (cap < 0) {
        return -1;
    }
    s->capped |= (uint8_t)cap;
    p->ev_node[i] = (int32_t)node;
    return 0;
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
    return ft_typed_view(out, width == 8 ? "q" : width == 4 ? "i" : "?");
}

/* A column of the sums (of a struct's sums at sums_at): int64 packed, or
 * a list of ints where one passed int64. */
static PyObject *
sum_column(pass *p, const void *items, size_t n, size_t size, size_t sums_at,
           uint8_t bit, int which)
{
    const char *base = items;
    size_t at = sums_at + (bit == BIT_SELFS ? offsetof(sums, selfs)
                                            : offsetof(sums, totals));
    size_t at_big = sums_at + offsetof(sums, big);
    size_t k = 0;
    while (k < n && !(*(const uint8_t *)(base + k * size + at_big) & bit)) {
        k++;
    }
    if (k == n) {
        return column(items, n, size, at, 8);
    }
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (k = 0; list != NULL && k < n; k++) {
        int64_t sum;
        memcpy(&sum, base + k * size + at, 8);
        PyObject *value = ft_sum_value(
            p->bigs, sum, *(const uint8_t *)(base + k * size + at_big), bit,
            big_id(k, which));
        if (value == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)k, value);
    }
    return list;
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
    *first = ft_typed_view(fb, "i");
    *next = ft_typed_view(nb, "i");
    return *first == NULL || *next == NULL ? -1 : 0;
}

#define FUNCS(field) column(p->funcs, p->nfuncs, sizeof(func_acc), \
                            offsetof(func_acc, field), \
                            sizeof(((func_acc *)0)->field))
#define NODES(field) column(p->nodes_acc, p->nnodes, sizeof(node_acc), \
                            offsetof(node_acc, field), \
                            sizeof(((node_acc *)0)->field))
#define FUNC_SUM(bit, which) \
    sum_column(p, p->funcs, p->nfuncs, sizeof(func_acc), \
               offsetof(func_acc, s), bit, which)
#define NODE_SUM(bit, which) \
    sum_column(p, p->nodes_acc, p->nnodes, sizeof(node_acc), \
               offsetof(node_acc, s), bit, which)

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
            PyObject *sum = ft_sum_value(p->bigs, t->roots, t->big, BIT_SELFS,
                                         big_id(i, BIG_ROOTS));
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
            PyObject *key = path_info_of(p, (int64_t)i);
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
                            NODE_SUM(BIT_TOTALS, BIG_NODE_TOTAL),
                            NODE_SUM(BIT_SELFS, BIG_NODE_SELF),
                            NODES(s.calls), NODES(s.capped),
                            keys, idents, roots, first, next, p->func_keys,
                            NODES(func));
        goto done;
    }
    /* keys, calls, prim, selfs, totals, capped, thread keys, idents,
     * roots; the pairs' callers, callees, calls, prim, selfs, totals */
    out = Py_BuildValue("(ONNNNNOOONNNNNN)", p->func_keys, FUNCS(s.calls),
                        FUNCS(s.prim),
                        FUNC_SUM(BIT_SELFS, BIG_FUNC_SELF),
                        FUNC_SUM(BIT_TOTALS, BIG_FUNC_TOTAL),
                        FUNCS(s.capped), keys, idents, roots,
                        NODES(up), NODES(func), NODES(s.calls),
                        NODES(s.prim),
                        NODE_SUM(BIT_SELFS, BIG_NODE_SELF),
                        NODE_SUM(BIT_TOTALS, BIG_NODE_TOTAL));
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
    Py_XDECREF(p->bigs);
    for (size_t i = 0; i < p->ncache; i++) {
        Py_DECREF(p->cache[i].info);
        Py_DECREF(p->cache[i].thread);
    }
    PyMem_Free(p->cache);
    PyMem_Free(p->infos.slots);
}

/* Room for event i's per-event ids (the room, at most INT32_MAX, bounds
 * the events): 0, or -1 with an exception. */
static inline int
event_room(pass *p, size_t i)
{
    if (i < p->ev_cap) {
        return 0;
    }
    if (i >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the reports take at most "
                        "2**31 - 1 events");
        return -1;
    }
    /* The events' number first; more where code they ran added some. */
    size_t want = p->ev_cap ? p->ev_cap * 2 : i + 1;
    if (want > INT32_MAX) {
        want = INT32_MAX;
    }
    for (int k = 0; k < 2; k++) {
        int32_t **items = k ? &p->ev_node : &p->ev_func;
        if (k == 0 ? p->mode == MODE_PATHS : p->mode == MODE_FUNCTIONS) {
            continue;
        }
        int32_t *grown = PyMem_Realloc(*items, want * sizeof(int32_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *items = grown;
    }
    p->ev_cap = want;
    return 0;
}

/* _report_pass(events, mode) -> a tuple of columns. */
static PyObject *
report_pass(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyLong_Check(args[1])
        || (!PyList_CheckExact(args[0]) && !PyTuple_CheckExact(args[0]))) {
        PyErr_SetString(PyExc_TypeError,
                        "_report_pass(events: list | tuple, mode: int)");
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
    PyObject *out = NULL;
    pass p;
    memset(&p, 0, sizeof(p));
    /* Read by index with the length checked each time, as a list's
     * iterator does: code the events run may change a list. */
    p.events = Py_NewRef(args[0]);
    p.state = ft_get_state(module);
    p.mode = (int)mode;
    if (ft_keys_init(&p.infos, 1024) < 0 || ft_keys_init(&p.nodes, 1024) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    p.func_ids = PyDict_New();
    p.thread_ids = PyDict_New();
    p.func_keys = PyList_New(0);
    p.bigs = PyDict_New();
    if (p.func_ids == NULL || p.thread_ids == NULL || p.func_keys == NULL
        || p.bigs == NULL) {
        goto done;
    }
    /* Room for the events there are (more where code they ran adds). */
    Py_ssize_t n = PySequence_Fast_GET_SIZE(p.events);
    if (n > 0 && event_room(&p, (size_t)Py_MIN(n, INT32_MAX) - 1) < 0) {
        goto done;
    }
    /* Py_SIZE is a list's and a tuple's length: no type check per event. */
    int is_list = PyList_CheckExact(p.events);
    for (Py_ssize_t i = 0; i < Py_SIZE(p.events); i++) {
        PyObject *ev = Py_NewRef(is_list ? PyList_GET_ITEM(p.events, i)
                                         : PyTuple_GET_ITEM(p.events, i));
        view v;
        int rc = event_room(&p, (size_t)i);
        if (rc == 0) {
            if (ft_rp_read_recorded(&p, ev, &v)) {
                /* Holds no reference: nothing to clear. */
                rc = p.mode == MODE_PATHS ? take_path(&p, i, &v, 1)
                                          : take_function(&p, i, &v, 1);
            }
            else {
                if ((rc = ft_rp_read_event(&p, ev, &v)) == 0) {
                    rc = p.mode == MODE_PATHS ? take_path(&p, i, &v, 0)
                                              : take_function(&p, i, &v, 0);
                }
                ft_rp_view_clear(&v);
            }
        }
        Py_DECREF(ev);
        if (rc < 0) {
            if (!p.named) {
                ft_rp_unpack_error(p.events);
            }
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
    Py_DECREF(p.events);
    return out;
}

PyMethodDef ft_report_pass_def = {
    "_report_pass", (PyCFunction)(void (*)(void))report_pass, METH_FASTCALL,
    "_report_pass($module, events, mode, /)\n--\n\n"
    "For frametrace.reports: the one pass over the events (a list or\n"
    "tuple) in C.  mode 0: the events merged by call path (parents, info,\n"
    "totals, selfs, calls, capped, thread keys, thread ids, root sums,\n"
    "first children, next siblings, the functions' keys, each path's\n"
    "function); 1: per function (keys, calls, prim, selfs, totals, capped,\n"
    "thread keys, thread ids, root sums, and empty pair columns); 2: also\n"
    "per caller -> callee pair (callers, callees, calls, prim, selfs,\n"
    "totals).  Numbers come as memoryviews of packed int64 or int32, capped\n"
    "as bools; a sums column with a sum past int64 as a list of ints.\n"
    "TypeError or ValueError naming the event for events that are not\n"
    "getEvents()'s.",
};
