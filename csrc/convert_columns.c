/* _ChromeColumns: frametrace convert's events, from JSON text straight
 * into the events table's column buffers (frametrace/_convert_stream.py
 * wraps them as Arrow arrays), no Python object per event.  parse() takes
 * the lines export_chrome.c writes (chrome_line.h) whose function and
 * thread were registered (function(), thread()) with the GIL released;
 * add() takes one call the Python reader parsed (any other layout).  Both
 * nest a call as the loader does (_ChromeEvents.place(): the innermost
 * open call enclosing it is its parent), so a call's id (its index in the
 * file), parent, depth, self time and outermost flag are the whole file's.
 * flush() hands over the rows of the calls no longer open; open ones stay,
 * with their stacks, for the next chunk. */
#include "state.h"
#include "chrome_line.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t row;    /* in the buffers */
    int64_t start, end;
    int32_t func;
    uint8_t oas, oast, oal;
} frame;

typedef struct {
    int64_t pid, tid;
    frame *stack;
    size_t depth, cap;
    int32_t *open;  /* open activations per function (outermost's count) */
    size_t nopen;
} cthread;

typedef struct {
    uint64_t hash;
    char *text;     /* a copy of the key text; NULL: a free slot */
    size_t len;
    int32_t func;
} fslot;

enum { R_ID, R_START, R_END, R_PARENT, R_SELF, N_I64 };
enum { R_DEPTH, R_FUNC, R_THREAD, N_I32 };
#define F_OAS 1
#define F_OAST 2
#define F_OUTER 4

typedef struct {
    PyObject_HEAD
    int busy;              /* parse() runs without the GIL */
    fslot *fmap;           /* function key text -> number */
    size_t fcap, flen;
    int32_t nfuncs;        /* functions numbered so far */
    cthread *threads;      /* by number */
    int32_t nthreads;
    int32_t last;          /* the thread of the previous line */
    int64_t *i64[N_I64];
    int32_t *i32[N_I32];
    uint8_t *flags;
    size_t n, cap;         /* rows held */
    int64_t next_id;
} columns;

/* Eight bytes at a time: the key texts are some 60 bytes long, hashed
 * once a line. */
static inline uint64_t
key_hash(const Py_UCS1 *s, size_t len, int is_c)
{
    const uint64_t m = 0xff51afd7ed558ccdULL;
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ len ^ ((uint64_t)is_c << 63), w;
    size_t k = 0;
    for (; k + 8 <= len; k += 8) {
        memcpy(&w, s + k, 8);
        h = (h ^ w) * m;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s + k, len - k);
    h = (h ^ w) * m;
    return h ^ (h >> 29);
}

static fslot *
fmap_slot(fslot *map, size_t cap, uint64_t hash, const Py_UCS1 *s, size_t len)
{
    size_t i = (size_t)hash & (cap - 1);
    while (map[i].text != NULL
           && !(map[i].hash == hash && map[i].len == len
                && memcmp(map[i].text, s, len) == 0)) {
        i = (i + 1) & (cap - 1);
    }
    return &map[i];
}

/* The number of the function of key text s (is_c in the hash), -1 if
 * unknown. */
static inline int32_t
func_of(const columns *cv, const Py_UCS1 *s, size_t len, int is_c)
{
    if (cv->fcap == 0) {
        return -1;
    }
    fslot *slot = fmap_slot(cv->fmap, cv->fcap, key_hash(s, len, is_c), s, len);
    return slot->text == NULL ? -1 : slot->func;
}

/* Room for one more row: 0, -1 when out of memory (no exception: it may
 * run without the GIL). */
