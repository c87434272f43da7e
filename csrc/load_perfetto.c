/* The loader's reader of .pftrace, _load_perfetto(): the subset of
 * Perfetto's protobuf trace that export_perfetto.c writes, decoded into
 * Events with no protobuf library.  The file is hostile until read: every
 * varint is at most 10 bytes, every length within its message, every iid
 * dense (at most one past those interned so far), every slice begun before
 * it ends; fields this does not read are skipped as protobuf says (groups,
 * which no frametrace file has, are refused).  Anything else raises
 * ValueError "NAME: packet N: what was wrong".
 *
 * What is read: sequence 1 first (clock snapshots, track descriptors,
 * frametrace's metadata in a ChromeMetadata "frametrace" as JSON, the
 * session's tracks' slices), then each thread's sequence whole, one after
 * the other: its first packet clears its state and sets its default track
 * and its incremental clock, then interned names, source locations and
 * categories and SLICE_BEGIN/SLICE_END pairs, nested.  Before the first
 * thread's packet, on_header(metadata, process, threads, tracks) says each
 * thread track's (thread_id, native_thread_id, thread_serial).  A slice
 * named by iid is a Python or C call (category "c"), its open flags as
 * debug annotations; one named inline another tool's slice. */
#include "load_perfetto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { CLOCK_MONOTONIC_ID = 3, SEQ_CLEARED = 1 };
/* Far beyond any frametrace thread's functions (and below int overflow). */
#define MAX_IID ((uint64_t)1 << 28)

/* A sequence's interned data: PyObject * per iid (strong, or NULL). */
typedef struct {
    PyObject **items;
    size_t cap;
} table_t;

static void
table_clear(table_t *t)
{
    for (size_t i = 0; i < t->cap; i++) {
        Py_CLEAR(t->items[i]);
    }
}

static void
table_free(table_t *t)
{
    table_clear(t);
    PyMem_Free(t->items);
    t->items = NULL;
    t->cap = 0;
}

/* Stores value (stolen) at iid; -1 with an exception. */
static int
table_put(table_t *t, uint64_t iid, PyObject *value)
{
    if (iid >= t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap <= iid) {
            cap *= 2;
        }
        PyObject **grown = PyMem_Realloc(t->items, cap * sizeof(PyObject *));
        if (grown == NULL) {
            Py_DECREF(value);
            PyErr_NoMemory();
            return -1;
        }
        memset(grown + t->cap, 0, (cap - t->cap) * sizeof(PyObject *));
        t->items = grown;
        t->cap = cap;
    }
    Py_XSETREF(t->items[iid], value);
    return 0;
}

static PyObject *
table_get(const table_t *t, uint64_t iid)
{
    return iid < t->cap ? t->items[iid] : NULL;
}

/* An open slice of a thread's sequence. */
typedef struct {
    int64_t start;
    Py_ssize_t index;    /* in calls, or in slices (is_slice) */
    Py_ssize_t parent;   /* the innermost open call, or -1 */
    uint32_t depth;      /* open calls below */
    uint32_t func;       /* name iid (calls) */
    uint8_t is_slice, oas, oast, oal;
} open_t;

typedef struct {
    ft_state *state;
    PyObject *calls;      /* list of Events */
    PyObject *slices;     /* [[track uuid, name, category, start, end]] */
    /* sequence 1 */
    PyObject *meta;       /* bytes or NULL */
    PyObject *process;    /* (pid, name or None) or NULL */
    PyObject *threads;    /* [(uuid, pid, tid, name or None)] */
    PyObject *tracks;     /* [(uuid, name or None)] */
    PyObject *thread_of;  /* on_header's {uuid: 3-tuple} */
    table_t categories1;
    int64_t open1_start;
    uint64_t open1_track;
    PyObject *open1_name, *open1_cat;
    int header_done;
    int ended;            /* the count packet was read */
    uint64_t count;       /* the calls it says the file holds */
    /* the current thread's sequence */
    uint64_t seq, last_seq;
    uint64_t n_interned;
    table_t names, files, lines, categories, infos;
    PyObject *thread;     /* its 3-tuple (borrowed from thread_of) */
    uint64_t track;
    int64_t clock, offset;
    open_t *stack;
    size_t depth, cap;
    uint32_t calls_open;
    int64_t max_end;
    PyObject *seen_tracks;  /* set of thread track uuids given a sequence */
} reader_t;

