/* The filters (include=, ignore=): checking and compiling the patterns at
 * Tracer(), and the decision taken once per function when it enters the
 * function table: ft_intern_code() for code objects here, cnames.c for C
 * functions.  The matching itself is glob.c, plain C: the decision runs
 * inside the hook, where calling fnmatch or re (Python code, allocations,
 * other threads running) is what the hook must not do. */
#include "state.h"
#include "glob.h"

#include <stdlib.h>
#include <string.h>

static void
patterns_free(ft_pattern *patterns, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        PyMem_Free(patterns[i].chars);
    }
    free(patterns);
}

/* Whether a dotted name (no glob) has an empty part: "torch.", ".nn",
 * "a..b" can never name a module or function. */
static int
has_empty_part(const uint32_t *chars, size_t len)
{
    if (chars[0] == '.' || chars[len - 1] == '.') {
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if (chars[i] == '.' && chars[i - 1] == '.') {
            return 1;
        }
    }
    return 0;
}

/* The patterns of argument what (a sequence of str) into *out: a tuple of
 * them into *tuple.  0, or -1 with an exception. */
static int
compile_patterns(const char *what, PyObject *arg, PyObject **tuple,
                 ft_pattern **out, size_t *n)
{
    *tuple = NULL;
    *out = NULL;
    *n = 0;
    if (PyUnicode_Check(arg) || PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s= takes a sequence of patterns, "
                     "not a %.100s: %s=[%R]", what, Py_TYPE(arg)->tp_name,
                     what, arg);
        return -1;
    }
    PyObject *items = PySequence_Tuple(arg);
    if (items == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Format(PyExc_TypeError, "%s= takes a sequence of pattern "
                         "strings, not %.100s", what, Py_TYPE(arg)->tp_name);
        }
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(items);
    ft_pattern *patterns = calloc(count ? (size_t)count : 1,
                                  sizeof(ft_pattern));
    if (patterns == NULL) {
        Py_DECREF(items);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "%s= patterns must be str, not "
                         "%.100s (item %zd: %R)", what,
                         Py_TYPE(item)->tp_name, i, item);
            goto error;
        }
        Py_ssize_t len = PyUnicode_GetLength(item);
        if (len == 0) {
            PyErr_Format(PyExc_ValueError, "%s= pattern %zd is empty: a "
                         "pattern names a module or function", what, i);
            goto error;
        }
        patterns[i].chars = (uint32_t *)PyUnicode_AsUCS4Copy(item);
        if (patterns[i].chars == NULL) {
            goto error;
        }
        patterns[i].len = (size_t)len;
        patterns[i].is_glob = ft_glob_is_glob(patterns[i].chars,
                                              (size_t)len);
        if (!patterns[i].is_glob
            && has_empty_part(patterns[i].chars, (size_t)len)) {
            PyErr_Format(PyExc_ValueError, "%s= pattern %R is not a dotted "
                         "name (it starts or ends with '.', or holds '..')",
                         what, item);
            goto error;
        }
    }
    *tuple = items;
    *out = patterns;
    *n = (size_t)count;
    return 0;

error:
    patterns_free(patterns, (size_t)count);
    Py_DECREF(items);
    return -1;
}

int
ft_filters_init(ft_filters *filters, PyObject *include, PyObject *ignore)
{
    memset(filters, 0, sizeof(*filters));
    if (include != NULL && include != Py_None) {
        if (compile_patterns("include", include, &filters->include_obj,
                             &filters->include, &filters->ninclude) < 0) {
            goto error;
        }
        if (filters->ninclude == 0) {
            PyErr_SetString(PyExc_ValueError, "include= is empty: it would "
                            "record nothing (None records every function)");
            goto error;
        }
    }
    else {
        filters->include_obj = Py_NewRef(Py_None);
    }
    if (ignore != NULL && ignore != Py_None) {
        if (compile_patterns("ignore", ignore, &filters->ignore_obj,
                             &filters->ignore, &filters->nignore) < 0) {
            goto error;
        }
    }
    else {
        filters->ignore_obj = PyTuple_New(0);
        if (filters->ignore_obj == NULL) {
            goto error;
        }
    }
    if (filters->include != NULL || filters->nignore > 0) {
        filters->spec = PyTuple_Pack(2, filters->include_obj,
                                     filters->ignore_obj);
        if (filters->spec == NULL) {
            goto error;
        }
    }
    return 0;

error:
    ft_filters_clear(filters);
    return -1;
}