static int
reserve_row(columns *cv)
{
    if (cv->n < cv->cap) {
        return 0;
    }
    size_t cap = cv->cap ? cv->cap * 2 : 1 << 12;
    if (cap > (size_t)PY_SSIZE_T_MAX / 8) {
        return -1;
    }
    for (int c = 0; c < N_I64; c++) {
        int64_t *p = PyMem_RawRealloc(cv->i64[c], cap * 8);
        if (p == NULL) {
            return -1;
        }
        cv->i64[c] = p;
    }
    for (int c = 0; c < N_I32; c++) {
        int32_t *p = PyMem_RawRealloc(cv->i32[c], cap * 4);
        if (p == NULL) {
            return -1;
        }
        cv->i32[c] = p;
    }
    uint8_t *f = PyMem_RawRealloc(cv->flags, cap);
    if (f == NULL) {
        return -1;
    }
    cv->flags = f;
    cv->cap = cap;
    return 0;
}

/* Pushes a call on thread t as the loader nests it: 0, -1 when out of
 * memory or too deep (no exception). */
static int
push(columns *cv, cthread *t, int32_t func, int64_t start, int64_t end,
     uint8_t oas, uint8_t oast, uint8_t oal)
{
    while (t->depth > 0) {
        frame *top = &t->stack[t->depth - 1];
        if (top->start <= start && end <= top->end && (top->oas || !oas)
            && (top->oast || !oast) && (top->oal || !oal)) {
            break;
        }
        t->open[top->func]--;
        t->depth--;
    }
    if (t->depth >= (size_t)INT32_MAX || reserve_row(cv) < 0) {
        return -1;
    }
    if (t->depth == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        frame *s = PyMem_RawRealloc(t->stack, cap * sizeof(frame));
        if (s == NULL) {
            return -1;
        }
        t->stack = s;
        t->cap = cap;
    }
    if ((size_t)func >= t->nopen) {
        size_t nopen = (size_t)cv->nfuncs > t->nopen * 2 ? (size_t)cv->nfuncs
                                                         : t->nopen * 2 + 16;
        int32_t *open = PyMem_RawRealloc(t->open, nopen * sizeof(int32_t));
        if (open == NULL) {
            return -1;
        }
        memset(open + t->nopen, 0, (nopen - t->nopen) * sizeof(int32_t));
        t->open = open;
        t->nopen = nopen;
    }
    size_t row = cv->n++;
    int64_t dur = end - start;
    cv->i64[R_ID][row] = cv->next_id++;
    cv->i64[R_START][row] = start;
    cv->i64[R_END][row] = end;
    cv->i64[R_PARENT][row] = -1;
    cv->i64[R_SELF][row] = dur;
    if (t->depth > 0) {
        int64_t p = t->stack[t->depth - 1].row;
        int64_t *self = &cv->i64[R_SELF][p];
        cv->i64[R_PARENT][row] = cv->i64[R_ID][p];
        if (__builtin_sub_overflow(*self, dur, self)) {
            *self = INT64_MIN;
        }
    }
    cv->i32[R_DEPTH][row] = (int32_t)t->depth;
    cv->i32[R_FUNC][row] = func;
    cv->i32[R_THREAD][row] = (int32_t)(t - cv->threads);
    cv->flags[row] = (uint8_t)((oas ? F_OAS : 0) | (oast ? F_OAST : 0)
                               | (t->open[func] == 0 ? F_OUTER : 0));
    t->open[func]++;
    t->stack[t->depth++] = (frame){(int64_t)row, start, end, func, oas, oast, oal};
    return 0;
}

static int
check_idle(columns *cv)
{
    if (cv->busy) {
        PyErr_SetString(PyExc_RuntimeError, "_ChromeColumns is in use by another thread");
        return -1;
    }
    return 0;
}

/* function(key, is_c, number): lines whose text from the name's opening
 * quote to the file's closing quote is key (None: no text yet) are the
 * function number, the next one or one numbered before. */