/* iid is dense: at most one past the entries interned on the sequence. */
static int
check_iid(reader_t *r, uint64_t iid, why_t *why)
{
    if (iid > r->n_interned + 1 || iid >= MAX_IID) {
        return bad(why, "an iid past those interned");
    }
    r->n_interned++;
    return 0;
}

/* InternedData of a thread's sequence (categories only on sequence 1). */
static int
read_interned(reader_t *r, buf_t b, int on_seq1, why_t *why)
{
    field_t f;
    int rc;
    while ((rc = next_field(&b, &f, why)) > 0) {
        if (f.num != 1 && f.num != 2 && f.num != 4) {
            continue;
        }
        if (expect(&f, WT_LEN, why) < 0) {
            return -1;
        }
        if (on_seq1 && f.num != 1) {
            return bad(why, "interned names on sequence 1");
        }
        uint64_t iid;
        if (f.num == 4) {
            /* SourceLocation: file_name 2, function_name 3, line 4. */
            buf_t s = f.sub, file = {NULL, NULL};
            field_t g;
            uint64_t line = 0;
            iid = 0;
            while ((rc = next_field(&s, &g, why)) > 0) {
                if (g.num == 1 || g.num == 4) {
                    if (expect(&g, WT_VARINT, why) < 0) {
                        return -1;
                    }
                    *(g.num == 1 ? &iid : &line) = g.v;
                }
                else if (g.num == 2) {
                    if (expect(&g, WT_LEN, why) < 0) {
                        return -1;
                    }
                    file = g.sub;
                }
            }
            if (rc < 0) {
                return -1;
            }
            if (iid == 0 || file.p == NULL || line > INT32_MAX) {
                return bad(why, "a source location without iid, file or "
                           "a line number");
            }
            if (check_iid(r, iid, why) < 0) {
                return -1;
            }
            PyObject *fname = str_of(&file);
            if (fname == NULL || table_put(&r->files, iid, fname) < 0) {
                return -1;
            }
            PyObject *lineno = PyLong_FromUnsignedLongLong(line);
            if (lineno == NULL || table_put(&r->lines, iid, lineno) < 0) {
                return -1;
            }
            continue;
        }
        buf_t name;
        if (ft_pf_interned_entry(f.sub, &iid, &name, why) < 0) {
            return -1;
        }
        /* Sequence 1 interns "range" and "step" only, as 1 and 2. */
        if (on_seq1 ? iid > 2 && bad(why, "an iid past those interned")
                    : check_iid(r, iid, why) < 0) {
            return -1;
        }
        PyObject *s = str_of(&name);
        if (s == NULL) {
            return -1;
        }
        table_t *t = f.num == 2 ? &r->names
                     : on_seq1 ? &r->categories1 : &r->categories;
        if (table_put(t, iid, s) < 0) {
            return -1;
        }
    }
    return rc;
}

static PyObject *
str_or_none(const buf_t *s)
{
    return s->p != NULL ? str_of(s) : Py_NewRef(Py_None);
}

static int
read_track_descriptor(reader_t *r, buf_t b, why_t *why)
{
    field_t f;
    int rc;
    uint64_t uuid = 0, pid = 0, tid = 0;
    int has_uuid = 0, has_process = 0, has_thread = 0;
    buf_t name = {NULL, NULL}, pname = {NULL, NULL}, tname = {NULL, NULL};
    while ((rc = next_field(&b, &f, why)) > 0) {
        if (f.num == 1 || f.num == 5) {
            if (expect(&f, WT_VARINT, why) < 0) {
                return -1;
            }
            if (f.num == 1) {
                uuid = f.v;
                has_uuid = 1;
            }
        }
        else if (f.num == 2 || f.num == 3 || f.num == 4) {
            if (expect(&f, WT_LEN, why) < 0) {
                return -1;
            }
            if (f.num == 2) {
                name = f.sub;
            }
            else if (f.num == 3) {
                has_process = 1;
                if (ft_pf_read_desc(f.sub, &pid, NULL, &pname, 6, why) < 0) {
                    return -1;
                }
            }
            else {
                has_thread = 1;
                if (ft_pf_read_desc(f.sub, &pid, &tid, &tname, 5, why) < 0) {
                    return -1;
                }
            }
        }
    }
    if (rc < 0) {
        return -1;
    }
    if (!has_uuid || (has_process && has_thread)) {
        return bad(why, "a track descriptor without uuid, or of both a "
                   "process and a thread");
    }
    if (pid > INT64_MAX || tid > INT64_MAX) {
        return bad(why, "a pid or tid out of range");
    }
    PyObject *item;
    if (has_process) {
        if (r->process != NULL) {
            return bad(why, "a second process descriptor");
        }
        PyObject *pn = str_or_none(&pname);
        if (pn == NULL) {
            return -1;
        }
        r->process = Py_BuildValue("(KN)", (unsigned long long)pid, pn);
        return r->process == NULL ? -1 : 0;
    }
    if (has_thread) {
        PyObject *tn = str_or_none(&tname);
        item = tn == NULL ? NULL
            : Py_BuildValue("(KKKN)", (unsigned long long)uuid,
                            (unsigned long long)pid, (unsigned long long)tid,
                            tn);
        rc = item == NULL ? -1 : PyList_Append(r->threads, item);
    }
    else {
        PyObject *n = str_or_none(&name);
        item = n == NULL ? NULL
            : Py_BuildValue("(KN)", (unsigned long long)uuid, n);
        rc = item == NULL ? -1 : PyList_Append(r->tracks, item);
    }
    Py_XDECREF(item);
    return rc;
}

