/* Chrome trace event JSON (Perfetto UI, chrome://tracing), written straight
 * from the records, replayed one thread at a time with the GIL released:
 * no Python object per event, no copy of all the events.
 *
 * Every Python/C event is one complete event ("ph": "X").  ts and dur are
 * microseconds with three decimals, so nanoseconds survive; ts counts from
 * origin_ns (kept in otherData by the caller), since absolute monotonic
 * nanoseconds would exceed what a double holds exactly. */
#include "state.h"
#include "export_driver.h"
#include "gil_share.h"

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

/* Other tools' slices (frametrace.torch's ops), written after the frames:
 * each read with the GIL as far as it needs Python (its name, category
 * and args as JSON text, each distinct one rendered once), then sorted
 * and written without it. */
typedef struct {
    const char *name, *cat;     /* JSON literals, in the memo's bytes */
    size_t name_len, cat_len;
    unsigned long long tid;
    const char *args;           /* ,"args":{...} in the memo, or NULL */
    size_t args_len;
    int64_t start, end;
    size_t order;       /* its position in its list: ties keep it */
} slice_json;

typedef struct {
    slice_json *items;
    size_t n;
} slice_list;

static void
free_slice_lists(slice_list *lists, Py_ssize_t n)
{
    if (lists == NULL) {
        return;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        free(lists[k].items);
    }
    free(lists);
}

/* A slice's field: from a Slice (a NamedTuple: by position) or any object
 * with the attribute.  New reference, or NULL with an exception (or, for
 * an optional one, NULL and none). */
static PyObject *
slice_field(PyObject *x, Py_ssize_t pos, const char *attr, int optional)
{
    if (PyTuple_Check(x)) {
        if (pos < PyTuple_GET_SIZE(x)) {
            return Py_NewRef(PyTuple_GET_ITEM(x, pos));
        }
        if (optional) {
            return NULL;
        }
    }
    PyObject *v = PyObject_GetAttrString(x, attr);
    if (v == NULL && optional && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
    }
    return v;
}