static PyObject *
columns_function(columns *cv, PyObject *const *args, Py_ssize_t nargs)
{
    int is_c;
    long func;
    if (nargs != 3 || (!PyUnicode_Check(args[0]) && args[0] != Py_None)
        || (is_c = PyObject_IsTrue(args[1])) < 0
        || (func = PyLong_AsLong(args[2])) < 0
        || func > cv->nfuncs || check_idle(cv) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "function(key: str or None, "
                            "is_c: bool, number: the next or a known one)");
        }
        return NULL;
    }
    if (func == cv->nfuncs) {
        if (cv->nfuncs == INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "too many functions");
            return NULL;
        }
        cv->nfuncs++;
    }
    if (args[0] == Py_None || PyUnicode_KIND(args[0]) != PyUnicode_1BYTE_KIND) {
        Py_RETURN_NONE;  /* no line parse() takes has it */
    }
    if ((cv->flen + 1) * 2 > cv->fcap) {
        size_t cap = cv->fcap ? cv->fcap * 2 : 256;
        fslot *map = PyMem_Calloc(cap, sizeof(fslot));
        if (map == NULL) {
            return PyErr_NoMemory();
        }
        for (size_t i = 0; i < cv->fcap; i++) {
            fslot *s = &cv->fmap[i];
            if (s->text != NULL) {
                *fmap_slot(map, cap, s->hash, (const Py_UCS1 *)s->text, s->len) = *s;
            }
        }
        PyMem_Free(cv->fmap);
        cv->fmap = map;
        cv->fcap = cap;
    }
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(args[0]);
    size_t len = (size_t)PyUnicode_GET_LENGTH(args[0]);
    uint64_t hash = key_hash(s, len, is_c);
    fslot *slot = fmap_slot(cv->fmap, cv->fcap, hash, s, len);
    if (slot->text == NULL) {
        char *text = PyMem_Malloc(len ? len : 1);
        if (text == NULL) {
            return PyErr_NoMemory();
        }
        memcpy(text, s, len);
        *slot = (fslot){hash, text, len, (int32_t)func};
        cv->flen++;
    }
    Py_RETURN_NONE;
}

/* thread(pid, tid) -> the number of the thread of these Chrome ids (a
 * new one when first met). */
static PyObject *
columns_thread(columns *cv, PyObject *const *args, Py_ssize_t nargs)
{
    long long pid, tid;
    if (nargs != 2 || check_idle(cv) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "thread(pid, tid)");
        }
        return NULL;
    }
    pid = PyLong_AsLongLong(args[0]);
    tid = pid == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    for (int32_t i = 0; i < cv->nthreads; i++) {
        if (cv->threads[i].pid == pid && cv->threads[i].tid == tid) {
            return PyLong_FromLong(i);
        }
    }
    if (cv->nthreads == INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many threads");
        return NULL;
    }
    cthread *threads = PyMem_Realloc(cv->threads,
                                     ((size_t)cv->nthreads + 1) * sizeof(cthread));
    if (threads == NULL) {
        return PyErr_NoMemory();
    }
    cv->threads = threads;
    threads[cv->nthreads] = (cthread){pid, tid, NULL, 0, 0, NULL, 0};
    return PyLong_FromLong(cv->nthreads++);
}

/* The thread of Chrome ids pid, tid; NULL when not registered. */
static inline cthread *
thread_of(columns *cv, int64_t pid, int64_t tid)
{
    if (cv->last < cv->nthreads && cv->threads[cv->last].pid == pid
        && cv->threads[cv->last].tid == tid) {
        return &cv->threads[cv->last];
    }
    for (int32_t i = 0; i < cv->nthreads; i++) {
        if (cv->threads[i].pid == pid && cv->threads[i].tid == tid) {
            cv->last = i;
            return &cv->threads[i];
        }
    }
    return NULL;
}

/* parse(buf, pos, stop, origin, late, limit) -> (the position after the
 * last line taken, the start and end of the key text of the line not
 * taken when only its function or thread was unknown (else -1, -1), how
 * many lines were taken, whether it stopped at limit rows held). */