/* A ChromeEventBundle: frametrace's metadata, if it holds it. */
static int
read_chrome_bundle(reader_t *r, buf_t b, why_t *why)
{
    field_t f;
    int rc;
    while ((rc = next_field(&b, &f, why)) > 0) {
        if (f.num != 2) {
            continue;
        }
        if (expect(&f, WT_LEN, why) < 0) {
            return -1;
        }
        buf_t s = f.sub, name = {NULL, NULL}, json = {NULL, NULL};
        field_t g;
        uint64_t count = 0;
        int has_count = 0;
        while ((rc = next_field(&s, &g, why)) > 0) {
            if (g.num == 4) {
                if (expect(&g, WT_VARINT, why) < 0) {
                    return -1;
                }
                count = g.v;
                has_count = 1;
            }
            else if (g.num == 1 || g.num == 5) {
                if (expect(&g, WT_LEN, why) < 0) {
                    return -1;
                }
                *(g.num == 1 ? &name : &json) = g.sub;
            }
        }
        if (rc < 0) {
            return -1;
        }
        if (name.p != NULL && name.end - name.p == 16
            && memcmp(name.p, "frametrace_calls", 16) == 0) {
            if (r->ended || !has_count) {
                return bad(why, "a second or empty end of trace");
            }
            r->ended = 1;
            r->count = count;
        }
        else if (name.p != NULL && name.end - name.p == 10
            && memcmp(name.p, "frametrace", 10) == 0 && json.p != NULL) {
            if (r->meta != NULL) {
                return bad(why, "frametrace's metadata twice");
            }
            r->meta = PyBytes_FromStringAndSize((const char *)json.p,
                                                json.end - json.p);
            if (r->meta == NULL) {
                return -1;
            }
        }
    }
    return rc;
}

/* A timestamp as int64 ns >= 0. */
static int
as_time(uint64_t v, int64_t *out, why_t *why)
{
    if (v > INT64_MAX) {
        return bad(why, "a timestamp out of the int64 range");
    }
    *out = (int64_t)v;
    return 0;
}

/* A session track's slice on sequence 1 (begun and ended in turn). */
static int
seq1_slice(reader_t *r, const track_event_t *te, uint64_t ts, int has_ts,
           why_t *why)
{
    int64_t t;
    if (!has_ts || !te->has_track || as_time(ts, &t, why) < 0) {
        return why->err ? -1 : bad(why, "a slice without time or track");
    }
    if (te->type == SLICE_BEGIN) {
        if (r->open1_name != NULL) {
            return bad(why, "a session track's slice begun inside another");
        }
        PyObject *cat;
        if (te->cat.p != NULL) {
            cat = str_of(&te->cat);
        }
        else {
            cat = te->has_cat_iid ? table_get(&r->categories1, te->cat_iid)
                                  : NULL;
            if (cat == NULL) {
                return bad(why, "a slice of a category not interned");
            }
            Py_INCREF(cat);
        }
        if (cat == NULL) {
            return -1;
        }
        r->open1_cat = cat;
        r->open1_name = te->name.p != NULL ? str_of(&te->name) : NULL;
        if (r->open1_name == NULL) {
            return PyErr_Occurred() ? -1 : bad(why, "a slice without name");
        }
        r->open1_start = t;
        r->open1_track = te->track;
        return 0;
    }
    if (r->open1_name == NULL || te->track != r->open1_track
        || t < r->open1_start) {
        return bad(why, "a slice ends that did not begin there");
    }
    PyObject *item = Py_BuildValue("[KNNLL]", (unsigned long long)te->track,
                                   r->open1_name, r->open1_cat,
                                   (long long)r->open1_start, (long long)t);
    r->open1_name = r->open1_cat = NULL;
    if (item == NULL) {
        return -1;
    }
    int rc = PyList_Append(r->slices, item);
    Py_DECREF(item);
    return rc;
}

