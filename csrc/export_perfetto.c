/* Perfetto's native protobuf trace (.pftrace): TracePackets with
 * TrackEvents, hand-encoded (no protobuf library at run time), written
 * straight from the replayed records.
 *
 * Sequence 1 holds the track descriptors (a track per process and per
 * thread, and for a session's ranges and steps) and the session's spans.
 * Each thread's events are a sequence of their own, whose first packet
 * clears the incremental state, interns every category, name and source
 * location, and makes the thread's track the default one, so that events
 * carry no track uuid; then each event is a SLICE_BEGIN/SLICE_END pair, in
 * an order that keeps slices nested.  The threads are replayed one at a
 * time, straight into the file, with the GIL released.  Only C events carry a category
 * ("c"): Python ones have a source location instead. */
#include "state.h"
#include "export_out.h"

#include <stdlib.h>
#include <string.h>

/* Field numbers, from Perfetto's protos/perfetto/trace. */
enum {
    TRACE_PACKET = 1,
    PKT_TIMESTAMP = 8,
    PKT_SEQUENCE_ID = 10,
    PKT_TRACK_EVENT = 11,
    PKT_INTERNED_DATA = 12,
    PKT_SEQUENCE_FLAGS = 13,
    PKT_TRACK_DESCRIPTOR = 60,
    PKT_DEFAULTS = 59,
    DEFAULTS_TRACK_EVENT = 11,
    TED_TRACK_UUID = 11,
    TE_CATEGORY_IIDS = 3,
    TE_TYPE = 9,
    TE_NAME_IID = 10,
    TE_TRACK_UUID = 11,
    TE_NAME = 23,
    TE_SOURCE_LOCATION_IID = 34,
    ID_EVENT_CATEGORIES = 1,
    ID_EVENT_NAMES = 2,
    ID_SOURCE_LOCATIONS = 4,
    TD_UUID = 1,
    TD_NAME = 2,
    TD_PROCESS = 3,
    TD_THREAD = 4,
    TD_PARENT_UUID = 5,
    PD_PID = 1,
    PD_PROCESS_NAME = 6,
    THD_PID = 1,
    THD_TID = 2,
    THD_THREAD_NAME = 5,
    SL_IID = 1,
    SL_FILE_NAME = 2,
    SL_FUNCTION_NAME = 3,
    SL_LINE_NUMBER = 4,
};
enum { SLICE_BEGIN = 1, SLICE_END = 2 };
enum { SEQ_INCREMENTAL_STATE_CLEARED = 1, SEQ_NEEDS_INCREMENTAL_STATE = 2 };
enum { WT_VARINT = 0, WT_LEN = 2 };
enum { CATEGORY_PYTHON = 1, CATEGORY_C = 2, CATEGORY_RANGE = 3, CATEGORY_STEP = 4 };
/* "python" is interned for viewers; Python events carry no category. */

#define SEQUENCE_ID 1
#define PROCESS_UUID 1
#define FIRST_THREAD_UUID 16

/* A growable byte buffer for messages built before their length is known. */
typedef struct {
    uint8_t *p;
    size_t len;
    size_t cap;
    int failed;
} pb_t;