static PyObject *
columns_parse(columns *cv, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t pos, stop, limit;
    long long origin, late;
    if (nargs != 6 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "parse(buf: str, pos, stop, origin, late, limit)");
        return NULL;
    }
    PyObject *buf = args[0];
    if ((pos = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if ((stop = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if ((origin = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if ((late = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if ((limit = PyLong_AsSsize_t(args[5])) == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (check_idle(cv) < 0) {
        return NULL;
    }
    Py_ssize_t len = PyUnicode_GET_LENGTH(buf);
    if (origin < 0 || pos < 0 || pos > len
        || PyUnicode_KIND(buf) != PyUnicode_1BYTE_KIND) {
        return Py_BuildValue("(nnnnO)", pos, (Py_ssize_t)-1, (Py_ssize_t)-1,
                             (Py_ssize_t)0, Py_False);
    }
    if (stop > len) {
        stop = len;
    }
    cursor c = {PyUnicode_1BYTE_DATA(buf), pos, len};
    Py_ssize_t miss[2] = {-1, -1}, taken = 0;
    int failed = 0, full = 0;
    cv->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    while (c.i < stop) {
        if ((Py_ssize_t)cv->n >= limit) {
            full = 1;
            break;
        }
        line ln;
        Py_ssize_t at = c.i;
        if (!parse_line(&c, &ln) || ln.ts > INT64_MAX - origin
            || ln.dur > INT64_MAX - (origin + ln.ts)
            || origin + ln.ts + ln.dur > late) {
            /* another layout, or the Python path says what is wrong */
            c.i = at;
            break;
        }
        int32_t func = func_of(cv, c.s + ln.key_start,
                               (size_t)(ln.key_end - ln.key_start), ln.is_c);
        cthread *t = func < 0 ? NULL : thread_of(cv, ln.pid, ln.tid);
        if (t == NULL) {
            c.i = at;
            miss[0] = ln.key_start;
            miss[1] = ln.key_end;
            break;
        }
        int64_t start = origin + ln.ts;
        if (push(cv, t, func, start, start + ln.dur, ln.oas, ln.oast, ln.oal) < 0) {
            c.i = at;
            failed = 1;
            break;
        }
        taken++;
    }
    Py_END_ALLOW_THREADS
    cv->busy = 0;
    if (failed) {
        return PyErr_NoMemory();
    }
    return Py_BuildValue("(nnnnO)", c.i, miss[0], miss[1], taken,
                         full ? Py_True : Py_False);
}

/* add(func, thread, start, end, open_at_start, open_at_stop,
 * open_at_loss): a call the Python reader parsed and checked. */
static PyObject *
columns_add(columns *cv, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "add(func, thread, start, end, oas, oast, oal)");
        return NULL;
    }
    long func = PyLong_AsLong(args[0]);
    long thread = func == -1 && PyErr_Occurred() ? -1 : PyLong_AsLong(args[1]);
    long long start = thread == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[2]);
    long long end = start == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[3]);
    int flags[3];
    for (int k = 0; k < 3 && !PyErr_Occurred(); k++) {
        flags[k] = PyObject_IsTrue(args[4 + k]);
    }
    if (PyErr_Occurred() || check_idle(cv) < 0) {
        return NULL;
    }
    if (func < 0 || func >= cv->nfuncs || thread < 0 || thread >= cv->nthreads
        || end < start) {
        PyErr_SetString(PyExc_ValueError, "add(): an unknown function or thread, "
                        "or an end before the start");
        return NULL;
    }
    if (push(cv, &cv->threads[thread], (int32_t)func, start, end, (uint8_t)flags[0],
             (uint8_t)flags[1], (uint8_t)flags[2]) < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* Bit i of a bitmap of n bits: the rows' flag bit (Arrow's layout). */
static PyObject *
bitmap(const uint8_t *flags, const int64_t *keep, size_t m, uint8_t bit)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((m + 7) / 8));
    if (out == NULL) {
        return NULL;
    }
    uint8_t *b = (uint8_t *)PyBytes_AS_STRING(out);
    memset(b, 0, (m + 7) / 8);
    for (size_t i = 0; i < m; i++) {
        if (flags[keep[i]] & bit) {
            b[i >> 3] |= (uint8_t)(1u << (i & 7));
        }
    }
    return out;
}

/* flush(last) -> (rows, id, start_ns, end_ns, parent, parent's validity,
 * self_ns, depth, func, thread, open_at_start, open_at_stop, outermost):
 * the rows of the calls no longer open (all when last), in the order
 * they were met; int64 and int32 columns as bytes, bools and validity as
 * Arrow's bitmaps. */
static PyObject *
columns_flush(columns *cv, PyObject *last_obj)
{
    int last = PyObject_IsTrue(last_obj);
    if (last < 0 || check_idle(cv) < 0) {
        return NULL;
    }
    size_t n = cv->n;
    /* keep: the closed rows, then the open ones (which stay, in order). */
    int64_t *keep = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    uint8_t *open = PyMem_Calloc(n ? n : 1, 1);
    PyObject *out[13] = {NULL}, *result = NULL;
    if (keep == NULL || open == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t t = 0; t < cv->nthreads; t++) {
        cthread *th = &cv->threads[t];
        if (last) {
            memset(th->open, 0, th->nopen * sizeof(int32_t));
            th->depth = 0;
        }
        for (size_t d = 0; d < th->depth; d++) {
            open[th->stack[d].row] = 1;
        }
    }
    size_t m = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!open[i]) {
            keep[m++] = (int64_t)i;
        }
    }
    out[0] = PyLong_FromSize_t(m);
    if (out[0] == NULL) {
        goto done;
    }
    for (int c = 0; c < N_I64; c++) {
        out[1 + c] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(m * 8));
        if (out[1 + c] == NULL) {
            goto done;
        }
        int64_t *dst = (int64_t *)PyBytes_AS_STRING(out[1 + c]), *src = cv->i64[c];
        for (size_t i = 0; i < m; i++) {
            dst[i] = src[keep[i]];
        }
    }
    /* The parent's validity after the int64 columns: out[5] is self_ns. */
    out[12] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((m + 7) / 8));
    if (out[12] == NULL) {
        goto done;
    }
    uint8_t *valid = (uint8_t *)PyBytes_AS_STRING(out[12]);
    memset(valid, 0, (m + 7) / 8);
    const int64_t *parent = (const int64_t *)PyBytes_AS_STRING(out[1 + R_PARENT]);
    for (size_t i = 0; i < m; i++) {
        if (parent[i] >= 0) {
            valid[i >> 3] |= (uint8_t)(1u << (i & 7));
        }
    }
    for (int c = 0; c < N_I32; c++) {
        out[6 + c] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(m * 4));
        if (out[6 + c] == NULL) {
            goto done;
        }
        int32_t *dst = (int32_t *)PyBytes_AS_STRING(out[6 + c]), *src = cv->i32[c];
        for (size_t i = 0; i < m; i++) {
            dst[i] = src[keep[i]];
        }
    }
    static const uint8_t bits[3] = {F_OAS, F_OAST, F_OUTER};
    for (int b = 0; b < 3; b++) {
        out[9 + b] = bitmap(cv->flags, keep, m, bits[b]);
        if (out[9 + b] == NULL) {
            goto done;
        }
    }
    /* The open rows to the front; their frames told where they went. */
    int64_t *moved = keep + m;  /* unused room: n - m slots */
    for (size_t i = 0; i < n; i++) {
        if (open[i]) {
            for (int c = 0; c < N_I64; c++) {
                cv->i64[c][k] = cv->i64[c][i];
            }
            for (int c = 0; c < N_I32; c++) {
                cv->i32[c][k] = cv->i32[c][i];
            }
            cv->flags[k] = cv->flags[i];
            moved[k] = (int64_t)i;
            k++;
        }
    }
    for (int32_t t = 0; t < cv->nthreads; t++) {
        cthread *th = &cv->threads[t];
        size_t lo = 0;
        for (size_t d = 0; d < th->depth; d++) {  /* rows grow up a stack */
            while (moved[lo] != th->stack[d].row) {
                lo++;
            }
            th->stack[d].row = (int64_t)lo;
        }
    }
    cv->n = k;
    result = Py_BuildValue("(OOOOOOOOOOOOO)", out[0], out[1 + R_ID], out[1 + R_START],
                           out[1 + R_END], out[1 + R_PARENT], out[12],
                           out[1 + R_SELF], out[6 + R_DEPTH], out[6 + R_FUNC],
                           out[6 + R_THREAD], out[9], out[10], out[11]);
