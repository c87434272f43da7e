/* Chrome trace event JSON (Perfetto UI, chrome://tracing), written straight
 * from the records, replayed one thread at a time with the GIL released:
 * no Python object per event, no copy of all the events.
 *
 * Every Python/C event is one complete event ("ph": "X").  ts and dur are
 * microseconds with three decimals, so nanoseconds survive; ts counts from
 * origin_ns (kept in otherData by the caller), since absolute monotonic
 * nanoseconds would exceed what a double holds exactly. */
#include "state.h"
#include "export_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ns as microseconds with exactly three decimals, at p; returns the end
 * (at most FT_US_MAX bytes). */
#define FT_US_MAX 25
static inline char *
put_us(char *p, int64_t ns)
{
    uint64_t v = (uint64_t)ns;
    if (ns < 0) {
        *p++ = '-';
        v = -v;  /* also right for INT64_MIN */
    }
    p = put_u64(p, v / 1000);
    unsigned r = (unsigned)(v % 1000);
    p[0] = '.';
    p[1] = (char)('0' + r / 100);
    p[2] = (char)('0' + r / 10 % 10);
    p[3] = (char)('0' + r % 10);
    return p + 4;
}

/* A JSON string literal of s (UTF-8), quotes included, malloc'd.  A lone
 * surrogate (a byte a file name had that was not UTF-8, as Python's
 * surrogateescape decodes it) is written as its \uXXXX escape, as
 * json.dumps writes it: the file stays UTF-8, and a JSON reader gives the
 * same str back. */
static char *
json_string(PyObject *s, size_t *len)
{
    PyObject *bytes = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
    if (bytes == NULL) {
        return NULL;
    }
    const unsigned char *src = (const unsigned char *)PyBytes_AS_STRING(bytes);
    Py_ssize_t n = PyBytes_GET_SIZE(bytes);
    char *dst = malloc((size_t)n * 6 + 3);
    if (dst == NULL) {
        Py_DECREF(bytes);
        PyErr_NoMemory();
        return NULL;
    }
    size_t k = 0;
    dst[k++] = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = src[i];
        if (c == '"' || c == '\\') {
            dst[k++] = '\\';
            dst[k++] = (char)c;
        }
        else if (c < 0x20) {
            k += (size_t)sprintf(dst + k, "\\u%04x", c);
        }
        else if (c == 0xED && i + 2 < n && src[i + 1] >= 0xA0) {
            /* U+D800..U+DFFF, which surrogatepass alone encodes (ED A0..BF
             * xx): no valid UTF-8 has it. */
            unsigned cp = (unsigned)(c & 0x0F) << 12
                          | (unsigned)(src[i + 1] & 0x3F) << 6
                          | (unsigned)(src[i + 2] & 0x3F);
            k += (size_t)sprintf(dst + k, "\\u%04x", cp);
            i += 2;
        }
        else {
            dst[k++] = (char)c;
        }
    }
    dst[k++] = '"';
    dst[k] = '\0';
    Py_DECREF(bytes);
    *len = k;
    return dst;
}

/* What an event's function contributes, rendered once per function:
 * ,"name":"...","args":{"file":"path:line" */
typedef struct {
    char *tail;
    size_t tail_len;
} func_json;

