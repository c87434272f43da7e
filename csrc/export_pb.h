/* Protocol buffers encoded by hand for the .pftrace writer: Perfetto's
 * field numbers, a growable message buffer and the packet framing. */
#ifndef FT_EXPORT_PB_H
#define FT_EXPORT_PB_H

#include "export_out.h"

#include <stdint.h>
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

static inline void
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

static inline void
pb_varint(pb_t *b, uint32_t field, uint64_t v)
{
    pb_reserve(b, 20);
    if (!b->failed) {
        b->len += key_to(b->p + b->len, field, WT_VARINT);
        b->len += varint_to(b->p + b->len, v);
    }
}

static inline void
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

static inline void
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
static inline PyObject *
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
static inline void
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
static inline void
emit_packet(out_t *out, const pb_t *pkt)
{
    uint8_t head[16];
    size_t n = key_to(head, TRACE_PACKET, WT_LEN);
    n += varint_to(head + n, pkt->len);
    out_bytes(out, (const char *)head, n);
    out_bytes(out, (const char *)pkt->p, pkt->len);
}

#endif /* FT_EXPORT_PB_H */
