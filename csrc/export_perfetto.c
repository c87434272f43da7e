/* Perfetto's native protobuf trace (.pftrace): TracePackets with
 * TrackEvents, hand-encoded (no protobuf library at run time), written
 * straight from the replayed records.
 *
 * Sequence 1 opens the file with the clock snapshots that relate
 * CLOCK_MONOTONIC (the tracer's clock) to CLOCK_BOOTTIME (Perfetto's trace
 * clock, that of system traces), read together at start and at stop; then
 * frametrace's metadata for load() (a ChromeMetadata "frametrace": JSON),
 * the track descriptors (a track per process and per thread, and for a
 * session's ranges and steps) and the session's spans, whose timestamps
 * are CLOCK_MONOTONIC ns.
 *
 * Each thread's events are a sequence of their own.  Its first packet
 * clears the incremental state, makes the thread's track the default one
 * (events carry no track uuid) and defines a sequence-scoped incremental
 * clock, equal to CLOCK_MONOTONIC at its snapshot: each packet's timestamp
 * is the ns since the previous packet's.  A name, source location or
 * category is interned in the packet of its first use on the sequence,
 * numbered in order of first use (small iids: one byte for a thread's
 * first 127 functions).  Each event is a SLICE_BEGIN/SLICE_END pair, in an
 * order that keeps slices nested.  The threads are replayed one at a time,
 * straight into the file, with the GIL released.  Only C events carry a
 * category ("c"): Python ones have a source location instead.  A call
 * open at start, stop or loss says so in debug annotations (few do).  The
 * file ends with the count of calls (a ChromeMetadata "frametrace_calls"),
 * by which load() knows it whole.
 *
 * A sequence per thread rather than one shared sequence with small track
 * uuids: a shared sequence would intern each function once for the file,
 * but every event packet there names its track (2 bytes, 3 from uuid 128
 * on), and its iids run past 127 sooner.  Measured
 * (benchmarks/export_perfetto.py): a thread's first packet and the entries
 * it interns again cost 44 bytes against 2.5 MB of uuids on fib (0.6M
 * calls), 128 KB against 3.9 MB on 64 threads of 15k calls each; only
 * threads of a few hundred calls each would favour the shared sequence
 * (by about 7% of the file).
 *
 * No packet after a sequence's first sets SEQ_NEEDS_INCREMENTAL_STATE,
 * though they use its interned data and clock: the flag only tells a reader
 * to drop the packet when that state is lost (a ring buffer that overwrote
 * the sequence's start), which a file written whole cannot be, and it
 * would cost 2 bytes a packet (12.5 -> 14.5 bytes per entry or exit). */
#include "state.h"
#include "export_out.h"

#include <stdlib.h>
#include <string.h>

/* Field numbers, from Perfetto's protos/perfetto/trace. */
enum {
    TRACE_PACKET = 1,
    PKT_CLOCK_SNAPSHOT = 6,
    PKT_TIMESTAMP = 8,
    PKT_SEQUENCE_ID = 10,
    PKT_TRACK_EVENT = 11,
    PKT_INTERNED_DATA = 12,
    PKT_SEQUENCE_FLAGS = 13,
    PKT_DEFAULTS = 59,
    PKT_TRACK_DESCRIPTOR = 60,
    DEFAULTS_TRACK_EVENT = 11,
    DEFAULTS_CLOCK_ID = 58,
    TED_TRACK_UUID = 11,
    CS_CLOCKS = 1,
    CS_PRIMARY_TRACE_CLOCK = 2,
    CLK_ID = 1,
    CLK_TIMESTAMP = 2,
    CLK_IS_INCREMENTAL = 3,
    TE_CATEGORY_IIDS = 3,
    TE_TYPE = 9,
    TE_NAME_IID = 10,
    TE_TRACK_UUID = 11,
    TE_CATEGORIES = 22,
    TE_NAME = 23,
    TE_SOURCE_LOCATION_IID = 34,
    TE_DEBUG_ANNOTATIONS = 4,
    DA_BOOL_VALUE = 2,
    DA_NAME = 10,
    PKT_CHROME_EVENTS = 5,
    CEB_METADATA = 2,
    CM_NAME = 1,
    CM_INT_VALUE = 4,
    CM_JSON_VALUE = 5,
    ID_EVENT_CATEGORIES = 1,
    ID_EVENT_NAMES = 2,
    ID_SOURCE_LOCATIONS = 4,
    IID = 1,
    IID_NAME = 2,
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
    SL_FILE_NAME = 2,
    SL_FUNCTION_NAME = 3,
    SL_LINE_NUMBER = 4,
};
enum { SLICE_BEGIN = 1, SLICE_END = 2 };
enum { SEQ_INCREMENTAL_STATE_CLEARED = 1, SEQ_NEEDS_INCREMENTAL_STATE = 2 };
enum { WT_VARINT = 0, WT_LEN = 2 };
/* Builtin clocks (protos/perfetto/common/builtin_clock.proto), and the
 * threads' own, sequence-scoped (64-127). */
