/* The loader's fast path, _load_chrome_calls(): the complete events of a
 * Chrome trace laid out as export_chrome.c writes them (one per line, keys
 * in a fixed order, followed by ",\n"), parsed straight into Events nested
 * per thread.  frametrace/_reader.py keeps every check and every error:
 * this takes only the lines whose function (name and "path:line") and
 * thread the loader has already met and checked, and stops at the first
 * line it does not take (another layout, a function or thread not seen
 * yet, a time out of int64 or ending after the earliest stop, a line cut by
 * the end of the buffer), where the loader's Python path goes on.  A line
 * it takes gives the Event the Python path would have given (the recorded
 * form: the function's and the thread's tuples shared, as getEvents()
 * builds them).  _merge_chrome_lines() is frametrace/merge.py's: the same
 * lines, of names, locations and pids merge has checked, written back with
 * the pid replaced and ts moved.  Only buffers of one byte per character
 * (ASCII, Latin-1) are parsed; others are left to the Python path whole. */
#include "state.h"
#include "chrome_line.h"

#include <stdint.h>
#include <string.h>

/* The values of the key texts met in one call, by the text's bytes: most
 * lines repeat a function already met, and a lookup here costs less than
 * making the key a str and looking it up in the dict. */
#define KEY_SLOTS 1024  /* a power of two */

typedef struct {
    uint64_t hash;
    const Py_UCS1 *text;  /* in the buffer, which outlives the call */
    Py_ssize_t len;
    PyObject *value;      /* borrowed from the dict, unchanged meanwhile */
} key_slot;

/* The value of buf[start:end] in dict (kind tells two dicts' keys apart in
 * one cache): borrowed, NULL when absent (an exception set on error). */
static PyObject *
lookup_key(key_slot *slots, PyObject *dict, int kind, PyObject *buf,
           const Py_UCS1 *s, Py_ssize_t start, Py_ssize_t end)
{
    uint64_t hash = 1469598103934665603ULL ^ (uint64_t)kind;
    for (Py_ssize_t k = start; k < end; k++) {
        hash = (hash ^ s[k]) * 1099511628211ULL;
    }
    key_slot *slot = &slots[hash & (KEY_SLOTS - 1)];
    Py_ssize_t len = end - start;
    if (slot->value != NULL && slot->hash == hash && slot->len == len
        && memcmp(slot->text, s + start, (size_t)len) == 0) {
        return slot->value;
    }
    PyObject *key = PyUnicode_Substring(buf, start, end);
    if (key == NULL) {
        return NULL;
    }
    PyObject *value = PyDict_GetItemWithError(dict, key);
    Py_DECREF(key);
    if (value != NULL) {
        slot->hash = hash;
        slot->text = s + start;
        slot->len = len;
        slot->value = value;
    }
    return value;
}

/* The span and open flags of calls[index]; 0, or -1 (no exception) when it
 * is no Event. */
static int
event_at(ft_state *state, PyObject *calls, PyObject *index, ft_event *out)
{
    Py_ssize_t i = PyLong_AsSsize_t(index);
    if (i < 0 || i >= PyList_GET_SIZE(calls)) {
        PyErr_Clear();
        return -1;
    }
    return ft_event_span(state, PyList_GET_ITEM(calls, i), out);
}

/* Depth and parent of the next event of a thread whose open events'
 * indices are stack, as the loader's _ChromeEvents.on_event() finds them;
 * pushes it.  0, 1 when an event on the stack is not one this can read
 * (the Python path goes on), -1 with an exception set. */