static int
slice_time(PyObject *x, Py_ssize_t pos, const char *attr, int64_t *out)
{
    PyObject *v = slice_field(x, pos, attr, 0);
    if (v == NULL) {
        return -1;
    }
    int overflow = 0;
    long long t = PyLong_Check(v) && !PyBool_Check(v)
                  ? PyLong_AsLongLongAndOverflow(v, &overflow) : -1;
    int bad = !PyLong_Check(v) || PyBool_Check(v) || overflow;
    Py_DECREF(v);
    if (bad) {
        PyErr_Format(PyExc_TypeError, "thread_slices, slice_tracks: a "
                     "slice's %s must be an int64", attr);
        return -1;
    }
    if (t == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = t;
    return 0;
}

/* The JSON text of key (a str: its literal; an args dict: ,"args":{...}),
 * made once a write: memo maps the str, or the dict's id, to a bytes
 * object that lives as long as the memo.  Borrowed, or NULL with an
 * exception. */
static PyObject *
rendered(PyObject *memo, PyObject *key, PyObject *args_text)
{
    PyObject *id = NULL;
    PyObject *memo_key = key;
    if (args_text != NULL) {  /* a dict is no key: its id is, the dict kept */
        id = PyLong_FromVoidPtr(key);
        if (id == NULL) {
            return NULL;
        }
        memo_key = id;
    }
    PyObject *found = PyDict_GetItemWithError(memo, memo_key);
    if (found != NULL || PyErr_Occurred()) {
        Py_XDECREF(id);
        return found != NULL && args_text != NULL
               ? PyTuple_GET_ITEM(found, 1) : found;
    }
    PyObject *bytes = NULL;
    if (args_text == NULL) {
        size_t len;
        char *text = json_string(key, &len);
        if (text != NULL) {
            bytes = PyBytes_FromStringAndSize(text, (Py_ssize_t)len);
            free(text);
        }
    }
    else {
        PyObject *text = PyObject_CallFunctionObjArgs(args_text, key, NULL);
        Py_ssize_t len;
        const char *t = text != NULL ? PyUnicode_AsUTF8AndSize(text, &len)
                                     : NULL;
        if (t != NULL) {
            bytes = PyBytes_FromStringAndSize(NULL, len + 8);
            if (bytes != NULL) {
                memcpy(PyBytes_AS_STRING(bytes), ",\"args\":", 8);
                memcpy(PyBytes_AS_STRING(bytes) + 8, t, (size_t)len);
            }
        }
        Py_XDECREF(text);
    }
    PyObject *entry = bytes;
    if (bytes != NULL && args_text != NULL) {
        entry = PyTuple_Pack(2, key, bytes);  /* the id stays the dict's */
        Py_DECREF(bytes);
    }
    int rc = entry != NULL ? PyDict_SetItem(memo, memo_key, entry) : -1;
    Py_XDECREF(entry);
    Py_XDECREF(id);
    /* The memo holds it now. */
    return rc < 0 ? NULL : args_text != NULL ? PyTuple_GET_ITEM(entry, 1)
                                             : entry;
}

static int
describe_slice(PyObject *x, unsigned long long tid, PyObject *args_text,
               PyObject *memo, slice_json *sj)
{
    PyObject *name = slice_field(x, 0, "name", 0);
    PyObject *cat = name != NULL ? slice_field(x, 1, "category", 0) : NULL;
    PyObject *args = NULL;
    int rc = -1;
    if (cat == NULL) {
        goto done;
    }
    if (!PyUnicode_Check(name) || !PyUnicode_Check(cat)) {
        PyErr_Format(PyExc_TypeError, "thread_slices, slice_tracks: a "
                     "slice's name and category must be str, not %.100s and "
                     "%.100s", Py_TYPE(name)->tp_name,
                     Py_TYPE(cat)->tp_name);
        goto done;
    }
    if (slice_time(x, 2, "start_ns", &sj->start) < 0
        || slice_time(x, 3, "end_ns", &sj->end) < 0) {
        goto done;
    }
    PyObject *name_json = rendered(memo, name, NULL);
    PyObject *cat_json = name_json != NULL ? rendered(memo, cat, NULL) : NULL;
    if (cat_json == NULL) {
        goto done;
    }
    sj->name = PyBytes_AS_STRING(name_json);
    sj->name_len = (size_t)PyBytes_GET_SIZE(name_json);
    sj->cat = PyBytes_AS_STRING(cat_json);
    sj->cat_len = (size_t)PyBytes_GET_SIZE(cat_json);
    sj->tid = tid;
    /* args: written when not empty, as json.dumps writes them. */
    args = slice_field(x, 4, "args", 1);
    if (args == NULL && PyErr_Occurred()) {
        goto done;
    }
    int truth = args != NULL ? PyObject_IsTrue(args) : 0;
    if (truth < 0) {
        goto done;
    }
    if (truth > 0) {
        PyObject *args_json = rendered(memo, args, args_text);
        if (args_json == NULL) {
            goto done;
        }
        sj->args = PyBytes_AS_STRING(args_json);
        sj->args_len = (size_t)PyBytes_GET_SIZE(args_json);
    }
    rc = 0;
done:
    Py_XDECREF(name);
    Py_XDECREF(cat);
    Py_XDECREF(args);
    return rc;
}

/* slices: [(tid, [Slice])]; args_text(args) -> their JSON text; memo:
 * a dict that keeps what the lists point to. */
static int
describe_slices(PyObject *slices, PyObject *args_text, PyObject *memo,
                slice_list **lists, Py_ssize_t *nlists)
{
    *lists = NULL;
    *nlists = 0;
    if (slices == NULL || slices == Py_None) {
        return 0;
    }
    if (!PyList_Check(slices) || args_text == NULL) {
        PyErr_SetString(PyExc_TypeError, "_write_chrome(): slices must be a "
                        "list of (tid, [Slice]), with args_text");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(slices);
    ft_gil_share share;
    ft_gil_share_begin(&share);
    *lists = calloc((size_t)n + 1, sizeof(slice_list));
    if (*lists == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *nlists = n;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *pair = PyList_GET_ITEM(slices, k);
        unsigned long long tid;
        PyObject *items;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2
            || !PyList_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "_write_chrome(): slices must "
                            "be a list of (tid, [Slice])");
            return -1;
        }
        tid = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 0));
        if (tid == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
        /* Kept alive while the GIL is shared: another thread may change
         * the slices list meanwhile. */
        items = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
        Py_ssize_t m = PyList_GET_SIZE(items);
        (*lists)[k].items = calloc((size_t)m + 1, sizeof(slice_json));
        if ((*lists)[k].items == NULL) {
            Py_DECREF(items);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < m && i < PyList_GET_SIZE(items); i++) {
            ft_gil_share_point(&share);
            if (i >= PyList_GET_SIZE(items)) {
                break;
            }
            slice_json *sj = &(*lists)[k].items[i];
            (*lists)[k].n = (size_t)i + 1;
            sj->order = (size_t)i;
            PyObject *x = Py_NewRef(PyList_GET_ITEM(items, i));
            int rc = describe_slice(x, tid, args_text, memo, sj);
            Py_DECREF(x);
            if (rc < 0) {
                Py_DECREF(items);
                return -1;
            }
        }
        Py_DECREF(items);
    }
    return 0;
}

