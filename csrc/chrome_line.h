/* The scanner of the lines export_chrome.c writes (one complete event per
 * line, keys in a fixed order, followed by ",\n"): load_chrome.c's fast
 * paths and convert_columns.c's share it.  Only one byte per character
 * (ASCII, Latin-1); nothing here needs the GIL. */
#ifndef FT_CHROME_LINE_H
#define FT_CHROME_LINE_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const Py_UCS1 *s;
    Py_ssize_t i;   /* the next character */
    Py_ssize_t n;   /* the end of the buffer */
} cursor;

/* Whether the text at the cursor is lit (then skipped). */
static inline int
take(cursor *c, const char *lit, Py_ssize_t len)
{
    if (c->n - c->i < len) {
        return 0;
    }
    /* A loop the compiler unrolls for these short literals (a call to
     * memcmp costs more than the comparison). */
    const Py_UCS1 *s = c->s + c->i;
    for (Py_ssize_t k = 0; k < len; k++) {
        if (s[k] != (Py_UCS1)lit[k]) {
            return 0;
        }
    }
    c->i += len;
    return 1;
}

#define TAKE(c, lit) take((c), (lit), (Py_ssize_t)sizeof(lit) - 1)

/* (0|[1-9][0-9]{0,17}): longer numbers take the Python path's checks. */
static inline int
take_uint(cursor *c, int64_t *out)
{
    if (c->i >= c->n) {
        return 0;
    }
    Py_UCS1 ch = c->s[c->i];
    if (ch == '0') {
        c->i++;
        *out = 0;
        return 1;
    }
    if (ch < '1' || ch > '9') {
        return 0;
    }
    int64_t v = 0;
    Py_ssize_t end = c->i + 18 < c->n ? c->i + 18 : c->n;
    while (c->i < end && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        v = v * 10 + (c->s[c->i] - '0');
        c->i++;
    }
    *out = v;
    return 1;
}

/* A number of microseconds with exactly three decimals, as ns; 0 when it
 * is not one or its ns do not fit an int64. */
static inline int
take_us(cursor *c, int64_t *ns)
{
    int64_t us;
    if (!take_uint(c, &us) || c->n - c->i < 4 || c->s[c->i] != '.') {
        return 0;
    }
    int64_t frac = 0;
    for (Py_ssize_t k = 1; k <= 3; k++) {
        Py_UCS1 ch = c->s[c->i + k];
        if (ch < '0' || ch > '9') {
            return 0;
        }
        frac = frac * 10 + (ch - '0');
    }
    c->i += 4;
    if (us > (INT64_MAX - 999) / 1000) {
        return 0;
    }
    *ns = us * 1000 + frac;
    return 1;
}

/* A JSON string with no raw control characters, a backslash followed by anything but a newline (the escapes
 * themselves are checked by the Python path, the first time it meets the
 * text).  The cursor is left after the closing quote. */
static inline int
take_string(cursor *c)
{
    if (c->i >= c->n || c->s[c->i] != '"') {
        return 0;
    }
    Py_ssize_t i = c->i + 1;
    while (i < c->n) {
        /* Eight plain characters at a time: none a quote, a backslash or
         * a control character (words whose test says "maybe" go below). */
        const uint64_t ones = 0x0101010101010101ULL, highs = ones * 0x80;
        while (c->n - i >= 8) {
            uint64_t v, q, b;
            memcpy(&v, c->s + i, 8);
            q = v ^ (ones * '"');
            b = v ^ (ones * '\\');
            if ((((q - ones) & ~q) | ((b - ones) & ~b) | ((v - ones * 0x20) & ~v)) & highs) {
                break;
            }
            i += 8;
        }
        if (i >= c->n) {
            break;
        }
        Py_UCS1 ch = c->s[i];
        if (ch == '"') {
            c->i = i + 1;
            return 1;
        }
        if (ch < 0x20) {
            return 0;
        }
        if (ch == '\\') {
            if (i + 1 >= c->n || c->s[i + 1] == '\n') {
                return 0;
            }
            i += 2;
        }
        else {
            i++;
        }
    }
    return 0;
}

typedef struct {
    int is_c;
    Py_ssize_t pid_start, pid_end;  /* the pid's digits */
    Py_ssize_t ts_start, ts_end;    /* ts's digits */
    int64_t pid, tid;
    int64_t ts, dur;              /* ns, from the file's origin */
    Py_ssize_t key_start, key_end;  /* "name" ... "file" */
    uint8_t oas, oast, oal;
} line;

/* One line at c->i; 0 when it is not laid out as the C writer lays it out
 * (or is cut by the end of the buffer). */
static inline int
parse_line(cursor *c, line *ln)
{
    if (!TAKE(c, "{\"ph\":\"X\",\"cat\":\"")) {
        return 0;
    }
    if (TAKE(c, "python\"")) {
        ln->is_c = 0;
    }
    else if (TAKE(c, "c\"")) {
        ln->is_c = 1;
    }
    else {
        return 0;
    }
    if (!TAKE(c, ",\"pid\":")) {
        return 0;
    }
    ln->pid_start = c->i;
    if (!take_uint(c, &ln->pid)) {
        return 0;
    }
    ln->pid_end = c->i;
    if (!TAKE(c, ",\"tid\":") || !take_uint(c, &ln->tid)
        || !TAKE(c, ",\"ts\":")) {
        return 0;
    }
    ln->ts_start = c->i;
    if (!take_us(c, &ln->ts)) {
        return 0;
    }
    ln->ts_end = c->i;
    if (!TAKE(c, ",\"dur\":") || !take_us(c, &ln->dur)
        || !TAKE(c, ",\"name\":")) {
        return 0;
    }
    ln->key_start = c->i;
    if (!take_string(c) || !TAKE(c, ",\"args\":{\"file\":")
        || !take_string(c)) {
        return 0;
    }
    ln->key_end = c->i;
    ln->oas = (uint8_t)TAKE(c, ",\"open_at_start\":true");
    ln->oast = (uint8_t)TAKE(c, ",\"open_at_stop\":true");
    ln->oal = (uint8_t)TAKE(c, ",\"open_at_loss\":true");
    return TAKE(c, "}},\n");
}

#endif