static int
place(ft_state *state, PyObject *calls, PyObject *stack, ft_event *ev)
{
    Py_ssize_t depth = PyList_GET_SIZE(stack);
    while (depth > 0) {
        ft_event top;
        if (event_at(state, calls, PyList_GET_ITEM(stack, depth - 1),
                     &top) < 0) {
            return 1;
        }
        if (top.start_ns <= ev->start_ns && ev->end_ns <= top.end_ns
            && (top.open_at_start || !ev->open_at_start)
            && (top.open_at_stop || !ev->open_at_stop)
            && (top.open_at_loss || !ev->open_at_loss)) {
            break;
        }
        depth--;
    }
    if (depth < PyList_GET_SIZE(stack)
        && PyList_SetSlice(stack, depth, PyList_GET_SIZE(stack), NULL) < 0) {
        return -1;
    }
    ev->depth = (uint32_t)depth;
    ev->parent = -1;
    if (depth > 0) {
        ev->parent = PyLong_AsSsize_t(PyList_GET_ITEM(stack, depth - 1));
        if (ev->parent == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    PyObject *index = PyLong_FromSsize_t(PyList_GET_SIZE(calls));
    if (index == NULL) {
        return -1;
    }
    int rc = PyList_Append(stack, index);
    Py_DECREF(index);
    return rc;
}

/* value as an int64: 0, 1 when it does not fit (*out then the nearest
 * bound), -1 with an exception set (not an int). */
static int
as_int64(PyObject *value, int64_t *out)
{
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (*out == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        *out = overflow > 0 ? INT64_MAX : INT64_MIN;
        return 1;
    }
    return 0;
}

/* pos and stop as Py_ssize_t; -1 with an exception set. */
static int
as_span(PyObject *pos_obj, PyObject *stop_obj, Py_ssize_t *pos,
        Py_ssize_t *stop)
{
    *pos = PyLong_AsSsize_t(pos_obj);
    if (*pos == -1 && PyErr_Occurred()) {
        return -1;
    }
    *stop = PyLong_AsSsize_t(stop_obj);
    return *stop == -1 && PyErr_Occurred() ? -1 : 0;
}

/* A line whose key (a function, a thread, a pid) the Python side has not
 * met yet: the scan stops before the line and tells the key's span. */
static inline void
stop_at_miss(cursor *c, Py_ssize_t at, const line *ln, Py_ssize_t miss[2])
{
    c->i = at;
    miss[0] = ln->key_start;
    miss[1] = ln->key_end;
}

/* _load_chrome_calls(buf, pos, stop, calls, infos_py, infos_c, threads,
 * origin, late) -> the position after the last line taken. */
static PyObject *
load_chrome_calls(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "_load_chrome_calls() takes 9 "
                     "arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buf = args[0], *calls = args[3], *threads = args[6];
    PyObject *infos[2] = {args[4], args[5]};
    if (!PyUnicode_Check(buf) || !PyList_Check(calls)
        || !PyDict_Check(infos[0]) || !PyDict_Check(infos[1])
        || !PyDict_Check(threads)) {
        PyErr_SetString(PyExc_TypeError, "_load_chrome_calls(str, int, int, "
                        "list, dict, dict, dict, int, int)");
        return NULL;
    }
    Py_ssize_t pos, stop;
    if (as_span(args[1], args[2], &pos, &stop) < 0) {
        return NULL;
    }
    int64_t origin, late;
    int rc = as_int64(args[7], &origin);
    if (rc < 0 || as_int64(args[8], &late) < 0) {
        return NULL;
    }
    Py_ssize_t len = PyUnicode_GET_LENGTH(buf);
    if (rc > 0 || origin < 0 || pos < 0 || pos > len
        || PyUnicode_KIND(buf) != PyUnicode_1BYTE_KIND) {
        return Py_BuildValue("(nnn)", pos, (Py_ssize_t)-1, (Py_ssize_t)-1);
    }
    if (stop > len) {
        stop = len;
    }
    ft_state *state = ft_get_state(module);
    cursor c = {PyUnicode_1BYTE_DATA(buf), pos, len};
    Py_ssize_t miss[2] = {-1, -1};
    int64_t last_pid = -1, last_tid = -1;
    PyObject *thread = NULL, *stack = NULL;  /* borrowed from threads */
    key_slot *slots = PyMem_Calloc(KEY_SLOTS, sizeof(key_slot));
    if (slots == NULL) {
        return PyErr_NoMemory();
    }
    while (c.i < stop) {
        line ln;
        Py_ssize_t at = c.i;
        if (!parse_line(&c, &ln)) {
            c.i = at;
            break;
        }
        ft_event ev = {0};
        if (ln.ts > INT64_MAX - origin
            || ln.dur > INT64_MAX - (origin + ln.ts)) {
            c.i = at;
            break;
        }
        ev.start_ns = origin + ln.ts;
        ev.end_ns = ev.start_ns + ln.dur;
        if (ev.end_ns > late) {
            c.i = at;  /* the Python path says whether it is an error */
            break;
        }
        ev.is_c = (uint8_t)ln.is_c;
        ev.open_at_start = ln.oas;
        ev.open_at_stop = ln.oast;
        ev.open_at_loss = ln.oal;
        PyObject *info = lookup_key(slots, infos[ln.is_c], ln.is_c, buf, c.s,
                                    ln.key_start, ln.key_end);
        if (info == NULL) {
            if (PyErr_Occurred()) {
                goto error;
            }
            stop_at_miss(&c, at, &ln, miss);  /* a function not met yet */
            break;
        }
        /* The Event's getters index it without checks. */
        if (!PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 4) {
            PyErr_SetString(PyExc_TypeError, "_load_chrome_calls(): "
                            "infos maps keys to 4-tuples");
            goto error;
        }
        if (thread == NULL || ln.pid != last_pid || ln.tid != last_tid) {
            PyObject *tkey = Py_BuildValue("(LL)", (long long)ln.pid,
                                           (long long)ln.tid);
            if (tkey == NULL) {
                goto error;
            }
            PyObject *entry = PyDict_GetItemWithError(threads, tkey);
            Py_DECREF(tkey);
            if (entry == NULL) {
                if (PyErr_Occurred()) {
                    goto error;
                }
                stop_at_miss(&c, at, &ln, miss);  /* a thread not met yet */
                break;
            }
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2
                || !PyTuple_CheckExact(PyTuple_GET_ITEM(entry, 0))
                || PyTuple_GET_SIZE(PyTuple_GET_ITEM(entry, 0)) != 3
                || !PyList_Check(PyTuple_GET_ITEM(entry, 1))) {
                PyErr_SetString(PyExc_TypeError, "_load_chrome_calls(): "
                                "threads maps (pid, tid) to (thread 3-tuple, "
                                "stack)");
                goto error;
            }
            thread = PyTuple_GET_ITEM(entry, 0);
            stack = PyTuple_GET_ITEM(entry, 1);
            last_pid = ln.pid;
            last_tid = ln.tid;
        }
        rc = place(state, calls, stack, &ev);
        if (rc < 0) {
            goto error;
        }
        if (rc > 0) {
            c.i = at;
            break;
        }
        PyObject *event = ft_event_from_record(state->event_type, info,
                                               thread, &ev);
        if (event == NULL) {
            goto error;
        }
        rc = PyList_Append(calls, event);
        Py_DECREF(event);
        if (rc < 0) {
            goto error;
        }
    }
    PyMem_Free(slots);
    return Py_BuildValue("(nnn)", c.i, miss[0], miss[1]);

error:
    PyMem_Free(slots);
    return NULL;
}

PyMethodDef ft_load_chrome_calls_def = {
    "_load_chrome_calls", (PyCFunction)(void (*)(void))load_chrome_calls,
    METH_FASTCALL,
    "_load_chrome_calls($module, buf, pos, stop, calls, infos_py, infos_c, "
    "threads, origin, late, /)\n--\n\n"
    "For frametrace.loader: appends to calls the Events of the lines of buf\n"
    "from pos, laid out as the C writer lays them out, whose function\n"
    "(infos_py or infos_c: the text from the name's opening quote to the\n"
    "file's closing quote -> (name, filename, lineno, kind)) and thread\n"
    "(threads: (pid, tid) -> ((thread_id, native_thread_id, thread_serial),\n"
    "stack of the indices of its open events)) are known, that start before\n"
    "stop and end by late; times are origin + ts.  Returns (the position\n"
    "of the first line not taken, and when it was not taken for its\n"
    "function or thread only, the start and end of its text from the\n"
    "name's opening quote to the file's closing quote, else -1, -1).",
};

/* A growing buffer of Latin-1 text. */
typedef struct {
    char *data;
    size_t len, cap;
} text;

static int
text_put(text *t, const void *data, size_t len)
{
    if (t->cap - t->len < len) {
        size_t cap = t->cap ? t->cap : 1 << 16;
        while (cap - t->len < len) {
            cap *= 2;
        }
        char *grown = PyMem_Realloc(t->data, cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->data = grown;
        t->cap = cap;
    }
    memcpy(t->data + t->len, data, len);
    t->len += len;
    return 0;
}

/* ns >= 0 as export._us_text() writes it: microseconds, three decimals. */
static int
text_put_us(text *t, int64_t ns)
{
    char digits[32];
    char *p = digits + sizeof digits;
    uint64_t v = (uint64_t)ns;
    for (int k = 0; k < 3; k++) {
        *--p = (char)('0' + v % 10);
        v /= 10;
    }
    *--p = '.';
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return text_put(t, p, (size_t)(digits + sizeof digits - p));
}

/* _merge_chrome_lines(buf, pos, stop, known, pids, shift, sep) ->
 * (position after the last line taken, their text, how many). */
static PyObject *
merge_chrome_lines(PyObject *Py_UNUSED(module), PyObject *const *args,
                   Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "_merge_chrome_lines() takes 7 "
                     "arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *buf = args[0], *known = args[3], *pids = args[4];
    PyObject *sep = args[6];
    if (!PyUnicode_Check(buf) || !PyDict_Check(known) || !PyDict_Check(pids)
        || !PyUnicode_Check(sep)) {
        PyErr_SetString(PyExc_TypeError, "_merge_chrome_lines(str, int, int, "
                        "dict, dict, int, str)");
        return NULL;
    }
    Py_ssize_t pos, stop;
    if (as_span(args[1], args[2], &pos, &stop) < 0) {
        return NULL;
    }
    int64_t shift;
    int rc = as_int64(args[5], &shift);
    if (rc < 0) {
        return NULL;
    }
    Py_ssize_t len = PyUnicode_GET_LENGTH(buf);
    if (rc > 0 || shift < 0 || pos < 0 || pos > len
        || PyUnicode_KIND(buf) != PyUnicode_1BYTE_KIND
        || PyUnicode_KIND(sep) != PyUnicode_1BYTE_KIND) {
        /* All left to the Python path. */
        return Py_BuildValue("(nsnnn)", pos, "", (Py_ssize_t)0, (Py_ssize_t)-1,
                             (Py_ssize_t)-1);
    }
    if (stop > len) {
        stop = len;
    }
    cursor c = {PyUnicode_1BYTE_DATA(buf), pos, len};
    text out = {NULL, 0, 0};
    const Py_UCS1 *first_sep = PyUnicode_1BYTE_DATA(sep);
    size_t first_sep_len = (size_t)PyUnicode_GET_LENGTH(sep);
    Py_ssize_t count = 0, miss[2] = {-1, -1};
    int64_t last_pid = -1;
    key_slot *slots = PyMem_Calloc(KEY_SLOTS, sizeof(key_slot));
    if (slots == NULL) {
        return PyErr_NoMemory();
    }
    const char *pid_text = NULL;  /* of last_pid, in a str of pids */
    Py_ssize_t pid_len = 0;
    while (c.i < stop) {
        line ln;
        Py_ssize_t at = c.i;
        if (!parse_line(&c, &ln) || ln.ts > INT64_MAX - shift) {
            c.i = at;
            break;
        }
        if (lookup_key(slots, known, 0, buf, c.s, ln.key_start,
                       ln.key_end) == NULL) {
            if (PyErr_Occurred()) {
                goto error;
            }
            /* a name or location not checked yet */
            stop_at_miss(&c, at, &ln, miss);
            break;
        }
        if (pid_text == NULL || ln.pid != last_pid) {
            PyObject *pid = PyLong_FromLongLong(ln.pid);
            if (pid == NULL) {
                goto error;
            }
            PyObject *new = PyDict_GetItemWithError(pids, pid);
            Py_DECREF(pid);
            if (new == NULL) {
                if (PyErr_Occurred()) {
                    goto error;
                }
                stop_at_miss(&c, at, &ln, miss);  /* a pid not met yet */
                break;
            }
            if (!PyUnicode_Check(new)
                || PyUnicode_KIND(new) != PyUnicode_1BYTE_KIND) {
                PyErr_SetString(PyExc_TypeError, "_merge_chrome_lines(): "
                                "pids maps a pid to its new pid's text");
                goto error;
            }
            /* Borrowed: pids keeps it while this runs. */
            pid_text = (const char *)PyUnicode_1BYTE_DATA(new);
            pid_len = PyUnicode_GET_LENGTH(new);
            last_pid = ln.pid;
        }
        const char *s = (const char *)c.s;
        if ((count == 0 ? text_put(&out, first_sep, first_sep_len)
                        : text_put(&out, ",\n", 2)) < 0
            || text_put(&out, s + at, (size_t)(ln.pid_start - at)) < 0
            || text_put(&out, pid_text, (size_t)pid_len) < 0
            || text_put(&out, s + ln.pid_end,
                        (size_t)(ln.ts_start - ln.pid_end)) < 0
            || text_put_us(&out, ln.ts + shift) < 0
            || text_put(&out, s + ln.ts_end,
                        (size_t)(c.i - 2 - ln.ts_end)) < 0) {
            goto error;
        }
        count++;
    }
    PyMem_Free(slots);
    PyObject *result = PyUnicode_DecodeLatin1(out.data ? out.data : "",
                                              (Py_ssize_t)out.len, NULL);
    PyMem_Free(out.data);
    if (result == NULL) {
        return NULL;
    }
    return Py_BuildValue("(nNnnn)", c.i, result, count, miss[0],
                         miss[1]);

error:
    PyMem_Free(slots);
    PyMem_Free(out.data);
    return NULL;
}

PyMethodDef ft_merge_chrome_lines_def = {
    "_merge_chrome_lines", (PyCFunction)(void (*)(void))merge_chrome_lines,
    METH_FASTCALL,
    "_merge_chrome_lines($module, buf, pos, stop, known, pids, shift, sep, /)"
    "\n--\n\n"
    "For frametrace.merge: the lines of buf from pos laid out as the C\n"
    "writer lays them out, whose name and location (known: the text from\n"
    "the name's opening quote to the file's closing quote) and pid (pids:\n"
    "pid -> the text of its new pid) are known, starting before stop, as\n"
    "merge writes them: pid replaced, ts moved by shift ns, each after a\n"
    "separator (sep, then \",\\n\").  Returns (the position of the first\n"
    "line not taken, the text, how many lines, and the start and end of the\n"
    "key text of the line not taken when only its key or pid was unknown,\n"
    "else -1, -1).",
};
