/* The reports' pass (report_pass.c, report_read.c): its state. */
#ifndef FT_REPORT_PASS_H
#define FT_REPORT_PASS_H

#include "report.h"

enum { MODE_PATHS, MODE_FUNCTIONS, MODE_EDGES };
enum { N_FIELDS = 14 };  /* an Event's */

/* Where the sums past int64 are: ids of (index, which). */
enum { BIG_FUNC_SELF, BIG_FUNC_TOTAL, BIG_NODE_SELF, BIG_NODE_TOTAL,
       BIG_ROOTS };
enum { BIT_SELFS = 1, BIT_TOTALS = 2 };

static inline uint64_t
big_id(size_t index, int which)
{
    return (uint64_t)index * 8 + (uint64_t)which;
}

/* What a function, a call path or a caller -> callee pair adds up: times
 * in ns; counts and ids in 32 bits, as there are fewer than 2**31 events
 * (paths and pairs can be as many as the events: they are kept small). */
typedef struct {
    int64_t selfs, totals;
    int32_t calls, prim, active;
    uint8_t capped;
    uint8_t big;     /* BIT_SELFS, BIT_TOTALS: past int64 (in bigs) */
    uint8_t plain;   /* a function's thread key is an exact int or str */
} sums;

/* Per function (name, filename, lineno, kind, thread key). */
typedef struct {
    sums s;
    int64_t thread;  /* index into the threads */
    PyObject *made_from;  /* the info tuple its key was made of, or NULL
                             (the address alone: the cache holds it) */
} func_acc;

/* Per call path, or per caller -> callee pair. */
typedef struct {
    sums s;
    int32_t up;      /* the parent path, or -1 / the caller's function */
    int32_t func;    /* the function (the callee) */
} node_acc;

typedef struct {
    PyObject *key;     /* strong: thread_serial, or thread_id where falsy */
    PyObject *ident;   /* strong: thread_id */
    int64_t roots;     /* the sum of its root events' durations */
    uint8_t has_roots, big;
    ft_i64vec stack;   /* MODE_FUNCTIONS: its open events */
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
    PyObject *events;          /* the list or tuple */
    ft_key_table infos;        /* info tuple's address -> its cache entry */
    info_cache *cache;         /* per info tuple: the last thread, function */
    size_t ncache, cache_cap;
    ft_key_table nodes;        /* (up + 1, func) -> path or pair */
    PyObject *func_ids;        /* key tuple -> function, by value */
    PyObject *thread_ids;      /* thread key -> thread, by value */
    PyObject *func_keys;       /* list: function -> key tuple */
    PyObject *bigs;            /* sums past int64, by big_id() */
    func_acc *funcs;
    size_t nfuncs, funcs_cap;
    node_acc *nodes_acc;
    size_t nnodes, nodes_cap;
    thread_acc *threads;
    size_t nthreads, threads_cap;
    int32_t *ev_func;          /* per event (not for the paths) */
    int32_t *ev_node;          /* per event: its path, or its pair (-1) */
    size_t ev_cap;
    int named;                 /* the error set names an event */
} pass;

/* One event, as the pass reads it. */
typedef struct {
    PyObject *values;          /* strong: its 14 values; NULL: recorded
                                  (not set by ft_rp_read_recorded) */
    PyObject *info, *thread;   /* borrowed: a recorded Event's tuples */
    /* borrowed; for a recorded Event set by ft_rp_view_fill() */
    PyObject *name, *filename, *lineno, *kind, *ident, *serial;
    ft_num d;                  /* end - start (d.big strong) */
    int small_parent;          /* parent is the int64 e.parent */
    PyObject *parent;          /* borrowed, where not small */
    ft_event e;                /* numbers, where known */
    int have_numbers;          /* e's start, end, parent and flags hold */
} view;

/* ---- report_read.c: reading one event, and the errors naming it ---- */

/* Raises exc "event i <repr>: <why>[ (events must be ...)]" (why a str,
 * stolen); -1. */
int ft_rp_event_error(pass *p, Py_ssize_t i, PyObject *exc, PyObject *why,
                      int order);