/* The end of a thread's sequence: every slice ended. */
static int
end_sequence(reader_t *r, why_t *why)
{
    if (r->depth) {
        return bad(why, "truncated: a thread's slices never end");
    }
    table_clear(&r->names);
    table_clear(&r->files);
    table_clear(&r->lines);
    table_clear(&r->categories);
    table_clear(&r->infos);
    r->n_interned = 0;
    r->seq = 0;
    return 0;
}

static int
call_header(reader_t *r, PyObject *on_header, why_t *why)
{
    r->header_done = 1;
    if (r->open1_name != NULL) {
        return bad(why, "a session track's slice never ends");
    }
    PyObject *res = PyObject_CallFunction(
        on_header, "OOOO", r->meta ? r->meta : Py_None,
        r->process ? r->process : Py_None, r->threads, r->tracks);
    if (res == NULL) {
        return -1;
    }
    if (!PyDict_Check(res)) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_TypeError, "on_header() must return a dict");
        return -1;
    }
    r->thread_of = res;
    return 0;
}

/* The first packet of a thread's sequence. */
static int
begin_sequence(reader_t *r, uint64_t seq, uint64_t flags, int has_snapshot,
               const snap_clock_t *clocks, int nclocks, int has_defaults,
               uint64_t clock_id, uint64_t track, why_t *why)
{
    if (seq <= r->last_seq) {
        return bad(why, "a sequence's packets after another sequence's "
                   "(not frametrace's layout)");
    }
    if (!(flags & SEQ_CLEARED) || !has_snapshot || !has_defaults
        || track == 0) {
        return bad(why, "a thread's sequence that does not begin with its "
                   "clock, default track and cleared state");
    }
    int64_t inc = -1, mono = -1;
    for (int i = 0; i < nclocks; i++) {
        if (clocks[i].id == clock_id && clocks[i].incremental) {
            if (as_time(clocks[i].ts, &inc, why) < 0) {
                return -1;
            }
        }
        else if (clocks[i].id == CLOCK_MONOTONIC_ID) {
            if (as_time(clocks[i].ts, &mono, why) < 0) {
                return -1;
            }
        }
    }
    if (inc < 0 || mono < 0) {
        return bad(why, "a thread's clock not related to CLOCK_MONOTONIC");
    }
    PyObject *key = PyLong_FromUnsignedLongLong(track);
    if (key == NULL) {
        return -1;
    }
    PyObject *thread = PyDict_GetItemWithError(r->thread_of, key);
    int seen = thread == NULL ? 0 : PySet_Contains(r->seen_tracks, key);
    if (seen == 0 && thread != NULL) {
        seen = PySet_Add(r->seen_tracks, key) < 0 ? -1 : 0;
    }
    Py_DECREF(key);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (thread == NULL || seen) {
        return bad(why, "a sequence on a track that is no thread's, or a "
                   "second sequence on one");
    }
    if (!PyTuple_CheckExact(thread) || PyTuple_GET_SIZE(thread) != 3) {
        PyErr_SetString(PyExc_TypeError, "on_header() maps track uuids to "
                        "3-tuples");
        return -1;
    }
    r->thread = thread;
    r->track = track;
    r->seq = r->last_seq = seq;
    r->clock = inc;
    r->offset = mono - inc;
    return 0;
}