done:
    for (int i = 0; i < 13; i++) {
        Py_XDECREF(out[i]);
    }
    PyMem_Free(keep);
    PyMem_Free(open);
    return result;
}

/* How many rows are held, and the next call's id. */
static PyObject *
columns_counts(columns *cv, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(nL)", (Py_ssize_t)cv->n, (long long)cv->next_id);
}

static void
columns_dealloc(columns *cv)
{
    PyTypeObject *type = Py_TYPE(cv);
    for (size_t i = 0; i < cv->fcap; i++) {
        PyMem_Free(cv->fmap[i].text);
    }
    PyMem_Free(cv->fmap);
    for (int32_t t = 0; t < cv->nthreads; t++) {
        PyMem_RawFree(cv->threads[t].stack);
        PyMem_RawFree(cv->threads[t].open);
    }
    PyMem_Free(cv->threads);
    for (int c = 0; c < N_I64; c++) {
        PyMem_RawFree(cv->i64[c]);
    }
    for (int c = 0; c < N_I32; c++) {
        PyMem_RawFree(cv->i32[c]);
    }
    PyMem_RawFree(cv->flags);
    type->tp_free((PyObject *)cv);
    Py_DECREF(type);
}

static PyMethodDef columns_methods[] = {
    {"function", (PyCFunction)(void (*)(void))columns_function, METH_FASTCALL,
     "function(key, is_c, number): lines of this key text are function number "
     "(the next one, or one already numbered)."},
    {"thread", (PyCFunction)(void (*)(void))columns_thread, METH_FASTCALL,
     "thread(pid, tid) -> the number of the thread of these Chrome ids."},
    {"parse", (PyCFunction)(void (*)(void))columns_parse, METH_FASTCALL,
     "parse(buf, pos, stop, origin, late, limit) -> (position after the last line "
     "taken, start and end of the unknown key text or -1, -1, lines taken, "
     "whether limit rows are held)."},
    {"add", (PyCFunction)(void (*)(void))columns_add, METH_FASTCALL,
     "add(func, thread, start, end, open_at_start, open_at_stop, open_at_loss)."},
    {"flush", (PyCFunction)columns_flush, METH_O,
     "flush(last) -> the rows of the calls no longer open, as column buffers."},
    {"counts", (PyCFunction)columns_counts, METH_NOARGS,
     "counts() -> (rows held, calls met)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot columns_slots[] = {
    {Py_tp_dealloc, columns_dealloc},
    {Py_tp_methods, columns_methods},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_doc, "frametrace convert's events as column buffers, chunk by chunk."},
    {0, NULL},
};

static PyType_Spec columns_spec = {
    .name = "frametrace._tracer._ChromeColumns",
    .basicsize = sizeof(columns),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = columns_slots,
};

int
ft_add_chrome_columns(PyObject *module)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &columns_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, "_ChromeColumns", type);
    Py_DECREF(type);
    return rc;
}