/* "parent <parent><rest>" as an f-string spells the parent. */
PyObject *ft_rp_parent_why(const view *v, const char *rest);
/* a != b as Python says it: 1, 0, or -1 with an exception. */
int ft_rp_differ(PyObject *a, PyObject *b);
/* obj <op> k as Python says it: 1, 0, or -1 with an exception. */
int ft_rp_compare_int(PyObject *obj, long long k, int op);
/* lst[obj] for a list of len items: the index, or -1 with an exception. */
Py_ssize_t ft_rp_list_index(PyObject *obj, Py_ssize_t len);
/* Unpacks event ev into v: 0, or -1 with an exception. */
int ft_rp_read_event(pass *p, PyObject *ev, view *v);

/* v's borrowed fields of a recorded Event's shared info and thread
 * tuples (ft_event_parts). */
static inline void
ft_rp_view_parts(view *v, PyObject *info, PyObject *thread)
{
    v->info = info;
    v->thread = thread;
    v->name = PyTuple_GET_ITEM(info, 0);
    v->filename = PyTuple_GET_ITEM(info, 1);
    v->lineno = PyTuple_GET_ITEM(info, 2);
    v->kind = PyTuple_GET_ITEM(info, 3);
    v->ident = PyTuple_GET_ITEM(thread, 0);
    v->serial = PyTuple_GET_ITEM(thread, 2);
}

/* The same for an Event getEvents() or the loader built, its duration
 * an int64 (inline: per event): 1, with v->d.small; 0 for any other event
 * (ft_rp_read_event's).  v then holds no reference: nothing to clear. */
static inline int
ft_rp_read_recorded(pass *p, PyObject *ev, view *v)
{
    PyObject *info, *thread;
    if (ft_event_parts(p->state, ev, &info, &thread, &v->e) < 0
        || thread == NULL
        || __builtin_sub_overflow(v->e.end_ns, v->e.start_ns, &v->d.small)) {
        return 0;
    }
    v->have_numbers = v->small_parent = 1;
    /* The values are read only where the cache misses (ft_rp_view_fill). */
    v->info = info;
    v->thread = thread;
    return 1;
}

/* A recorded Event's values read from its tuples (again: the same). */
static inline void
ft_rp_view_fill(view *v)
{
    if (v->thread != NULL) {
        ft_rp_view_parts(v, v->info, v->thread);
    }
}

static inline void
ft_rp_view_clear(view *v)
{
    Py_XDECREF(v->values);
    Py_XDECREF(v->d.big);
}
/* v->d = end - start (TypeError naming the event if no int): 0, or -1. */
int ft_rp_duration_slow(pass *p, Py_ssize_t i, view *v);

/* The same, inline (rec: ft_rp_read_recorded's v, its duration read). */
static inline int
ft_rp_duration(pass *p, Py_ssize_t i, view *v, int rec)
{
    if (rec) {
        return 0;
    }
    if (v->have_numbers
        && !__builtin_sub_overflow(v->e.end_ns, v->e.start_ns, &v->d.small)) {
        return 0;
    }
    return ft_rp_duration_slow(p, i, v);
}
/* The event's thread (*key its thread key, borrowed): its index, or -1
 * with an exception. */
int64_t ft_rp_thread_of(pass *p, view *v, PyObject **key);
/* TypeError naming event i: its name and filename must be str; -1. */
int ft_rp_not_str(pass *p, Py_ssize_t i);
/* The event's function by value: its index, or -1 with an exception. */
int64_t ft_rp_func_by_value(pass *p, Py_ssize_t i, view *v, PyObject *tkey,
                            int64_t thread, int check_str);
/* The function of a recorded Event by its shared tuples (the same pair,
 * the same function), or -1 where not known so. */
static inline int64_t
ft_rp_cached_func(pass *p, const view *v)
{
    if (v->thread == NULL) {
        return -1;
    }
    ft_key_slot *s = ft_keys_find(&p->infos, (uintptr_t)v->info);
    if (s->value < 0 || p->cache[s->value].thread != v->thread) {
        return -1;
    }
    return p->cache[s->value].func;
}
/* Remembers func as the function of the Event's tuples: 0, or -1. */
int ft_rp_remember(pass *p, const view *v, int64_t func);
/* A TypeError or ValueError that named no event: where an event is not
 * 14 values, a TypeError naming the first such one instead. */
void ft_rp_unpack_error(PyObject *events);

#endif