enum { CLOCK_ID_MONOTONIC = 3, CLOCK_ID_BOOTTIME = 6, CLOCK_ID_THREAD = 64 };
/* Category iids: "c" on a thread's sequence; "range" and "step" on
 * sequence 1. */
enum { CATEGORY_C = 1, CATEGORY_RANGE = 1, CATEGORY_STEP = 2 };

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

static inline size_t
key_to(uint8_t *p, uint32_t field, int wire_type)
{
    return varint_to(p, ((uint64_t)field << 3) | (uint64_t)wire_type);
}

static void
pb_varint(pb_t *b, uint32_t field, uint64_t v)
{
    pb_reserve(b, 20);
    if (!b->failed) {
        b->len += key_to(b->p + b->len, field, WT_VARINT);
        b->len += varint_to(b->p + b->len, v);
    }
}

static void
pb_bytes(pb_t *b, uint32_t field, const void *data, size_t n)
{
    pb_reserve(b, n + 20);
    if (!b->failed) {
        b->len += key_to(b->p + b->len, field, WT_LEN);
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

/* s as bytes (a new reference, NULL with an exception): UTF-8, a lone
 * surrogate U+DC80..U+DCFF (a byte of a file name that was not UTF-8, as
 * Python's surrogateescape decodes it) as that byte again, which trace
 * processor keeps as it is; a string with another lone surrogate, which no
 * decoder makes, as UTF-8 with it backslash-escaped. */
static PyObject *
encoded(PyObject *s)
{
    PyObject *b = PyUnicode_AsEncodedString(s, "utf-8", "surrogateescape");
    if (b == NULL && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        PyErr_Clear();
        b = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
    }
    return b;
}

/* A string field of s (encoded()): b failed if it cannot be encoded. */
static void
pb_str(pb_t *b, uint32_t field, PyObject *s)
{
    PyObject *bytes = encoded(s);
    if (bytes == NULL) {
        b->failed = 1;
        return;
    }
    pb_bytes(b, field, PyBytes_AS_STRING(bytes),
             (size_t)PyBytes_GET_SIZE(bytes));
    Py_DECREF(bytes);
}

/* Emits msg as one TracePacket of the trace. */
static void
emit_packet(out_t *out, const pb_t *pkt)
{
    uint8_t head[16];
    size_t n = key_to(head, TRACE_PACKET, WT_LEN);
    n += varint_to(head + n, pkt->len);
    out_bytes(out, (const char *)head, n);
    out_bytes(out, (const char *)pkt->p, pkt->len);
}

/* A slice packet, encoded in place: the hot loop of the writer.  ts: the
 * timestamp field as written (a delta on the threads' clock); track 0: the
 * sequence's default track; category and location 0: none; interned: the
 * packet's InternedData, or NULL. */
/* A call's open flags, as debug annotations of its SLICE_BEGIN (few
 * calls have one): load() reads them back. */
static const char *const open_flags[3] = {"open_at_start", "open_at_stop",
                                          "open_at_loss"};

static inline int
flags_of(const ft_event *ev)
{
    return ev->open_at_start | ev->open_at_stop << 1 | ev->open_at_loss << 2;
}

static inline void
emit_slice(out_t *out, int type, uint64_t ts, uint64_t sequence,
           uint64_t track, uint64_t name_iid, uint64_t category,
           uint64_t location_iid, const pb_t *interned, int flags)
{
    uint8_t ev[112], pkt[160];
    size_t e = 0, p = 0, body;
    e += key_to(ev + e, TE_TYPE, WT_VARINT);
    e += varint_to(ev + e, (uint64_t)type);
    if (track) {
        e += key_to(ev + e, TE_TRACK_UUID, WT_VARINT);
        e += varint_to(ev + e, track);
    }
    if (type == SLICE_BEGIN) {
        if (category) {
            e += key_to(ev + e, TE_CATEGORY_IIDS, WT_VARINT);
            e += varint_to(ev + e, category);
        }
        e += key_to(ev + e, TE_NAME_IID, WT_VARINT);
        e += varint_to(ev + e, name_iid);
        if (location_iid) {
            e += key_to(ev + e, TE_SOURCE_LOCATION_IID, WT_VARINT);
            e += varint_to(ev + e, location_iid);
        }
        for (int k = 0; k < 3; k++) {
            if (flags & (1 << k)) {
                size_t n = strlen(open_flags[k]);
                e += key_to(ev + e, TE_DEBUG_ANNOTATIONS, WT_LEN);
                ev[e++] = (uint8_t)(n + 4);
                e += key_to(ev + e, DA_NAME, WT_LEN);
                ev[e++] = (uint8_t)n;
                memcpy(ev + e, open_flags[k], n);
                e += n;
                e += key_to(ev + e, DA_BOOL_VALUE, WT_VARINT);
                ev[e++] = 1;
            }
        }
    }
    /* The packet's length first: room for it is left at the front. */
    uint8_t *q = pkt + 8;
    q += key_to(q, PKT_TIMESTAMP, WT_VARINT);
    q += varint_to(q, ts);
    q += key_to(q, PKT_SEQUENCE_ID, WT_VARINT);
    q += varint_to(q, sequence);
    q += key_to(q, PKT_TRACK_EVENT, WT_LEN);
    q += varint_to(q, e);
    memcpy(q, ev, e);
    q += e;
    body = (size_t)(q - (pkt + 8));
    if (interned != NULL || body >= 128) {
        static const pb_t none = {0};
        if (interned == NULL) {
            interned = &none;
        }
        uint8_t lead[16], head[16];
        size_t h = 0;
        if (interned->len) {
            h = key_to(head, PKT_INTERNED_DATA, WT_LEN);
            h += varint_to(head + h, interned->len);
        }
        size_t n = key_to(lead, TRACE_PACKET, WT_LEN);
        n += varint_to(lead + n, body + h + interned->len);
        out_bytes(out, (const char *)lead, n);
        out_bytes(out, (const char *)pkt + 8, body);
        if (interned->len) {
            out_bytes(out, (const char *)head, h);
            out_bytes(out, (const char *)interned->p, interned->len);
        }
        return;
    }
    /* body < 128: a one-byte length right before it. */
    p = 6;
    pkt[p] = (uint8_t)((TRACE_PACKET << 3) | WT_LEN);
    pkt[p + 1] = (uint8_t)body;
    out_bytes(out, (const char *)pkt + p, body + 2);
}

/* What a function is interned as, taken with the GIL before the writing:
 * its name and file as UTF-8 in one buffer (offsets into it). */
typedef struct {
    size_t name, name_len, file, file_len;
    int64_t lineno;
    int is_c;
} func_names_t;

/* Appends s (encoded()) to strings; where it went in *at and *len. */
static void
add_string(pb_t *strings, PyObject *s, size_t *at, size_t *len)
{
    PyObject *bytes = encoded(s);
    if (bytes == NULL) {
        strings->failed = 1;
        return;
    }
    size_t n = (size_t)PyBytes_GET_SIZE(bytes);
    /* At least a byte: the buffer exists even if every string is empty. */
    pb_reserve(strings, n + 1);
    if (!strings->failed) {
        *at = strings->len;
        *len = n;
        memcpy(strings->p + strings->len, PyBytes_AS_STRING(bytes), n);
        strings->len += n;
    }
    Py_DECREF(bytes);
}

/* Every function's names, plus a last entry ("?", C) for an id beyond the
 * table.  0, or -1 when out of memory. */
static int
take_func_names(ft_tracer *tracer, uint32_t nfuncs, func_names_t *names,
                pb_t *strings)
{
    PyObject *unknown = PyUnicode_FromString("?");
    if (unknown == NULL) {
        return -1;
    }
    for (uint32_t i = 0; i <= nfuncs && !strings->failed; i++) {
        func_names_t *f = &names[i];
        const ft_func *func = i < nfuncs ? &tracer->funcs.funcs[i] : NULL;
        if (func != NULL && func->state == FT_FUNC_FREE) {
            func = NULL;  /* no record refers to it: "?" all the same */
        }
        f->is_c = func == NULL || func->is_c;
        f->lineno = func != NULL ? func->lineno : 0;
        add_string(strings, func != NULL ? func->name : unknown, &f->name,
                   &f->name_len);
        if (!f->is_c) {
            add_string(strings, func->filename, &f->file, &f->file_len);
        }
    }
    Py_DECREF(unknown);
    return strings->failed ? -1 : 0;
}

/* An InternedData entry {iid, name} (EventName, EventCategory) into data. */
static void
intern_name(pb_t *data, pb_t *tmp, uint32_t field, uint64_t iid,
            const void *name, size_t n)
{
    tmp->len = 0;
    pb_varint(tmp, IID, iid);
    pb_bytes(tmp, IID_NAME, name, n);
    pb_message(data, field, tmp);
}

/* A function's first use on a sequence: its name, and its source location
 * (Python) or the "c" category if the sequence has none yet, as iid. */
static void
intern_func(pb_t *data, pb_t *tmp, const func_names_t *f, const pb_t *strings,
            uint64_t iid, int *category_c)
{
    const uint8_t *s = strings->p;
    data->len = 0;
    intern_name(data, tmp, ID_EVENT_NAMES, iid, s + f->name, f->name_len);
    if (f->is_c && !*category_c) {
        intern_name(data, tmp, ID_EVENT_CATEGORIES, CATEGORY_C, "c", 1);
        *category_c = 1;
    }
    if (!f->is_c) {
        tmp->len = 0;
        pb_varint(tmp, IID, iid);
        pb_bytes(tmp, SL_FILE_NAME, s + f->file, f->file_len);
        pb_bytes(tmp, SL_FUNCTION_NAME, s + f->name, f->name_len);
        pb_varint(tmp, SL_LINE_NUMBER,
                  (uint64_t)(f->lineno > 0 ? f->lineno : 0));
        pb_message(data, ID_SOURCE_LOCATIONS, tmp);
    }
}

/* A clock of a ClockSnapshot into snap. */
static void
snapshot_clock(pb_t *snap, pb_t *tmp, uint64_t id, uint64_t ts,
               int incremental)
{
    tmp->len = 0;
    pb_varint(tmp, CLK_ID, id);
    pb_varint(tmp, CLK_TIMESTAMP, ts);
    if (incremental) {
        pb_varint(tmp, CLK_IS_INCREMENTAL, 1);
    }
    pb_message(snap, CS_CLOCKS, tmp);
}

/* A sequence's first packet: clears its incremental state, sets its
 * defaults (timestamps on clock_id, events on default_track if not 0),
 * and holds snap, a ClockSnapshot.  Pure C.  0, or -1 when out of
 * memory. */
static int
first_packet(pb_t *pkt, uint64_t sequence, uint64_t clock_id,
             uint64_t default_track, const pb_t *snap)
{
    pb_t ted = {0}, defaults = {0};
    pkt->len = 0;
    pb_message(pkt, PKT_CLOCK_SNAPSHOT, snap);
    pb_varint(pkt, PKT_SEQUENCE_ID, sequence);
    pb_varint(pkt, PKT_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
    if (default_track) {
        pb_varint(&ted, TED_TRACK_UUID, default_track);
        pb_message(&defaults, DEFAULTS_TRACK_EVENT, &ted);
    }
    pb_varint(&defaults, DEFAULTS_CLOCK_ID, clock_id);
    pb_message(pkt, PKT_DEFAULTS, &defaults);
    int failed = ted.failed || defaults.failed || pkt->failed;
    free(ted.p);
    free(defaults.p);
    return failed ? -1 : 0;
}

/* A thread's sequence's first packet: its clock starts at t0, equal to
 * CLOCK_MONOTONIC there. */
static int
thread_first_packet(pb_t *pkt, pb_t *snap, pb_t *tmp, uint64_t sequence,
                    uint64_t track, uint64_t t0)
{
    snap->len = 0;
    snapshot_clock(snap, tmp, CLOCK_ID_THREAD, t0, 1);
    snapshot_clock(snap, tmp, CLOCK_ID_MONOTONIC, t0, 0);
    return first_packet(pkt, sequence, CLOCK_ID_THREAD, track, snap);
}

/* Sequence 1's first packets: CLOCK_MONOTONIC and CLOCK_BOOTTIME at
 * start and at stop, BOOTTIME the trace's clock as in system traces;
 * without BOOTTIME (no pair taken), MONOTONIC is.  Pure C. */
static int
emit_clock_packets(out_t *out, const ft_clock *clock, pb_t *pkt)
{
    pb_t snap = {0}, tmp = {0};
    int rc = 0;
    int npairs = clock->nboot;
    for (int i = 0; i < (npairs ? npairs : 1) && rc == 0; i++) {
        snap.len = 0;
        if (npairs) {
            snapshot_clock(&snap, &tmp, CLOCK_ID_MONOTONIC,
                           (uint64_t)clock->boot[i].mono_ns, 0);
            snapshot_clock(&snap, &tmp, CLOCK_ID_BOOTTIME,
                           (uint64_t)clock->boot[i].boot_ns, 0);
        }
        else {
            snapshot_clock(&snap, &tmp, CLOCK_ID_MONOTONIC, 0, 0);
        }
        if (i == 0) {
            /* Set once, before any timestamp is converted. */
            pb_varint(&snap, CS_PRIMARY_TRACE_CLOCK,
                      npairs ? CLOCK_ID_BOOTTIME : CLOCK_ID_MONOTONIC);
            rc = first_packet(pkt, SEQUENCE_ID, CLOCK_ID_MONOTONIC, 0, &snap);
        }
        else {
            pkt->len = 0;
            pb_message(pkt, PKT_CLOCK_SNAPSHOT, &snap);
            pb_varint(pkt, PKT_SEQUENCE_ID, SEQUENCE_ID);
            rc = pkt->failed ? -1 : 0;
        }
        if (rc == 0) {
            emit_packet(out, pkt);
        }
    }
    free(snap.p);
    free(tmp.p);
    return rc;
}

/* A ChromeMetadata entry md (freed here) as a packet on sequence 1: 0, or
 * -1 out of memory.  Pure C. */
static int
chrome_metadata_packet(pb_t *pkt, pb_t *md)
{
    pb_t bundle = {0};
    pb_message(&bundle, CEB_METADATA, md);
    pkt->len = 0;
    pb_varint(pkt, PKT_SEQUENCE_ID, SEQUENCE_ID);
    pb_message(pkt, PKT_CHROME_EVENTS, &bundle);
    int failed = md->failed || bundle.failed || pkt->failed;
    free(md->p);
    free(bundle.p);
    return failed ? -1 : 0;
}

/* frametrace's metadata (JSON: what load() reads back beside the events,
 * as otherData.frametrace in Chrome JSON), on sequence 1 in a
 * ChromeMetadata "frametrace", which trace processor keeps as metadata. */
static int
meta_packet(pb_t *pkt, PyObject *json)
{
    pb_t md = {0};
    pb_bytes(&md, CM_NAME, "frametrace", 10);
    pb_str(&md, CM_JSON_VALUE, json);
    return chrome_metadata_packet(pkt, &md);
}

/* The file's last packet with the metadata: how many calls it holds, so
 * that load() tells a whole file from one cut between packets.  Pure C. */
static int
count_packet(pb_t *pkt, uint64_t calls)
{
    pb_t md = {0};
    pb_bytes(&md, CM_NAME, "frametrace_calls", 16);
    pb_varint(&md, CM_INT_VALUE, calls);
    return chrome_metadata_packet(pkt, &md);
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
    pkt->len = 0;
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
    PyObject *cat;   /* strong, maybe NULL: the track's category */
    int64_t start, end;
    /* Their bytes (encoded(), strong; cat8 NULL without cat), taken with
     * the GIL: what a thread's slices are written from without it. */
    PyObject *name8, *cat8;
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

/* Slices of a track, named inline (there are few), on sequence 1 at
 * CLOCK_MONOTONIC ns; the track's category is interned at its first use
 * (*interned: the categories interned so far, a bit each). */
static int
emit_spans(out_t *out, const track_t *track, uint64_t uuid, uint64_t category,
           int *interned)
{
    for (Py_ssize_t i = 0; i < track->nspans; i++) {
        const span_t *span = &track->spans[i];
        pb_t ev = {0}, pkt = {0}, data = {0}, tmp = {0};
        if (span->cat == NULL && !(*interned & (1 << category))) {
            const char *name = category == CATEGORY_STEP ? "step" : "range";
            intern_name(&data, &tmp, ID_EVENT_CATEGORIES, category, name,
                        strlen(name));
            *interned |= 1 << category;
        }
        pb_varint(&ev, TE_TYPE, SLICE_BEGIN);
        pb_varint(&ev, TE_TRACK_UUID, uuid);
        if (span->cat8 != NULL) {
            pb_bytes(&ev, TE_CATEGORIES, PyBytes_AS_STRING(span->cat8),
                     (size_t)PyBytes_GET_SIZE(span->cat8));
        }
        else {
            pb_varint(&ev, TE_CATEGORY_IIDS, category);
        }
        pb_bytes(&ev, TE_NAME, PyBytes_AS_STRING(span->name8),
                 (size_t)PyBytes_GET_SIZE(span->name8));
        pb_varint(&pkt, PKT_TIMESTAMP, (uint64_t)span->start);
        pb_varint(&pkt, PKT_SEQUENCE_ID, SEQUENCE_ID);
        pb_message(&pkt, PKT_TRACK_EVENT, &ev);
        if (data.len) {
            pb_message(&pkt, PKT_INTERNED_DATA, &data);
        }
        int failed = pkt.failed || data.failed;
        if (!failed) {
            emit_packet(out, &pkt);
            emit_slice(out, SLICE_END, (uint64_t)span->end, SEQUENCE_ID, uuid,
                       0, 0, 0, NULL, 0);
        }
        free(ev.p);
        free(pkt.p);
        free(data.p);
        free(tmp.p);
        if (failed) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* thread_slices: one list of spans (name, start_ns, end_ns, category) per
 * thread, in registration order, sorted by start and then longest first,
 * nested among themselves and with the thread's events (the caller,
 * frametrace.torch, made sure). */
static int
parse_thread_slices(PyObject *list, Py_ssize_t nthreads, track_t **out)
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

/* A thread slice's SLICE_BEGIN on its thread's sequence (default track),
 * named and categorised inline: they are few beside the frames.  Pure C. */
static int
emit_thread_slice(out_t *out, pb_t *ev, pb_t *pkt, uint64_t ts,
                  uint64_t sequence, const span_t *span)
{
    ev->len = 0;
    pkt->len = 0;
    pb_varint(ev, TE_TYPE, SLICE_BEGIN);
    pb_bytes(ev, TE_CATEGORIES, PyBytes_AS_STRING(span->cat8),
             (size_t)PyBytes_GET_SIZE(span->cat8));
    pb_bytes(ev, TE_NAME, PyBytes_AS_STRING(span->name8),
             (size_t)PyBytes_GET_SIZE(span->name8));
    pb_varint(pkt, PKT_TIMESTAMP, ts);
    pb_varint(pkt, PKT_SEQUENCE_ID, sequence);
    pb_message(pkt, PKT_TRACK_EVENT, ev);
    if (pkt->failed) {
        return -1;
    }
    emit_packet(out, pkt);
    return 0;
}

/* An open slice of a thread whose events are merged with slices of its
 * own: an event (index into te) or a thread slice. */
typedef struct {
    int64_t start, end;
    size_t idx;
    int is_slice;
} open_t;

/* What a thread's sequence has interned: each function's iid there (0:
 * none yet), and which functions have one, to forget them for the next
 * thread. */
typedef struct {
    uint32_t *iid;       /* per function id, nfuncs + 1 */
    uint32_t *used;      /* the function ids with an iid, in order */
    uint32_t nused;
    int category_c;
} seq_interning;

/* The iid of function id func on si's sequence, and whether it is a C
 * function; at its first use there its names go into data (*interned =
 * data, else NULL).  0, or -1 when out of memory. */
static int
func_iid(seq_interning *si, uint32_t func, uint32_t nfuncs,
         const func_names_t *funcs, const pb_t *strings, pb_t *data,
         pb_t *tmp, uint32_t *iid, int *is_c, const pb_t **interned)
{
    uint32_t f = func & ~FT_ID_IGNORED;
    if (f > nfuncs) {
        f = nfuncs;  /* beyond the table: its "?" entry */
    }
    *interned = NULL;
    if (si->iid[f] == 0) {
        si->used[si->nused++] = f;
        si->iid[f] = si->nused;
        intern_func(data, tmp, &funcs[f], strings, si->iid[f],
                    &si->category_c);
        if (data->failed) {
            return -1;
        }
        *interned = data;
    }
    *iid = si->iid[f];
    *is_c = funcs[f].is_c;
    return 0;
}

static void
seq_interning_reset(seq_interning *si)
{
    for (uint32_t i = 0; i < si->nused; i++) {
        si->iid[si->used[i]] = 0;
    }
    si->nused = 0;
    si->category_c = 0;
}

/* _write_perfetto(path, *, pid, process_name, thread_names, tracks,
 *                 compress, progress, name, thread_slices, frametrace)
 * -- frametrace: the metadata load() reads back (JSON), written after the
 * clock snapshots, and then the count of calls as the file's last packet;
 * thread_names: [str or
 * None] per thread, in registration order; tracks: [(name, thread_id or
 * None, category, [(span name, start, end)])] for ranges and steps; name:
 * the path errors show (default path; the caller writes to a temporary
 * and renames it). */
PyObject *
ft_write_perfetto(ft_tracer *tracer, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "pid", "process_name", "thread_names",
                             "tracks", "compress", "progress", "name",
                             "thread_slices", "frametrace", NULL};
    PyObject *path_obj, *name_obj = NULL, *process_name = NULL, *names = NULL;
    PyObject *tracks = NULL, *progress = NULL, *slices_obj = NULL;
    PyObject *meta = NULL;
    long long pid = -1;
    int compress = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "O&|$LUO!O!pOO&OU:_write_perfetto",
                                     kwlist, PyUnicode_FSConverter, &path_obj,
                                     &pid, &process_name, &PyList_Type, &names,
                                     &PyList_Type, &tracks, &compress,
                                     &progress, PyUnicode_FSConverter, &name_obj,
                                     &slices_obj, &meta)) {
        return NULL;
    }
    if (name_obj == NULL) {
        name_obj = Py_NewRef(path_obj);
    }
    ft_export ex = {0};
    ft_thread_events te = {0};
    out_t out = {0};
    pb_t pkt = {0}, strings = {0}, data = {0}, tmp = {0}, snap = {0};
    PyObject *result = NULL;
    size_t *stack = NULL;
    size_t stack_cap = 0;
    track_t *session_tracks = NULL;
    Py_ssize_t nsession_tracks = 0;
    track_t *tslices = NULL;          /* per thread, or NULL */
    Py_ssize_t ntslices = 0;
    open_t *open = NULL;
    size_t open_cap = 0;
    pb_t sev = {0}, spkt = {0};
    PyObject **thread_names = NULL;
    Py_ssize_t nnames = 0;
    uint64_t *export_tids = NULL;
    func_names_t *funcs = NULL;
    seq_interning si = {0};
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
    ntslices = nnames;
    if (parse_thread_slices(slices_obj, nnames, &tslices) < 0) {
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
    funcs = calloc((size_t)nfuncs + 1, sizeof(func_names_t));
    si.iid = calloc((size_t)nfuncs + 1, sizeof(uint32_t));
    si.used = calloc((size_t)nfuncs + 1, sizeof(uint32_t));
    if (funcs == NULL || si.iid == NULL || si.used == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int gc_was_enabled = PyGC_Disable();
    int taken = take_func_names(tracer, nfuncs, funcs, &strings);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (taken < 0) {
        if (!PyErr_Occurred()) {  /* else encoded()'s */
            PyErr_NoMemory();
        }
        goto done;
    }
    if (out_open_or_raise(&out, path_obj, name_obj, compress, (size_t)1 << 18) < 0) {
        goto done;
    }
    if (meta != NULL) {
        if (emit_clock_packets(&out, &ex.clock, &pkt) < 0
            || meta_packet(&pkt, meta) < 0) {
            if (!PyErr_Occurred()) {  /* else encoded()'s */
                PyErr_NoMemory();
            }
            goto done;
        }
        emit_packet(&out, &pkt);
    }
    if ((meta == NULL && emit_clock_packets(&out, &ex.clock, &pkt) < 0)
        || track_packet(&pkt, PROCESS_UUID, 0, pid, -1, process_name, 1) < 0) {
        if (!PyErr_Occurred()) {  /* else encoded()'s */
            PyErr_NoMemory();
        }
        goto done;
    }
    emit_packet(&out, &pkt);
    Py_ssize_t nthreads = ex.nthreads;
    for (Py_ssize_t t = 0; t < nthreads; t++) {
        long long tid = (long long)export_tids[t];
        if (track_packet(&pkt, FIRST_THREAD_UUID + (uint64_t)t, PROCESS_UUID,
                         pid, tid, thread_names[t], 0) < 0) {
            if (!PyErr_Occurred()) {  /* else encoded()'s */
                PyErr_NoMemory();
            }
            goto done;
        }
        emit_packet(&out, &pkt);
    }
    /* The session's tracks: after the threads', uuids of their own. */
    uint64_t next_uuid = FIRST_THREAD_UUID + (uint64_t)nthreads;
    int categories = 0;
    for (Py_ssize_t i = 0; i < nsession_tracks; i++) {
        const track_t *track = &session_tracks[i];
        uint64_t uuid = next_uuid++;
        if (track_packet(&pkt, uuid, PROCESS_UUID, pid, -1, track->name,
                         0) < 0) {
            if (!PyErr_Occurred()) {  /* else encoded()'s */
                PyErr_NoMemory();
            }
            goto done;
        }
        emit_packet(&out, &pkt);
        if (emit_spans(&out, track, uuid,
                       track->category ? CATEGORY_STEP : CATEGORY_RANGE,
                       &categories) < 0) {
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
    uint32_t max_depth = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < nthreads && !interrupted && !out.failed; t++) {
        uint64_t seq = SEQUENCE_ID + 1 + (uint64_t)t;
        if (ft_export_thread(&ex, t, &te) < 0) {
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
        /* The thread's clock starts at its first event (timestamps are
         * unsigned there), and then counts ns from packet to packet;
         * going back (never expected) wraps around, as int64 deltas. */
        const track_t *xs = tslices != NULL ? &tslices[t] : NULL;
        size_t nx = xs != NULL ? (size_t)xs->nspans : 0;
        int64_t first = n ? ft_thread_event(&te, 0)->start_ns : 0;
        if (nx && (!n || xs->spans[0].start < first)) {
            first = xs->spans[0].start;
        }
        int64_t clock = first > 0 ? first : 0;
        if (thread_first_packet(&pkt, &snap, &tmp, seq,
                                FIRST_THREAD_UUID + (uint64_t)t,
                                (uint64_t)clock) < 0) {
            interrupted = nomem = 1;
            break;
        }
        emit_packet(&out, &pkt);
        seq_interning_reset(&si);
        rest -= ft_export_estimate(&ex, t);
        /* progress's total: exact for the threads replayed, estimated for
         * the others. */
        size_t total = done + n + (size_t)rest;
        size_t depth = 0;
        if (nx) {
            /* The thread's events and its slices, one stream of nested
             * slices by time: a slice begins before the event it starts
             * before (or at, and outlasts); before anything begins, what
             * does not contain it ends (an event: what is not its parent). */
            if (n + nx + 1 > open_cap) {
                open_t *grown = realloc(open, (n + nx + 1) * sizeof(open_t));
                if (grown == NULL) {
                    interrupted = nomem = 1;
                    break;
                }
                open = grown;
                open_cap = n + nx + 1;
            }
            size_t x = 0;
            for (size_t i = 0; (i < n || x < nx) && !out.failed && !interrupted; ) {
                const ft_event *ev = i < n ? ft_thread_event(&te, i) : NULL;
                const span_t *sp = x < nx ? &xs->spans[x] : NULL;
                int take_slice = sp != NULL
                    && (ev == NULL || sp->start < ev->start_ns
                        || (sp->start == ev->start_ns && sp->end > ev->end_ns));
                int64_t start = take_slice ? sp->start : ev->start_ns;
                int64_t end = take_slice ? sp->end : ev->end_ns;
                while (depth) {
                    const open_t *top = &open[depth - 1];
                    int keep = (top->is_slice || take_slice)
                        ? top->start <= start && end <= top->end
                        : (int64_t)top->idx == ev->parent;
                    if (keep) {
                        break;
                    }
                    depth--;
                    emit_slice(&out, SLICE_END, (uint64_t)top->end - (uint64_t)clock,
                               seq, 0, 0, 0, 0, NULL, 0);
                    clock = top->end;
                }
                if (take_slice) {
                    if (emit_thread_slice(&out, &sev, &spkt,
                                          (uint64_t)start - (uint64_t)clock,
                                          seq, sp) < 0) {
                        interrupted = nomem = 1;
                        break;
                    }
                    clock = start;
                    open[depth++] = (open_t){start, end, x, 1};
                    x++;
                    continue;
                }
                if (out_progress(progress, done, total, ex.pid, &_save) < 0) {
                    interrupted = 1;
                    break;
                }
                if (ev->depth > max_depth) {
                    max_depth = ev->depth;
                }
                uint32_t iid;
                int is_c;
                const pb_t *interned;
                if (func_iid(&si, ev->func, nfuncs, funcs, &strings, &data,
                             &tmp, &iid, &is_c, &interned) < 0) {
                    interrupted = nomem = 1;
                    break;
                }
                emit_slice(&out, SLICE_BEGIN, (uint64_t)start - (uint64_t)clock,
                           seq, 0, iid, is_c ? CATEGORY_C : 0, is_c ? 0 : iid,
                           interned, flags_of(ev));
                clock = start;
                open[depth++] = (open_t){start, end, i, 0};
                i++;
                done++;
            }
            while (depth && !interrupted) {
                int64_t end = open[--depth].end;
                emit_slice(&out, SLICE_END, (uint64_t)end - (uint64_t)clock, seq,
                           0, 0, 0, 0, NULL, 0);
                clock = end;
            }
            continue;
        }
        for (size_t i = 0; i < n && !out.failed; i++, done++) {
            if (out_progress(progress, done, total, ex.pid, &_save) < 0) {
                interrupted = 1;
                break;
            }
            const ft_event *ev = ft_thread_event(&te, i);
            if (ev->depth > max_depth) {
                max_depth = ev->depth;
            }
            while (depth && (int64_t)stack[depth - 1] != ev->parent) {
                int64_t end = ft_thread_event(&te, stack[--depth])->end_ns;
                emit_slice(&out, SLICE_END, (uint64_t)end - (uint64_t)clock,
                           seq, 0, 0, 0, 0, NULL, 0);
                clock = end;
            }
            uint32_t iid;
            int is_c;
            const pb_t *interned;
            if (func_iid(&si, ev->func, nfuncs, funcs, &strings, &data, &tmp,
                         &iid, &is_c, &interned) < 0) {
                interrupted = nomem = 1;
                break;
            }
            emit_slice(&out, SLICE_BEGIN,
                       (uint64_t)ev->start_ns - (uint64_t)clock, seq, 0, iid,
                       is_c ? CATEGORY_C : 0, is_c ? 0 : iid, interned,
                       flags_of(ev));
            clock = ev->start_ns;
            stack[depth++] = i;
        }
        while (depth && !interrupted) {
            int64_t end = ft_thread_event(&te, stack[--depth])->end_ns;
            emit_slice(&out, SLICE_END, (uint64_t)end - (uint64_t)clock, seq,
                       0, 0, 0, 0, NULL, 0);
            clock = end;
        }
    }
    if (!interrupted && meta != NULL) {
        if (count_packet(&pkt, done) < 0) {
            interrupted = nomem = 1;
        }
        else {
            emit_packet(&out, &pkt);
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
    /* The deepest depth, for the caller's warning past what viewers show. */
    result = Py_BuildValue("(nI)", (Py_ssize_t)done, (unsigned int)max_depth);

done:
    out_end(&out, 1);  /* on the error paths */
    ft_thread_events_free(&te);
    ft_export_end(&ex);
    free(pkt.p);
    free(strings.p);
    free(data.p);
    free(tmp.p);
    free(snap.p);
    free(funcs);
    free(si.iid);
    free(si.used);
    free(stack);
    free_tracks(session_tracks, nsession_tracks);
    free_tracks(tslices, tslices != NULL ? ntslices : 0);
    free(open);
    free(sev.p);
    free(spkt.p);
    for (Py_ssize_t t = 0; thread_names != NULL && t < nnames; t++) {
        Py_XDECREF(thread_names[t]);
    }
    free(thread_names);
    free(export_tids);
    Py_DECREF(path_obj);
    Py_DECREF(name_obj);
    return result;
}