/* The (name, filename, lineno, kind) of a call named name_iid. */
static PyObject *
call_info(reader_t *r, const track_event_t *te, why_t *why)
{
    PyObject *info = table_get(&r->infos, te->name_iid);
    if (info != NULL) {
        return info;
    }
    PyObject *name = table_get(&r->names, te->name_iid);
    if (name == NULL) {
        bad(why, "a slice named by an iid not interned");
        return NULL;
    }
    PyObject *cat = te->has_cat_iid ? table_get(&r->categories, te->cat_iid)
                                    : NULL;
    int is_c = cat != NULL && PyUnicode_CompareWithASCIIString(cat, "c") == 0;
    PyObject *file, *line;
    if (is_c) {
        file = r->state->str_builtin;
        line = NULL;
    }
    else {
        file = table_get(&r->files, te->loc_iid);
        line = table_get(&r->lines, te->loc_iid);
        if (te->loc_iid != te->name_iid || file == NULL || line == NULL) {
            bad(why, "a Python call without its source location");
            return NULL;
        }
    }
    int lineno = line != NULL ? (int)PyLong_AsLong(line) : 0;
    info = ft_event_info(r->state, name, file, lineno, is_c);
    if (info == NULL || table_put(&r->infos, te->name_iid, info) < 0) {
        return NULL;
    }
    return info;
}