static void
pb_reserve(pb_t *b, size_t extra)
{
    if (b->failed || b->len + extra <= b->cap) {
        return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) {
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (p == NULL) {
        b->failed = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static inline size_t
varint_to(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static void
pb_varint(pb_t *b, uint32_t field, uint64_t v)
{
    pb_reserve(b, 20);
    if (!b->failed) {
        b->len += varint_to(b->p + b->len, ((uint64_t)field << 3) | WT_VARINT);
        b->len += varint_to(b->p + b->len, v);
    }
}

static void
pb_bytes(pb_t *b, uint32_t field, const void *data, size_t n)
{
    pb_reserve(b, n + 20);
    if (!b->failed) {
        b->len += varint_to(b->p + b->len, ((uint64_t)field << 3) | WT_LEN);
        b->len += varint_to(b->p + b->len, n);
        memcpy(b->p + b->len, data, n);
        b->len += n;
    }
}

static void
pb_message(pb_t *b, uint32_t field, const pb_t *msg)
{
    if (msg->failed) {
        b->failed = 1;
        return;
    }
    pb_bytes(b, field, msg->p, msg->len);
}

static int
pb_str(pb_t *b, uint32_t field, PyObject *s)
{
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &n);
    if (utf8 == NULL) {
        PyErr_Clear();  /* lone surrogates: keep going with a placeholder */
        utf8 = "?";
        n = 1;
    }
    pb_bytes(b, field, utf8, (size_t)n);
    return 0;
}

/* Emits msg as one TracePacket of the trace. */
static void
emit_packet(out_t *out, const pb_t *pkt)
{
    uint8_t head[16];
    size_t n = varint_to(head, ((uint64_t)TRACE_PACKET << 3) | WT_LEN);
    n += varint_to(head + n, pkt->len);
    out_bytes(out, (const char *)head, n);
    out_bytes(out, (const char *)pkt->p, pkt->len);
}

/* A slice packet, encoded in place: the hot loop of the writer.  track 0:
 * the sequence's default track; category and location 0: none. */
static inline void
emit_slice(out_t *out, int type, uint64_t ts, uint64_t sequence,
           uint64_t track, uint64_t name_iid, uint64_t category,
           uint64_t location_iid)
{
    uint8_t ev[48], pkt[80], head[8];
    size_t e = 0, p = 0, h = 0;
    e += varint_to(ev + e, ((uint64_t)TE_TYPE << 3) | WT_VARINT);
    e += varint_to(ev + e, (uint64_t)type);
    if (track) {
        e += varint_to(ev + e, ((uint64_t)TE_TRACK_UUID << 3) | WT_VARINT);
        e += varint_to(ev + e, track);
    }
    if (type == SLICE_BEGIN) {
        if (category) {
            e += varint_to(ev + e, ((uint64_t)TE_CATEGORY_IIDS << 3) | WT_VARINT);
            e += varint_to(ev + e, category);
        }
        e += varint_to(ev + e, ((uint64_t)TE_NAME_IID << 3) | WT_VARINT);
        e += varint_to(ev + e, name_iid);
        if (location_iid) {
            e += varint_to(ev + e, ((uint64_t)TE_SOURCE_LOCATION_IID << 3)
                                   | WT_VARINT);
            e += varint_to(ev + e, location_iid);
        }
    }
    p += varint_to(pkt + p, ((uint64_t)PKT_TIMESTAMP << 3) | WT_VARINT);
    p += varint_to(pkt + p, ts);
    p += varint_to(pkt + p, ((uint64_t)PKT_SEQUENCE_ID << 3) | WT_VARINT);
    p += varint_to(pkt + p, sequence);
    if (type == SLICE_BEGIN) {
        p += varint_to(pkt + p, ((uint64_t)PKT_SEQUENCE_FLAGS << 3) | WT_VARINT);
        p += varint_to(pkt + p, SEQ_NEEDS_INCREMENTAL_STATE);
    }
    p += varint_to(pkt + p, ((uint64_t)PKT_TRACK_EVENT << 3) | WT_LEN);
    p += varint_to(pkt + p, e);
    memcpy(pkt + p, ev, e);
    p += e;
    h += varint_to(head, ((uint64_t)TRACE_PACKET << 3) | WT_LEN);
    h += varint_to(head + h, p);
    out_bytes(out, (const char *)head, h);
    out_bytes(out, (const char *)pkt, p);
}

/* The interned data every sequence starts with: every category, and
 * every function's name and (Python) source location.  Python API (the
 * names): built once, with the GIL.  0, or -1 when out of memory. */
static int
interned_data(ft_tracer *tracer, uint32_t nfuncs, pb_t *data)
{
    static const char *categories[] = {"python", "c", "range", "step"};
    for (int i = 0; i < 4; i++) {
        pb_t cat = {0};
        pb_varint(&cat, 1, (uint64_t)i + 1);
        pb_bytes(&cat, 2, categories[i], strlen(categories[i]));
        pb_message(data, ID_EVENT_CATEGORIES, &cat);
        free(cat.p);
    }
    for (uint32_t i = 0; i < nfuncs; i++) {
        const ft_func *f = &tracer->funcs.funcs[i];
        pb_t name = {0}, loc = {0};
        pb_varint(&name, 1, (uint64_t)i + 1);
        pb_str(&name, 2, f->name);
        pb_message(data, ID_EVENT_NAMES, &name);
        if (!f->is_c) {
            pb_varint(&loc, SL_IID, (uint64_t)i + 1);
            pb_str(&loc, SL_FILE_NAME, f->filename);
            pb_str(&loc, SL_FUNCTION_NAME, f->name);
            pb_varint(&loc, SL_LINE_NUMBER, (uint64_t)(f->lineno > 0 ? f->lineno : 0));
            pb_message(data, ID_SOURCE_LOCATIONS, &loc);
        }
        free(name.p);
        free(loc.p);
    }
    return data->failed ? -1 : 0;
}

/* A sequence's first packet: clears incremental state, interns
 * everything (data), and sets the default track (0: none).  Pure C. */
static int
interned_packet(const pb_t *data, pb_t *pkt, uint64_t sequence,
                uint64_t default_track)
{
    pb_varint(pkt, PKT_SEQUENCE_ID, sequence);
    pb_varint(pkt, PKT_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
    pb_message(pkt, PKT_INTERNED_DATA, data);
    int failed = 0;
    if (default_track) {
        pb_t ted = {0}, defaults = {0};
        pb_varint(&ted, TED_TRACK_UUID, default_track);
        pb_message(&defaults, DEFAULTS_TRACK_EVENT, &ted);
        pb_message(pkt, PKT_DEFAULTS, &defaults);
        failed = ted.failed | defaults.failed;
        free(ted.p);
        free(defaults.p);
    }
    return failed || pkt->failed ? -1 : 0;
}

/* A track descriptor packet: a process (thread_id < 0), a thread, or a
 * named child track (a session's ranges or steps). */
static int
track_packet(pb_t *pkt, uint64_t uuid, uint64_t parent, long long pid,
             long long tid, PyObject *name, int is_process)
{
    pb_t td = {0}, desc = {0};
    pb_varint(&td, TD_UUID, uuid);
    if (is_process) {
        pb_varint(&desc, PD_PID, (uint64_t)pid);
        if (name != NULL) {
            pb_str(&desc, PD_PROCESS_NAME, name);
        }
        pb_message(&td, TD_PROCESS, &desc);
    }
    else {
        pb_varint(&td, TD_PARENT_UUID, parent);
        if (tid >= 0) {
            pb_varint(&desc, THD_PID, (uint64_t)pid);
            pb_varint(&desc, THD_TID, (uint64_t)tid);
            if (name != NULL) {
                pb_str(&desc, THD_THREAD_NAME, name);
            }
            pb_message(&td, TD_THREAD, &desc);
        }
        else if (name != NULL) {
            pb_str(&td, TD_NAME, name);
        }
    }
    pb_varint(pkt, PKT_SEQUENCE_ID, SEQUENCE_ID);
    pb_message(pkt, PKT_TRACK_DESCRIPTOR, &td);
    int failed = td.failed || desc.failed || pkt->failed;
    free(td.p);
    free(desc.p);
    return failed ? -1 : 0;
}

/* The session's tracks, copied out of their Python lists before anything
 * else runs: converting a value may run Python code (__index__), which must
 * not be able to free what is being read, nor the tracer's records. */
typedef struct {
    PyObject *name;  /* strong */
    int64_t start, end;
} span_t;

typedef struct {
    PyObject *name;  /* strong */
    int category;
    span_t *spans;
    Py_ssize_t nspans;
} track_t;

static void
free_tracks(track_t *tracks, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; tracks != NULL && i < n; i++) {
        for (Py_ssize_t j = 0; j < tracks[i].nspans; j++) {
            Py_XDECREF(tracks[i].spans[j].name);
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

/* A tuple of n items with a str first, copied out of item. */
static PyObject *
named_tuple_of(PyObject *item, Py_ssize_t n, const char *what)
{
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != n
        || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))) {
        PyErr_Format(PyExc_TypeError, "%s, not %.100s", what,
                     Py_TYPE(item)->tp_name);
        return NULL;
    }
    return Py_NewRef(item);
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
        PyObject *span = named_tuple_of(PyTuple_GET_ITEM(snapshot, i), 3,
                                        "a span is (name, start_ns, end_ns)");
        if (span == NULL) {
            rc = -1;
            break;
        }
        span_t *out = &track->spans[track->nspans];
        if (as_int64(PyTuple_GET_ITEM(span, 1), "a span's start_ns", &out->start) < 0
            || as_int64(PyTuple_GET_ITEM(span, 2), "a span's end_ns", &out->end) < 0) {
            rc = -1;
        }
        else {
            out->name = Py_NewRef(PyTuple_GET_ITEM(span, 0));
            track->nspans++;
        }
        Py_DECREF(span);
    }
    Py_DECREF(snapshot);
    return rc;
}

static int
parse_tracks(PyObject *list, track_t **tracks, Py_ssize_t *ntracks)
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

/* Slices of a track, named inline: there are few of them. */
static int
emit_spans(out_t *out, const track_t *track, uint64_t uuid, uint64_t category)
{
    for (Py_ssize_t i = 0; i < track->nspans; i++) {
        const span_t *span = &track->spans[i];
        pb_t ev = {0}, pkt = {0};
        pb_varint(&ev, TE_TYPE, SLICE_BEGIN);
        pb_varint(&ev, TE_TRACK_UUID, uuid);
        pb_varint(&ev, TE_CATEGORY_IIDS, category);
        pb_str(&ev, TE_NAME, span->name);
        pb_varint(&pkt, PKT_TIMESTAMP, (uint64_t)span->start);
        pb_varint(&pkt, PKT_SEQUENCE_ID, SEQUENCE_ID);
        pb_varint(&pkt, PKT_SEQUENCE_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
        pb_message(&pkt, PKT_TRACK_EVENT, &ev);
        int failed = pkt.failed;
        if (!failed) {
            emit_packet(out, &pkt);
            emit_slice(out, SLICE_END, (uint64_t)span->end, SEQUENCE_ID, uuid,
                       0, 0, 0);
        }
        free(ev.p);
        free(pkt.p);
        if (failed) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* _write_perfetto(path, *, pid, process_name, thread_names, tracks,
 *                 compress, progress, name) -- thread_names: [str or
 * None] per thread, in registration order; tracks: [(name, thread_id or
 * None, category, [(span name, start, end)])] for ranges and steps; name:
 * the path errors show (default path; the caller writes to a temporary
 * and renames it). */
PyObject *
ft_write_perfetto(ft_tracer *tracer, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "pid", "process_name", "thread_names",
                             "tracks", "compress", "progress", "name", NULL};
    PyObject *path_obj, *name_obj = NULL, *process_name = NULL, *names = NULL;
    PyObject *tracks = NULL, *progress = NULL;
    long long pid = -1;
    int compress = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|$LUO!O!pOO&:_write_perfetto",
                                     kwlist, PyUnicode_FSConverter, &path_obj,
                                     &pid, &process_name, &PyList_Type, &names,
                                     &PyList_Type, &tracks, &compress,
                                     &progress, PyUnicode_FSConverter, &name_obj)) {
        return NULL;
    }
    if (name_obj == NULL) {
        name_obj = Py_NewRef(path_obj);
    }
    ft_export ex = {0};
    ft_thread_events te = {0};
    out_t out = {0};
    pb_t pkt = {0}, data = {0};
    PyObject *result = NULL;
    size_t *stack = NULL;
    size_t stack_cap = 0;
    track_t *session_tracks = NULL;
    Py_ssize_t nsession_tracks = 0;
    PyObject **thread_names = NULL;
    Py_ssize_t nnames = 0;
    uint64_t *export_tids = NULL;
    uint32_t nfuncs = tracer->funcs.nfuncs;

    if (pid < 0 || process_name == NULL || names == NULL || tracks == NULL) {
        PyErr_SetString(PyExc_TypeError, "_write_perfetto() needs pid, "
                        "process_name, thread_names and tracks");
        goto done;
    }
    /* The names (taken before any Python code runs), then what can run
     * Python code (converting the tracks), then the tracer's records
     * pinned (a clear() before makes the pin refuse). */
    thread_names = calloc((size_t)tracer->nthreads + 1, sizeof(PyObject *));
    if (thread_names == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* One name (str or None) per thread, in registration order: threads
     * that had the same ident each have their own. */
    nnames = tracer->nthreads;
    if (PyList_GET_SIZE(names) != nnames) {
        PyErr_Format(PyExc_ValueError, "_write_perfetto(): thread_names "
                     "has %zd names for %zd threads", PyList_GET_SIZE(names),
                     nnames);
        goto done;
    }
    for (Py_ssize_t t = 0; t < nnames; t++) {
        PyObject *name = PyList_GET_ITEM(names, t);
        thread_names[t] = PyUnicode_Check(name) ? Py_NewRef(name) : NULL;
    }
    if (parse_tracks(tracks, &session_tracks, &nsession_tracks) < 0) {
        goto done;
    }
    if (ft_export_begin(&ex, tracer, "_write_perfetto()") < 0) {
        goto done;
    }
    if (ex.nthreads != nnames) {
        PyErr_SetString(PyExc_RuntimeError, "_write_perfetto(): the tracer "
                        "changed while its arguments were read");
        goto done;
    }
    export_tids = ft_export_tids(tracer);
    if (export_tids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* The function table's names, with the collector off: no finalizer
     * can let another thread clear() it meanwhile. */
    nfuncs = tracer->funcs.nfuncs;
    int gc_was_enabled = PyGC_Disable();
    int interned = interned_data(tracer, nfuncs, &data);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (interned < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (out_open_or_raise(&out, path_obj, name_obj, compress, (size_t)1 << 18) < 0) {
        goto done;
    }
    if (interned_packet(&data, &pkt, SEQUENCE_ID, 0) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    emit_packet(&out, &pkt);
    pkt.len = 0;
    if (track_packet(&pkt, PROCESS_UUID, 0, pid, -1, process_name, 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    emit_packet(&out, &pkt);
    Py_ssize_t nthreads = ex.nthreads;
    for (Py_ssize_t t = 0; t < nthreads; t++) {
        PyObject *name = thread_names[t];
        pkt.len = 0;
        long long tid = (long long)export_tids[t];
        if (track_packet(&pkt, FIRST_THREAD_UUID + (uint64_t)t, PROCESS_UUID,
                         pid, tid, name, 0) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        emit_packet(&out, &pkt);
    }
    /* The session's tracks: after the threads', uuids of their own. */
    uint64_t next_uuid = FIRST_THREAD_UUID + (uint64_t)nthreads;
    for (Py_ssize_t i = 0; i < nsession_tracks; i++) {
        const track_t *track = &session_tracks[i];
        uint64_t uuid = next_uuid++;
        pkt.len = 0;
        if (track_packet(&pkt, uuid, PROCESS_UUID, pid, -1, track->name, 0) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        emit_packet(&out, &pkt);
        if (emit_spans(&out, track, uuid,
                       track->category ? CATEGORY_STEP : CATEGORY_RANGE) < 0) {
            goto done;
        }
    }
    uint64_t rest = 0;
    for (Py_ssize_t t = 0; t < nthreads; t++) {
        rest += ft_export_estimate(&ex, t);
    }
    /* Each thread's sequence: its first packet, then a slice per event,
     * ended when the next event is not its descendant.  Pure C on what
     * this call owns or pinned, one thread at a time, with the GIL
     * released.  Stops at an interruption or a write error, without
     * ending the open slices: even a file written in place does not look
     * complete. */
    int interrupted = 0, nomem = 0, write_err;
    size_t done = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < nthreads && !interrupted && !out.failed; t++) {
        uint64_t seq = SEQUENCE_ID + 1 + (uint64_t)t;
        pkt.len = 0;
        if (interned_packet(&data, &pkt, seq, FIRST_THREAD_UUID + (uint64_t)t) < 0
            || ft_export_thread(&ex, t, &te) < 0) {
            interrupted = nomem = 1;
            break;
        }
        size_t n = te.head.len + te.body.len;
        if (n + 1 > stack_cap) {
            size_t *grown = realloc(stack, (n + 1) * sizeof(size_t));
            if (grown == NULL) {
                interrupted = nomem = 1;
                break;
            }
            stack = grown;
            stack_cap = n + 1;
        }
        emit_packet(&out, &pkt);
        rest -= ft_export_estimate(&ex, t);
        /* progress's total: exact for the threads replayed, estimated for
         * the others. */
        size_t total = done + n + (size_t)rest;
        size_t depth = 0;
        for (size_t i = 0; i < n && !out.failed; i++, done++) {
            if (out_progress(progress, done, total, ex.pid, &_save) < 0) {
                interrupted = 1;
                break;
            }
            const ft_event *ev = ft_thread_event(&te, i);
            while (depth && (int64_t)stack[depth - 1] != ev->parent) {
                emit_slice(&out, SLICE_END,
                           (uint64_t)ft_thread_event(&te, stack[--depth])->end_ns,
                           seq, 0, 0, 0, 0);
            }
            uint32_t id = (ev->func & ~FT_ID_IGNORED) + 1;
            emit_slice(&out, SLICE_BEGIN, (uint64_t)ev->start_ns, seq, 0, id,
                       ev->is_c ? CATEGORY_C : 0, ev->is_c ? 0 : id);
            stack[depth++] = i;
        }
        while (depth && !interrupted) {
            emit_slice(&out, SLICE_END,
                       (uint64_t)ft_thread_event(&te, stack[--depth])->end_ns,
                       seq, 0, 0, 0, 0);
        }
    }
    write_err = out_end(&out, interrupted);
    ft_thread_events_free(&te);
    Py_END_ALLOW_THREADS
    if (interrupted) {
        if (nomem) {
            PyErr_NoMemory();
        }
        goto done;  /* else the signal handler's or the callback's exception */
    }
    if (write_err) {
        out_raise(write_err, name_obj);
        goto done;
    }
    result = PyLong_FromSize_t(done);

done:
    out_end(&out, 1);  /* on the error paths */
    ft_thread_events_free(&te);
    ft_export_end(&ex);
    free(pkt.p);
    free(data.p);
    free(stack);
    free_tracks(session_tracks, nsession_tracks);
    for (Py_ssize_t t = 0; thread_names != NULL && t < nnames; t++) {
        Py_XDECREF(thread_names[t]);
    }
    free(thread_names);
    free(export_tids);
    Py_DECREF(path_obj);
    Py_DECREF(name_obj);
    return result;
}