static int
describe_func(const ft_func *func, func_json *fj)
{
    if (func->state == FT_FUNC_FREE) {
        /* No record refers to a freed entry: named "?" all the same. */
        static const char unknown[] = ",\"name\":\"?\",\"args\":{\"file\":\"?\"";
        fj->tail_len = sizeof(unknown) - 1;
        fj->tail = malloc(sizeof(unknown));
        if (fj->tail == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(fj->tail, unknown, sizeof(unknown));
        return 0;
    }
    size_t name_len, file_len;
    char *name = json_string(func->name, &name_len);
    PyObject *where = PyUnicode_FromFormat("%U:%d", func->filename,
                                           func->lineno);
    char *file = where ? json_string(where, &file_len) : NULL;
    Py_XDECREF(where);
    if (name == NULL || file == NULL) {
        free(name);
        free(file);
        return -1;
    }
    static const char a[] = ",\"name\":", b[] = ",\"args\":{\"file\":";
    fj->tail_len = sizeof(a) - 1 + name_len + sizeof(b) - 1 + file_len;
    fj->tail = malloc(fj->tail_len + 1);
    if (fj->tail != NULL) {
        char *p = fj->tail;
        memcpy(p, a, sizeof(a) - 1);
        p += sizeof(a) - 1;
        memcpy(p, name, name_len);
        p += name_len;
        memcpy(p, b, sizeof(b) - 1);
        p += sizeof(b) - 1;
        memcpy(p, file, file_len);
    }
    free(name);
    free(file);
    if (fj->tail == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* What a thread contributes: {"ph":"X","cat":"python","pid":P,"tid":T,"ts":
 * (and the same with "cat":"c"). */
typedef struct {
    char py[96];
    size_t py_len;
    char c[96];
    size_t c_len;
} thread_json;

static void
describe_thread(thread_json *tj, long long pid, uint64_t tid)
{
    tj->py_len = (size_t)snprintf(tj->py, sizeof(tj->py),
        "{\"ph\":\"X\",\"cat\":\"python\",\"pid\":%lld,\"tid\":%llu,\"ts\":",
        pid, (unsigned long long)tid);
    tj->c_len = (size_t)snprintf(tj->c, sizeof(tj->c),
        "{\"ph\":\"X\",\"cat\":\"c\",\"pid\":%lld,\"tid\":%llu,\"ts\":",
        pid, (unsigned long long)tid);
}

/* The escaped names of every function and the event heads of every
 * thread (malloc'd, also on failure: the caller frees them).  0, or -1
 * with an exception. */
static int
describe_all(ft_tracer *tracer, uint32_t nfuncs, long long pid,
             func_json **funcs, thread_json **tids)
{
    *funcs = calloc((size_t)nfuncs + 1, sizeof(func_json));
    *tids = calloc((size_t)tracer->nthreads + 1, sizeof(thread_json));
    if (*funcs == NULL || *tids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < nfuncs; i++) {
        if (describe_func(&tracer->funcs.funcs[i], &(*funcs)[i]) < 0) {
            return -1;
        }
    }
    /* The OS's id where known (the one other tools show), unique per
     * thread: the prelude's thread metadata uses the same ones. */
    uint64_t *export_tids = ft_export_tids(tracer);
    if (export_tids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < tracer->nthreads; i++) {
        describe_thread(&(*tids)[i], pid, export_tids[i]);
    }
    free(export_tids);
    return 0;
}

/* The most an event writes besides its thread's head and its function's
 * tail: the separator, ts, dur, both open flags and the closing braces. */
#define EVENT_FIXED_MAX (2 + FT_US_MAX + 7 + FT_US_MAX + 21 + 20 + 20 + 2)

/* _write_chrome(path, *, pid, origin_ns, head, prelude, compress,
 *               progress, name, postlude) -- the document is
 * {head"traceEvents":[prelude, events, postlude]}: head (members ending
 * with a comma) first, so that a reader has the metadata before the
 * events; postlude (default none): events after the frames, which a
 * reader that keeps file order for equal times nests inside them.  name: the path errors show
 * (default path; the caller writes to a temporary and renames it). */
PyObject *
ft_write_chrome(ft_tracer *tracer, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "pid", "origin_ns", "head", "prelude",
                             "compress", "progress", "name", "postlude", NULL};
    PyObject *path_obj, *name_obj = NULL, *prelude = NULL, *head = NULL;
    PyObject *postlude = NULL;
    PyObject *progress = NULL;
    long long pid = -1, origin_ns = 0;
    int compress = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|$LLUUpOO&U:_write_chrome",
                                     kwlist, PyUnicode_FSConverter, &path_obj,
                                     &pid, &origin_ns, &head, &prelude,
                                     &compress, &progress,
                                     PyUnicode_FSConverter, &name_obj,
                                     &postlude)) {
        return NULL;
    }
    if (name_obj == NULL) {
        name_obj = Py_NewRef(path_obj);
    }
    if (prelude == NULL || head == NULL || pid < 0) {
        Py_DECREF(path_obj);
        Py_DECREF(name_obj);
        PyErr_SetString(PyExc_TypeError, "_write_chrome() needs pid, "
                        "origin_ns, head and prelude");
        return NULL;
    }
    ft_export ex = {0};
    ft_thread_events te = {0};
    func_json *funcs = NULL;
    thread_json *tids = NULL;
    out_t out = {0};
    PyObject *result = NULL;
    uint32_t nfuncs = tracer->funcs.nfuncs;

    const char *prelude_s = PyUnicode_AsUTF8(prelude);
    const char *head_s = PyUnicode_AsUTF8(head);
    const char *postlude_s = postlude != NULL ? PyUnicode_AsUTF8(postlude) : "";
    if (prelude_s == NULL || head_s == NULL || postlude_s == NULL) {
        goto done;
    }
    /* The records pinned, then what needs Python (the names), with the
     * GIL and the collector off: no finalizer can let another thread
     * clear() the function table meanwhile. */
    if (ft_export_begin(&ex, tracer, "_write_chrome()") < 0) {
        goto done;
    }
    int gc_was_enabled = PyGC_Disable();
    int described = describe_all(tracer, nfuncs, pid, &funcs, &tids);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (described < 0) {
        goto done;
    }
    if (out_open_or_raise(&out, path_obj, name_obj, compress, OUT_CAP) < 0) {
        goto done;
    }
    /* Replay and writing are pure C on what this call owns or pinned (the
     * escaped names, the threads' records): one thread at a time, with
     * the GIL released. */
    Py_ssize_t nthreads = ex.nthreads;
    uint64_t rest = 0;
    for (Py_ssize_t t = 0; t < nthreads; t++) {
        rest += ft_export_estimate(&ex, t);
    }
    size_t done = 0;
    uint32_t max_depth = 0;
    int write_err, interrupted = 0, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    OUT_LIT(&out, "{");
    out_bytes(&out, head_s, strlen(head_s));
    OUT_LIT(&out, "\"traceEvents\":[");
    out_bytes(&out, prelude_s, strlen(prelude_s));
    int first = prelude_s[0] == '\0';
    /* Stops at an interruption or a write error: no closing part then,
     * so even a file written in place does not look complete. */
    for (Py_ssize_t t = 0; t < nthreads && !interrupted && !out.failed; t++) {
        if (ft_export_thread(&ex, t, &te) < 0) {
            interrupted = nomem = 1;
            break;
        }
        size_t n = te.head.len + te.body.len;
        rest -= ft_export_estimate(&ex, t);
        /* progress's total: exact for the threads replayed, estimated for
         * the others. */
        size_t total = done + n + (size_t)rest;
        for (size_t i = 0; i < n && !out.failed; i++, done++) {
            if (out_progress(progress, done, total, ex.pid, &_save) < 0) {
                interrupted = 1;
                break;
            }
            const ft_event *ev = ft_thread_event(&te, i);
            if (ev->depth > max_depth) {
                max_depth = ev->depth;
            }
            const func_json *fj = &funcs[ev->func & ~FT_ID_IGNORED];
            const char *head = ev->is_c ? tids[t].c : tids[t].py;
            size_t head_len = ev->is_c ? tids[t].c_len : tids[t].py_len;
            /* One reservation per event, then plain stores. */
            char *p = out_reserve(&out, EVENT_FIXED_MAX + head_len
                                        + fj->tail_len);
            if (p == NULL) {
                interrupted = nomem = 1;
                break;
            }
            if (!first) {
                p = PUT_LIT(p, ",\n");
            }
            first = 0;
            memcpy(p, head, head_len);
            p = put_us(p + head_len, ev->start_ns - origin_ns);
            p = PUT_LIT(p, ",\"dur\":");
            p = put_us(p, ev->end_ns - ev->start_ns);
            memcpy(p, fj->tail, fj->tail_len);
            p += fj->tail_len;
            if (ev->open_at_start) {
                p = PUT_LIT(p, ",\"open_at_start\":true");
            }
            if (ev->open_at_stop) {
                p = PUT_LIT(p, ",\"open_at_stop\":true");
            }
            if (ev->open_at_loss) {
                p = PUT_LIT(p, ",\"open_at_loss\":true");
            }
            p = PUT_LIT(p, "}}");
            out_commit(&out, p);
        }
    }
    if (!interrupted) {
        if (postlude_s[0] != '\0') {
            if (!first) {
                OUT_LIT(&out, ",\n");
            }
            out_bytes(&out, postlude_s, strlen(postlude_s));
        }
        OUT_LIT(&out, "]}\n");
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
    if (funcs != NULL) {
        for (uint32_t i = 0; i < nfuncs; i++) {
            free(funcs[i].tail);
        }
        free(funcs);
    }
    free(tids);
    Py_DECREF(path_obj);
    Py_DECREF(name_obj);
    return result;
}
