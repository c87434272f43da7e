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
#include "export_driver.h"
#include "export_pb.h"
#include "export_tracks.h"

#include <stdlib.h>
#include <string.h>

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
take_func_names(const ft_func *table, uint32_t nfuncs, func_names_t *names,
                pb_t *strings)
{
    PyObject *unknown = PyUnicode_FromString("?");
    if (unknown == NULL) {
        return -1;
    }
    for (uint32_t i = 0; i <= nfuncs && !strings->failed; i++) {
        func_names_t *f = &names[i];
        const ft_func *func = i < nfuncs ? &table[i] : NULL;
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

/* The Perfetto encoder: what the driver's steps share. */
typedef struct {
    long long pid;
    PyObject *process_name;     /* borrowed: the caller's argument */
    PyObject *meta;             /* borrowed, or NULL: frametrace's JSON */
    PyObject **thread_names;    /* strong or NULL, per thread */
    Py_ssize_t nnames;
    track_t *session_tracks;
    Py_ssize_t nsession_tracks;
    track_t *tslices;           /* per thread, or NULL */
    func_names_t *funcs;        /* per function id, nfuncs + 1 */
    uint32_t nfuncs;
    seq_interning si;
    pb_t pkt, strings, data, tmp, snap, sev, spkt;
    size_t *stack;              /* open events of a thread */
    size_t stack_cap;
    open_t *open;               /* open events and slices of a thread */
    size_t open_cap;
} perfetto_enc;

/* The function table's names, each thread's name checked against the
 * pinned threads. */
static int
perfetto_describe(void *enc, ft_driver *d)
{
    perfetto_enc *e = enc;
    if (d->nthreads != e->nnames) {
        PyErr_SetString(PyExc_RuntimeError, "_write_perfetto(): the tracer "
                        "changed while its arguments were read");
        return -1;
    }
    e->nfuncs = d->nfuncs;
    e->funcs = calloc((size_t)d->nfuncs + 1, sizeof(func_names_t));
    e->si.iid = calloc((size_t)d->nfuncs + 1, sizeof(uint32_t));
    e->si.used = calloc((size_t)d->nfuncs + 1, sizeof(uint32_t));
    if (e->funcs == NULL || e->si.iid == NULL || e->si.used == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (take_func_names(d->funcs, d->nfuncs, e->funcs, &e->strings) < 0) {
        if (!PyErr_Occurred()) {  /* else encoded()'s */
            PyErr_NoMemory();
        }
        return -1;
    }
    return 0;
}

/* Sequence 1: the clocks, frametrace's metadata, the tracks and the
 * session's spans (with the GIL: names are encoded()). */
static int
perfetto_begin(void *enc, ft_driver *d)
{
    perfetto_enc *e = enc;
    out_t *out = &d->out;
    pb_t *pkt = &e->pkt;
    if (e->meta != NULL) {
        if (emit_clock_packets(out, &d->ex.clock, pkt) < 0
            || meta_packet(pkt, e->meta) < 0) {
            return -1;
        }
        emit_packet(out, pkt);
    }
    if ((e->meta == NULL && emit_clock_packets(out, &d->ex.clock, pkt) < 0)
        || track_packet(pkt, PROCESS_UUID, 0, e->pid, -1, e->process_name,
                        1) < 0) {
        return -1;
    }
    emit_packet(out, pkt);
    for (Py_ssize_t t = 0; t < d->nthreads; t++) {
        if (track_packet(pkt, FIRST_THREAD_UUID + (uint64_t)t, PROCESS_UUID,
                         e->pid, (long long)d->tids[t], e->thread_names[t],
                         0) < 0) {
            return -1;
        }
        emit_packet(out, pkt);
    }
    /* The session's tracks: after the threads', uuids of their own. */
    uint64_t next_uuid = FIRST_THREAD_UUID + (uint64_t)d->nthreads;
    int categories = 0;
    for (Py_ssize_t i = 0; i < e->nsession_tracks; i++) {
        const track_t *track = &e->session_tracks[i];
        uint64_t uuid = next_uuid++;
        if (track_packet(pkt, uuid, PROCESS_UUID, e->pid, -1, track->name,
                         0) < 0) {
            return -1;
        }
        emit_packet(out, pkt);
        if (emit_spans(out, track, uuid,
                       track->category ? CATEGORY_STEP : CATEGORY_RANGE,
                       &categories) < 0) {
            return -1;
        }
    }
    return 0;
}

/* A slice that ends a thread's open one. */
static inline void
end_slice(out_t *out, uint64_t delta, uint64_t seq)
{
    emit_slice(out, SLICE_END, delta, seq, 0, 0, 0, 0, NULL, 0);
}

/* An event's SLICE_BEGIN, its function interned on the thread's sequence
 * at its first use there; -1 (d->nomem set) when out of memory. */
static int
begin_event(perfetto_enc *e, ft_driver *d, const ft_event *ev, uint64_t delta,
            uint64_t seq)
{
    uint32_t iid;
    int is_c;
    const pb_t *interned;
    if (func_iid(&e->si, ev->func, e->nfuncs, e->funcs, &e->strings,
                 &e->data, &e->tmp, &iid, &is_c, &interned) < 0) {
        d->nomem = 1;
        return -1;
    }
    emit_slice(&d->out, SLICE_BEGIN, delta, seq, 0, iid,
               is_c ? CATEGORY_C : 0, is_c ? 0 : iid, interned, flags_of(ev));
    return 0;
}

/* A thread's events merged with its own slices, one stream of nested
 * slices by time: a slice begins before the event it starts before (or
 * at, and outlasts); before anything begins, what does not contain it
 * ends (an event: what is not its parent). */
static int
thread_with_slices(perfetto_enc *e, ft_driver *d, const ft_thread_events *te,
                   const track_t *xs, uint64_t seq, int64_t clock)
{
    out_t *out = &d->out;
    size_t n = te->head.len + te->body.len;
    size_t nx = (size_t)xs->nspans;
    if (n + nx + 1 > e->open_cap) {
        open_t *grown = realloc(e->open, (n + nx + 1) * sizeof(open_t));
        if (grown == NULL) {
            d->nomem = 1;
            return -1;
        }
        e->open = grown;
        e->open_cap = n + nx + 1;
    }
    open_t *open = e->open;
    size_t depth = 0, x = 0;
    for (size_t i = 0; (i < n || x < nx) && !out->failed; ) {
        const ft_event *ev = i < n ? ft_thread_event(te, i) : NULL;
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
            end_slice(out, (uint64_t)top->end - (uint64_t)clock, seq);
            clock = top->end;
        }
        if (take_slice) {
            if (emit_thread_slice(out, &e->sev, &e->spkt,
                                  (uint64_t)start - (uint64_t)clock,
                                  seq, sp) < 0) {
                d->nomem = 1;
                return -1;
            }
            clock = start;
            open[depth++] = (open_t){start, end, x, 1};
            x++;
            continue;
        }
        if (ft_driver_event(d, ev) < 0) {
            return -1;
        }
        if (begin_event(e, d, ev, (uint64_t)start - (uint64_t)clock,
                        seq) < 0) {
            return -1;
        }
        clock = start;
        open[depth++] = (open_t){start, end, i, 0};
        i++;
    }
    while (depth) {
        int64_t end = open[--depth].end;
        end_slice(out, (uint64_t)end - (uint64_t)clock, seq);
        clock = end;
    }
    return 0;
}

/* A thread's sequence: its first packet, then a slice per event, ended
 * when the next event is not its descendant.  Pure C. */
static int
perfetto_thread(void *enc, ft_driver *d, Py_ssize_t t,
                const ft_thread_events *te)
{
    perfetto_enc *e = enc;
    out_t *out = &d->out;
    uint64_t seq = SEQUENCE_ID + 1 + (uint64_t)t;
    size_t n = te->head.len + te->body.len;
    if (n + 1 > e->stack_cap) {
        size_t *grown = realloc(e->stack, (n + 1) * sizeof(size_t));
        if (grown == NULL) {
            d->nomem = 1;
            return -1;
        }
        e->stack = grown;
        e->stack_cap = n + 1;
    }
    /* The thread's clock starts at its first event (timestamps are
     * unsigned there), and then counts ns from packet to packet; going
     * back (never expected) wraps around, as int64 deltas. */
    const track_t *xs = e->tslices != NULL ? &e->tslices[t] : NULL;
    size_t nx = xs != NULL ? (size_t)xs->nspans : 0;
    int64_t first = n ? ft_thread_event(te, 0)->start_ns : 0;
    if (nx && (!n || xs->spans[0].start < first)) {
        first = xs->spans[0].start;
    }
    int64_t clock = first > 0 ? first : 0;
    if (thread_first_packet(&e->pkt, &e->snap, &e->tmp, seq,
                            FIRST_THREAD_UUID + (uint64_t)t,
                            (uint64_t)clock) < 0) {
        d->nomem = 1;
        return -1;
    }
    emit_packet(out, &e->pkt);
    seq_interning_reset(&e->si);
    if (nx) {
        return thread_with_slices(e, d, te, xs, seq, clock);
    }
    size_t *stack = e->stack;
    size_t depth = 0;
    for (size_t i = 0; i < n && !out->failed; i++) {
        const ft_event *ev = ft_thread_event(te, i);
        if (ft_driver_event(d, ev) < 0) {
            return -1;
        }
        while (depth && (int64_t)stack[depth - 1] != ev->parent) {
            int64_t end = ft_thread_event(te, stack[--depth])->end_ns;
            end_slice(out, (uint64_t)end - (uint64_t)clock, seq);
            clock = end;
        }
        uint64_t delta = (uint64_t)ev->start_ns - (uint64_t)clock;
        if (begin_event(e, d, ev, delta, seq) < 0) {
            return -1;
        }
        clock = ev->start_ns;
        stack[depth++] = i;
    }
    while (depth) {
        int64_t end = ft_thread_event(te, stack[--depth])->end_ns;
        end_slice(out, (uint64_t)end - (uint64_t)clock, seq);
        clock = end;
    }
    return 0;
}

/* The count of calls, by which load() knows the file whole. */
static int
perfetto_end(void *enc, ft_driver *d)
{
    perfetto_enc *e = enc;
    if (e->meta != NULL) {
        if (count_packet(&e->pkt, d->done) < 0) {
            d->nomem = 1;
            return -1;
        }
        emit_packet(&d->out, &e->pkt);
    }
    return 0;
}

static const ft_encoder perfetto_encoder = {
    .who = "_write_perfetto()",
    .describe = perfetto_describe,
    .begin = perfetto_begin,
    .thread = perfetto_thread,
    .end = perfetto_end,
};

static void
perfetto_enc_free(perfetto_enc *e)
{
    free(e->pkt.p);
    free(e->strings.p);
    free(e->data.p);
    free(e->tmp.p);
    free(e->snap.p);
    free(e->sev.p);
    free(e->spkt.p);
    free(e->funcs);
    free(e->si.iid);
    free(e->si.used);
    free(e->stack);
    free(e->open);
    ft_free_tracks(e->session_tracks, e->nsession_tracks);
    ft_free_tracks(e->tslices, e->tslices != NULL ? e->nnames : 0);
    for (Py_ssize_t t = 0; e->thread_names != NULL && t < e->nnames; t++) {
        Py_XDECREF(e->thread_names[t]);
    }
    free(e->thread_names);
}

/* _write_perfetto(path, *, pid, process_name, thread_names, tracks,
 *                 compress, progress, name, thread_slices, frametrace)
 * -- frametrace: the metadata load() reads back (JSON), written after the
 * clock snapshots, and then the count of calls as the file's last packet;
 * thread_names: [str or None] per thread, in registration order; tracks:
 * [(name, category, [(span name, start, end)])] for ranges and steps;
 * name: the path errors show (default path; the caller writes to a
 * temporary and renames it). */
PyObject *
ft_write_perfetto_source(const ft_source *src, PyObject *args, PyObject *kwargs)
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
    perfetto_enc e = {.pid = pid, .process_name = process_name,
                      .meta = meta};
    PyObject *result = NULL;
    if (pid < 0 || process_name == NULL || names == NULL || tracks == NULL) {
        PyErr_SetString(PyExc_TypeError, "_write_perfetto() needs pid, "
                        "process_name, thread_names and tracks");
        goto done;
    }
    /* The names (taken before any Python code runs), then what can run
     * Python code (converting the tracks); the driver then pins the
     * records (a clear() before makes the pin refuse). */
    e.thread_names = calloc((size_t)ft_source_nthreads(src) + 1,
                            sizeof(PyObject *));
    if (e.thread_names == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* One name (str or None) per thread, in registration order: threads
     * that had the same ident each have their own. */
    e.nnames = ft_source_nthreads(src);
    if (PyList_GET_SIZE(names) != e.nnames) {
        PyErr_Format(PyExc_ValueError, "_write_perfetto(): thread_names "
                     "has %zd names for %zd threads", PyList_GET_SIZE(names),
                     e.nnames);
        goto done;
    }
    for (Py_ssize_t t = 0; t < e.nnames; t++) {
        PyObject *name = PyList_GET_ITEM(names, t);
        e.thread_names[t] = PyUnicode_Check(name) ? Py_NewRef(name) : NULL;
    }
    if (ft_parse_tracks(tracks, &e.session_tracks, &e.nsession_tracks) < 0
        || ft_parse_thread_slices(slices_obj, e.nnames, &e.tslices) < 0) {
        goto done;
    }
    result = ft_driver_run(&perfetto_encoder, &e, src, path_obj,
                           name_obj, compress, progress);
done:
    perfetto_enc_free(&e);
    Py_DECREF(path_obj);
    Py_DECREF(name_obj);
    return result;
}

PyObject *
ft_write_perfetto(ft_tracer *tracer, PyObject *args, PyObject *kwargs)
{
    ft_source src = {.tracer = tracer};
    return ft_write_perfetto_source(&src, args, kwargs);
}