void
ft_filters_clear(ft_filters *filters)
{
    patterns_free(filters->include, filters->ninclude);
    patterns_free(filters->ignore, filters->nignore);
    filters->include = filters->ignore = NULL;
    filters->ninclude = filters->nignore = 0;
    Py_CLEAR(filters->include_obj);
    Py_CLEAR(filters->ignore_obj);
    Py_CLEAR(filters->spec);
}

static int
any_match(const ft_pattern *patterns, size_t n, const uint32_t *name,
          size_t len)
{
    for (size_t i = 0; i < n; i++) {
        if (ft_pattern_match(patterns[i].chars, patterns[i].len,
                             patterns[i].is_glob, name, len)) {
            return 1;
        }
    }
    return 0;
}

int
ft_filters_exclude(const ft_filters *filters, PyObject *module,
                   PyObject *qualname)
{
    if (!ft_filters_active(filters)) {
        return 0;
    }
    Py_ssize_t mlen = module != NULL ? PyUnicode_GetLength(module) : 0;
    Py_ssize_t qlen = PyUnicode_GetLength(qualname);
    if (mlen < 0 || qlen < 0) {
        PyErr_Clear();  /* not a str: cannot happen, callers check */
        return 0;
    }
    size_t len = (size_t)(mlen > 0 ? mlen + 1 + qlen : qlen);
    uint32_t *name = malloc((len ? len : 1) * sizeof(uint32_t));
    if (name == NULL) {
        return 0;  /* recorded: nothing is lost */
    }
    size_t at = 0;
    if (mlen > 0) {
        for (Py_ssize_t i = 0; i < mlen; i++) {
            name[at++] = PyUnicode_ReadChar(module, i);
        }
        name[at++] = '.';
    }
    for (Py_ssize_t i = 0; i < qlen; i++) {
        name[at++] = PyUnicode_ReadChar(qualname, i);
    }
    int excluded = (filters->include != NULL
                    && !any_match(filters->include, filters->ninclude, name,
                                  len))
                   || any_match(filters->ignore, filters->nignore, name, len);
    free(name);
    return excluded;
}

/* The module a code object runs in: __name__ of frame's globals (frame
 * borrowed; NULL: the current frame's, if it runs code).  Strong, or NULL
 * when not found (no exception). */
static PyObject *
code_module(ft_tracer *tracer, PyCodeObject *code, PyFrameObject *frame)
{
    if (frame == NULL) {
        /* The monitoring callbacks fire in the frame of their code; a
         * frame that is not (a generator thrown into before it started)
         * leaves the module unknown rather than wrong. */
        frame = PyEval_GetFrame();
        if (frame == NULL || ft_frame_code(frame) != code) {
            return NULL;
        }
    }
    PyObject *globals = ft_frame_globals(frame);  /* strong */
    PyObject *name = NULL;
    if (globals != NULL && PyDict_Check(globals)) {
        name = PyDict_GetItemWithError(globals, tracer->state->str_name);
        if (name != NULL && PyUnicode_Check(name)) {
            Py_INCREF(name);
        }
        else {
            name = NULL;
        }
    }
    Py_XDECREF(globals);
    return name;
}

uint32_t
ft_intern_code(ft_tracer *tracer, PyCodeObject *code, PyFrameObject *frame)
{
    uint32_t id = ft_functable_find(&tracer->funcs, code);
    if (id != FT_NO_ID) {
        return id;
    }
    ft_release_check(tracer);
    if (!ft_filters_active(&tracer->filters)) {
        return ft_functable_add_code(&tracer->funcs, code, 0);
    }
    /* Nothing below runs Python code: a frame object made for the current
     * frame is the only allocation of an object (3.12+ collects garbage at
     * the next eval breaker, not here). */
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    PyObject *module = code_module(tracer, code, frame);
    PyObject *qualname = ft_code_name(code);
    int filtered = qualname != NULL
                   && ft_filters_exclude(&tracer->filters, module, qualname);
    Py_XDECREF(qualname);
    Py_XDECREF(module);
    PyErr_Clear();
    FT_RESTORE_EXC(saved);
    return ft_functable_add_code(&tracer->funcs, code, filtered);
}
