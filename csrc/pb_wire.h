/* Protobuf's wire format read from untrusted bytes (for the .pftrace
 * reader): every varint at most 10 bytes, every length within its
 * message; groups are refused.  Inline: a call or two per field. */
#ifndef FT_PB_WIRE_H
#define FT_PB_WIRE_H

#include "state.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

typedef struct {
    const uint8_t *p, *end;
} buf_t;

typedef struct {
    uint32_t num;
    int wt;
    uint64_t v;          /* a varint's value */
    buf_t sub;           /* a length-delimited field's bytes */
} field_t;

/* What went wrong, for the ValueError: static text, or NULL. */
typedef struct {
    const char *err;
    char detail[96];
} why_t;

static inline int
bad(why_t *why, const char *err)
{
    why->err = err;
    return -1;
}

static inline int
varint(buf_t *b, uint64_t *out, why_t *why)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (b->p >= b->end) {
            return bad(why, "truncated or corrupted: cut short in a varint");
        }
        uint8_t byte = *b->p++;
        if (shift == 63 && byte > 1) {
            return bad(why, "a varint longer than 64 bits");
        }
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return bad(why, "a varint longer than 10 bytes");
}

/* The next field of b: 1, 0 at its end, -1 when malformed. */
static inline int
next_field(buf_t *b, field_t *f, why_t *why)
{
    memset(f, 0, sizeof(*f));
    if (b->p >= b->end) {
        return 0;
    }
    uint64_t key;
    if (varint(b, &key, why) < 0) {
        return -1;
    }
    if (key >> 3 == 0 || key >> 3 > 0x1fffffff) {
        return bad(why, "a field number out of range");
    }
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    size_t left;
    switch (f->wt) {
    case WT_VARINT:
        return varint(b, &f->v, why) < 0 ? -1 : 1;
    case WT_I64:
    case WT_I32:
        left = (size_t)(b->end - b->p);
        if (left < (f->wt == WT_I64 ? 8u : 4u)) {
            return bad(why, "truncated or corrupted: cut short in a "
                       "fixed-size field");
        }
        b->p += f->wt == WT_I64 ? 8 : 4;
        return 1;
    case WT_LEN:
        if (varint(b, &f->v, why) < 0) {
            return -1;
        }
        if (f->v > (uint64_t)(b->end - b->p)) {
            return bad(why, "truncated or corrupted: a length past the "
                       "end of its message");
        }
        f->sub.p = b->p;
        f->sub.end = b->p + f->v;
        b->p += f->v;
        return 1;
    default:
        return bad(why, "a group or unknown wire type (no frametrace field)");
    }
}

/* Whether f, a field this reads, has the wire type it must have. */
static inline int
expect(const field_t *f, int wt, why_t *why)
{
    if (f->wt != wt) {
        snprintf(why->detail, sizeof(why->detail),
                 "field %u has wire type %d, not %d", (unsigned)f->num, f->wt,
                 wt);
        why->err = why->detail;
        return -1;
    }
    return 0;
}

/* A string field as str (surrogateescape: the writer's bytes of a name
 * that was not UTF-8); NULL with an exception. */
static inline PyObject *
str_of(const buf_t *s)
{
    return PyUnicode_DecodeUTF8((const char *)s->p, s->end - s->p,
                                "surrogateescape");
}

#endif