static int
slice_order(const void *a, const void *b)
{
    const slice_json *x = a, *y = b;
    if (x->start != y->start) {
        return x->start < y->start ? -1 : 1;
    }
    if (x->end != y->end) {
        return x->end > y->end ? -1 : 1;
    }
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Writes the slices, each list sorted by start then longest first (ties
 * in their order): pure C.  first: nothing written yet. */
static void
write_slices(out_t *out, slice_list *lists, Py_ssize_t nlists, long long pid,
             int64_t origin_ns, int *first)
{
    static const char a[] = "{\"ph\":\"X\",\"name\":", b[] = ",\"cat\":";
    for (Py_ssize_t k = 0; k < nlists && !out->failed; k++) {
        slice_list *l = &lists[k];
        qsort(l->items, l->n, sizeof(*l->items), slice_order);
        for (size_t i = 0; i < l->n && !out->failed; i++) {
            const slice_json *sj = &l->items[i];
            char *p = out_reserve(out, 2 + sizeof(a) + sj->name_len
                                       + sizeof(b) + sj->cat_len + 64
                                       + FT_US_MAX + 7 + FT_US_MAX
                                       + sj->args_len + 1);
            if (p == NULL) {
                return;
            }
            if (!*first) {
                p = PUT_LIT(p, ",\n");
            }
            *first = 0;
            p = PUT_LIT(p, a);
            memcpy(p, sj->name, sj->name_len);
            p = PUT_LIT(p + sj->name_len, b);
            memcpy(p, sj->cat, sj->cat_len);
            p += sj->cat_len;
            p += snprintf(p, 64, ",\"pid\":%lld,\"tid\":%llu,\"ts\":", pid,
                          sj->tid);
            p = put_us(p, sj->start - origin_ns);
            p = PUT_LIT(p, ",\"dur\":");
            p = put_us(p, sj->end - sj->start);
            if (sj->args != NULL) {
                memcpy(p, sj->args, sj->args_len);
                p += sj->args_len;
            }
            *p++ = '}';
            out_commit(out, p);
        }
    }
}

/* The most an event writes besides its thread's head and its function's
 * tail: the separator, ts, dur, both open flags and the closing braces. */
#define EVENT_FIXED_MAX (2 + FT_US_MAX + 7 + FT_US_MAX + 21 + 20 + 20 + 2)

/* The Chrome encoder: what the driver's steps share. */
typedef struct {
    long long pid;
    int64_t origin_ns;
    const char *head, *prelude, *postlude;  /* UTF-8 of the caller's str */
    func_json *funcs;   /* per function id, nfuncs + 1 */
    uint32_t nfuncs;
    thread_json *tids;  /* per thread */
    slice_list *lists;
    Py_ssize_t nlists;
    int first;          /* nothing written in traceEvents yet */
} chrome_enc;

/* The escaped names of every function and the event heads of every
 * thread.  0, or -1 with an exception. */
static int
chrome_describe(void *enc, ft_driver *d)
{
    chrome_enc *c = enc;
    c->nfuncs = d->nfuncs;
    c->funcs = calloc((size_t)d->nfuncs + 1, sizeof(func_json));
    c->tids = calloc((size_t)d->nthreads + 1, sizeof(thread_json));
    if (c->funcs == NULL || c->tids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < d->nfuncs; i++) {
        if (describe_func(&d->funcs[i], &c->funcs[i]) < 0) {
            return -1;
        }
    }
    /* The prelude's thread metadata uses the same tids. */
    for (Py_ssize_t i = 0; i < d->nthreads; i++) {
        describe_thread(&c->tids[i], c->pid, d->tids[i]);
    }
    return 0;
}

static int
chrome_begin(void *enc, ft_driver *d)
{
    chrome_enc *c = enc;
    OUT_LIT(&d->out, "{");
    out_bytes(&d->out, c->head, strlen(c->head));
    OUT_LIT(&d->out, "\"traceEvents\":[");
    out_bytes(&d->out, c->prelude, strlen(c->prelude));
    c->first = c->prelude[0] == '\0';
    return 0;
}

static int
chrome_thread(void *enc, ft_driver *d, Py_ssize_t t,
              const ft_thread_events *te)
{
    chrome_enc *c = enc;
    const thread_json *tj = &c->tids[t];
    size_t n = te->head.len + te->body.len;
    for (size_t i = 0; i < n && !d->out.failed; i++) {
        const ft_event *ev = ft_thread_event(te, i);
        if (ft_driver_event(d, ev) < 0) {
            return -1;
        }
        const func_json *fj = &c->funcs[ev->func & ~FT_ID_IGNORED];
        const char *head = ev->is_c ? tj->c : tj->py;
        size_t head_len = ev->is_c ? tj->c_len : tj->py_len;
        /* One reservation per event, then plain stores. */
        char *p = out_reserve(&d->out, EVENT_FIXED_MAX + head_len
                                       + fj->tail_len);
        if (p == NULL) {
            d->nomem = 1;
            return -1;
        }
        if (!c->first) {
            p = PUT_LIT(p, ",\n");
        }
        c->first = 0;
        memcpy(p, head, head_len);
        p = put_us(p + head_len, ev->start_ns - c->origin_ns);
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
        out_commit(&d->out, p);
    }
    return 0;
}

static int
chrome_end(void *enc, ft_driver *d)
{
    chrome_enc *c = enc;
    if (c->postlude[0] != '\0') {
        if (!c->first) {
            OUT_LIT(&d->out, ",\n");
        }
        out_bytes(&d->out, c->postlude, strlen(c->postlude));
        c->first = 0;
    }
    write_slices(&d->out, c->lists, c->nlists, c->pid, c->origin_ns,
                 &c->first);
    OUT_LIT(&d->out, "]}\n");
    return 0;
}

static const ft_encoder chrome_encoder = {
    .who = "_write_chrome()",
    .describe = chrome_describe,
    .begin = chrome_begin,
    .thread = chrome_thread,
    .end = chrome_end,
};

/* _write_chrome(path, *, pid, origin_ns, head, prelude, compress,
 *               progress, name, postlude, slices, args_text) -- the
 * document is {head"traceEvents":[prelude, events, postlude, slices]}:
 * head (members ending with a comma) first, so that a reader has the
 * metadata before the events; postlude (default none) and slices
 * ([(tid, [Slice])], each list sorted by start then longest first;
 * args_text(args) their args' JSON text): events after the frames, which
 * a reader that keeps file order for equal times nests inside them.
 * name: the path errors show (default path; the caller writes to a
 * temporary and renames it). */
PyObject *
ft_write_chrome_source(const ft_source *src, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "pid", "origin_ns", "head", "prelude",
                             "compress", "progress", "name", "postlude",
                             "slices", "args_text", NULL};
    PyObject *path_obj, *name_obj = NULL, *prelude = NULL, *head = NULL;
    PyObject *postlude = NULL, *slices = NULL, *args_text = NULL;
    PyObject *progress = NULL;
    long long pid = -1, origin_ns = 0;
    int compress = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "O&|$LLUUpOO&UOO:_write_chrome",
                                     kwlist, PyUnicode_FSConverter, &path_obj,
                                     &pid, &origin_ns, &head, &prelude,
                                     &compress, &progress,
                                     PyUnicode_FSConverter, &name_obj,
                                     &postlude, &slices, &args_text)) {
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
    chrome_enc c = {.pid = pid, .origin_ns = origin_ns};
    PyObject *result = NULL;
    PyObject *slice_memo = NULL;  /* keeps what c.lists point to */
    c.prelude = PyUnicode_AsUTF8(prelude);
    c.head = PyUnicode_AsUTF8(head);
    c.postlude = postlude != NULL ? PyUnicode_AsUTF8(postlude) : "";
    if (c.prelude == NULL || c.head == NULL || c.postlude == NULL) {
        goto done;
    }
    /* The slices read first: that runs Python code, which must not run
     * once the records are pinned and the names taken. */
    slice_memo = PyDict_New();
    if (slice_memo == NULL
        || describe_slices(slices, args_text, slice_memo, &c.lists,
                           &c.nlists) < 0) {
        goto done;
    }
    result = ft_driver_run(&chrome_encoder, &c, src, path_obj, name_obj,
                           compress, progress);
done:
    if (c.funcs != NULL) {
        for (uint32_t i = 0; i < c.nfuncs; i++) {
            free(c.funcs[i].tail);
        }
        free(c.funcs);
    }
    free(c.tids);
    free_slice_lists(c.lists, c.nlists);
    Py_XDECREF(slice_memo);
    Py_DECREF(path_obj);
    Py_DECREF(name_obj);
    return result;
}

PyObject *
ft_write_chrome(ft_tracer *tracer, PyObject *args, PyObject *kwargs)
{
    ft_source src = {.tracer = tracer};
    return ft_write_chrome_source(&src, args, kwargs);
}