static int
thread_slice(reader_t *r, const track_event_t *te, uint64_t ts, int has_ts,
             why_t *why)
{
    if (!has_ts) {
        return bad(why, "a slice without time");
    }
    if (te->has_track && te->track != r->track) {
        return bad(why, "a thread's slice on another track");
    }
    /* The clock counts ns from packet to packet, as int64 deltas. */
    int64_t t = (int64_t)((uint64_t)r->clock + ts);
    if (t < 0 || (t > 0 && r->offset > INT64_MAX - t) || t + r->offset < 0) {
        return bad(why, "a time out of the int64 range");
    }
    r->clock = t;
    t += r->offset;
    if (te->type == SLICE_END) {
        if (r->depth == 0) {
            return bad(why, "a slice ends that never began");
        }
        open_t *o = &r->stack[--r->depth];
        if (t < o->start) {
            return bad(why, "a slice ends before it begins");
        }
        if (o->is_slice) {
            PyObject *end = PyLong_FromLongLong(t);
            return end == NULL ? -1
                : PyList_SetItem(PyList_GET_ITEM(r->slices, o->index), 4, end);
        }
        r->calls_open--;
        ft_event ev = {0};
        ev.start_ns = o->start;
        ev.end_ns = t;
        ev.parent = o->parent;
        ev.depth = o->depth;
        ev.open_at_start = o->oas;
        ev.open_at_stop = o->oast;
        ev.open_at_loss = o->oal;
        PyObject *info = table_get(&r->infos, o->func);
        ev.is_c = PyUnicode_CompareWithASCIIString(
            PyTuple_GET_ITEM(info, 3), "c") == 0;
        PyObject *event = ft_event_from_record(r->state->event_type, info,
                                               r->thread, &ev);
        if (event == NULL) {
            return -1;
        }
        if (t > r->max_end) {
            r->max_end = t;
        }
        return PyList_SetItem(r->calls, o->index, event);
    }
    if (r->depth == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        open_t *grown = PyMem_Realloc(r->stack, cap * sizeof(open_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->stack = grown;
        r->cap = cap;
    }
    open_t *o = &r->stack[r->depth];
    memset(o, 0, sizeof(*o));
    o->start = t;
    /* The innermost open call (another tool's slices are not parents). */
    o->parent = -1;
    for (size_t i = r->depth; i > 0; i--) {
        if (!r->stack[i - 1].is_slice) {
            o->parent = r->stack[i - 1].index;
            break;
        }
    }
    if (te->name_iid) {
        if (call_info(r, te, why) == NULL) {
            return -1;
        }
        o->func = (uint32_t)te->name_iid;
        o->depth = r->calls_open++;
        o->oas = te->oas;
        o->oast = te->oast;
        o->oal = te->oal;
        o->index = PyList_GET_SIZE(r->calls);
        if (PyList_Append(r->calls, Py_None) < 0) {
            return -1;
        }
    }
    else {
        if (te->name.p == NULL || te->cat.p == NULL) {
            return bad(why, "a slice without a name or category");
        }
        o->is_slice = 1;
        o->index = PyList_GET_SIZE(r->slices);
        PyObject *item = Py_BuildValue("[KNNLO]", (unsigned long long)r->track,
                                       str_of(&te->name), str_of(&te->cat),
                                       (long long)t, Py_None);
        if (item == NULL || PyList_Append(r->slices, item) < 0) {
            Py_XDECREF(item);
            return -1;
        }
        Py_DECREF(item);
    }
    r->depth++;
    return 0;
}

static int
read_packet(reader_t *r, buf_t b, PyObject *on_header, why_t *why)
{
    field_t f;
    int rc;
    uint64_t ts = 0, seq = 0, flags = 0, clock_id = 0, track = 0;
    int has_ts = 0, has_snapshot = 0, has_defaults = 0, nclocks = 0;
    buf_t event = {NULL, NULL}, interned = {NULL, NULL};
    buf_t descriptor = {NULL, NULL}, chrome = {NULL, NULL};
    snap_clock_t clocks[4];
    while ((rc = next_field(&b, &f, why)) > 0) {
        switch (f.num) {
        case 8: case 10: case 13:
            if (expect(&f, WT_VARINT, why) < 0) {
                return -1;
            }
            if (f.num == 8) {
                ts = f.v;
                has_ts = 1;
            }
            else {
                *(f.num == 10 ? &seq : &flags) = f.v;
            }
            break;
        case 5: case 6: case 11: case 12: case 59: case 60:
            if (expect(&f, WT_LEN, why) < 0) {
                return -1;
            }
            if (f.num == 6) {
                has_snapshot = 1;
                if (ft_pf_read_snapshot(f.sub, clocks, &nclocks, why) < 0) {
                    return -1;
                }
            }
            else if (f.num == 59) {
                has_defaults = 1;
                if (ft_pf_read_defaults(f.sub, &clock_id, &track, why) < 0) {
                    return -1;
                }
            }
            else {
                buf_t *slot = f.num == 5 ? &chrome : f.num == 11 ? &event
                              : f.num == 12 ? &interned : &descriptor;
                if (slot->p != NULL) {
                    return bad(why, "a field twice in a packet");
                }
                *slot = f.sub;
            }
            break;
        default:
            break;
        }
    }
    if (rc < 0) {
        return -1;
    }
    if (seq == 0) {
        return bad(why, "a packet of no sequence");
    }
    if (r->ended) {
        return bad(why, "a packet after the end of the trace");
    }
    if (seq == 1) {
        if (r->header_done) {
            /* The end: the last thread's sequence done, then the count. */
            if (chrome.p == NULL || event.p != NULL || descriptor.p != NULL
                || interned.p != NULL || read_chrome_bundle(r, chrome, why) < 0
                || !r->ended) {
                return why->err ? -1 : bad(why, "sequence 1 after the "
                                           "threads' (not frametrace's "
                                           "layout)");
            }
            return r->seq != 0 ? end_sequence(r, why) : 0;
        }
        if (has_defaults && clock_id != CLOCK_MONOTONIC_ID) {
            return bad(why, "sequence 1's timestamps not on CLOCK_MONOTONIC");
        }
        if ((chrome.p && read_chrome_bundle(r, chrome, why) < 0)
            || (descriptor.p && read_track_descriptor(r, descriptor, why) < 0)
            || (interned.p && read_interned(r, interned, 1, why) < 0)) {
            return -1;
        }
        if (event.p != NULL) {
            track_event_t te;
            if (ft_pf_read_track_event(event, &te, why) < 0
                || seq1_slice(r, &te, ts, has_ts, why) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (!r->header_done && call_header(r, on_header, why) < 0) {
        return -1;
    }
    if (descriptor.p != NULL || chrome.p != NULL) {
        return bad(why, "a track descriptor or metadata on a thread's "
                   "sequence");
    }
    if (seq != r->seq) {
        if (r->seq != 0 && end_sequence(r, why) < 0) {
            return -1;
        }
        if (begin_sequence(r, seq, flags, has_snapshot, clocks, nclocks,
                           has_defaults, clock_id, track, why) < 0) {
            return -1;
        }
        if (has_ts) {
            return bad(why, "a timestamp on a sequence's first packet");
        }
    }
    else if (flags & SEQ_CLEARED || has_snapshot || has_defaults) {
        return bad(why, "a thread's sequence cleared or re-clocked midway "
                   "(not frametrace's layout)");
    }
    /* Interned data first: the packet's own event may use it. */
    if (interned.p && read_interned(r, interned, 0, why) < 0) {
        return -1;
    }
    if (event.p != NULL) {
        track_event_t te;
        if (ft_pf_read_track_event(event, &te, why) < 0
            || thread_slice(r, &te, ts, has_ts, why) < 0) {
            return -1;
        }
    }
    return 0;
}

static void
reader_free(reader_t *r)
{
    Py_XDECREF(r->meta);
    Py_XDECREF(r->process);
    Py_XDECREF(r->threads);
    Py_XDECREF(r->tracks);
    Py_XDECREF(r->thread_of);
    Py_XDECREF(r->slices);
    Py_XDECREF(r->seen_tracks);
    Py_XDECREF(r->open1_name);
    Py_XDECREF(r->open1_cat);
    table_free(&r->categories1);
    table_free(&r->names);
    table_free(&r->files);
    table_free(&r->lines);
    table_free(&r->categories);
    table_free(&r->infos);
    PyMem_Free(r->stack);
}

/* _load_perfetto(data, name, calls, on_header) -> (slices, max_end). */
static PyObject *
load_perfetto(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyUnicode_Check(args[1])
        || !PyList_Check(args[2]) || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "_load_perfetto(bytes, str, list, "
                        "callable)");
        return NULL;
    }
    PyObject *data = args[0], *name = args[1], *on_header = args[3];
    reader_t r = {0};
    r.state = ft_get_state(module);
    r.calls = args[2];
    r.max_end = INT64_MIN;
    r.slices = PyList_New(0);
    r.threads = PyList_New(0);
    r.tracks = PyList_New(0);
    r.seen_tracks = PySet_New(NULL);
    PyObject *result = NULL;
    why_t why = {0};
    Py_ssize_t packet = 0;
    const uint8_t *start = (const uint8_t *)PyBytes_AS_STRING(data);
    buf_t b = {start, start + PyBytes_GET_SIZE(data)};
    const uint8_t *at = b.p;
    if (r.slices == NULL || r.threads == NULL || r.tracks == NULL
        || r.seen_tracks == NULL) {
        goto done;
    }
    Py_INCREF(data);  /* on_header's code cannot free it */
    field_t f;
    int rc;
    if (b.p == b.end || *b.p != ((1 << 3) | WT_LEN)) {
        why.err = "not a Perfetto trace (no TracePacket first)";
    }
    while (why.err == NULL && (at = b.p, rc = next_field(&b, &f, &why)) > 0) {
        if (f.num != 1) {
            continue;
        }
        if (expect(&f, WT_LEN, &why) < 0
            || read_packet(&r, f.sub, on_header, &why) < 0) {
            break;
        }
        packet++;
    }
    if (why.err == NULL && !PyErr_Occurred()) {
        at = b.p;
        if (!r.header_done) {
            call_header(&r, on_header, &why);
        }
        if (why.err == NULL && !PyErr_Occurred() && r.meta != NULL) {
            if (!r.ended) {
                why.err = "truncated: no end of trace (its count of calls)";
            }
            else if (r.count != (uint64_t)PyList_GET_SIZE(r.calls)
                     || PySet_GET_SIZE(r.seen_tracks)
                        != PyList_GET_SIZE(r.threads)) {
                why.err = "truncated: fewer calls or threads than it says";
            }
        }
    }
    Py_DECREF(data);
    if (why.err != NULL && !PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError, "%U: packet %zd (byte %zd): %s", name,
                     packet, (Py_ssize_t)(at - start), why.err);
    }
    if (!PyErr_Occurred()) {
        result = Py_BuildValue("(OL)", r.slices, (long long)r.max_end);
    }
done:
    reader_free(&r);
    return result;
}

PyMethodDef ft_load_perfetto_def = {
    "_load_perfetto", (PyCFunction)(void (*)(void))load_perfetto,
    METH_FASTCALL,
    "_load_perfetto($module, data, name, calls, on_header, /)\n--\n\n"
    "For frametrace.loader: decodes data, a .pftrace frametrace wrote\n"
    "(name: the file, for errors), appending its Python/C calls to calls\n"
    "as Events.  Before the first thread's packet it calls\n"
    "on_header(metadata JSON bytes or None, (pid, process name) or None,\n"
    "[(uuid, pid, tid, name)] of the thread tracks, [(uuid, name)] of the\n"
    "others), which returns {thread track uuid: (thread_id,\n"
    "native_thread_id, thread_serial)}.  Returns ([[track uuid, name,\n"
    "category, start_ns, end_ns]] of the slices that are no call, the\n"
    "latest end of a call).",
};
