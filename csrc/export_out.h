/* A buffered output file (plain, or gzip through zlib) for the exporters. */
#ifndef FT_EXPORT_OUT_H
#define FT_EXPORT_OUT_H

#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef FT_HAVE_ZLIB
#  include <zlib.h>
#endif

typedef struct {
    FILE *fp;
#ifdef FT_HAVE_ZLIB
    gzFile gz;
#endif
    char *buf;
    size_t len;
    size_t cap;
    int failed;
    int err;  /* errno of the first failure, for the message */
} out_t;

#define OUT_CAP ((size_t)1 << 18)

/* Marks the output failed, keeping the first cause. */
static inline void
out_fail(out_t *out, int err)
{
    if (!out->failed) {
        out->err = err ? err : EIO;
    }
    out->failed = 1;
}

#ifdef FT_HAVE_ZLIB
/* errno of zlib's last error on gz (EIO when it was not a system call's). */
static inline int
out_gz_errno(gzFile gz, int saved_errno)
{
    int errnum = Z_OK;
    gzerror(gz, &errnum);
    if (errnum == Z_ERRNO) {
        return saved_errno;
    }
    return errnum == Z_MEM_ERROR ? ENOMEM : EIO;
}
#endif

static inline void
out_flush(out_t *out)
{
    if (out->len == 0 || out->failed) {
        out->len = 0;
        return;
    }
#ifdef FT_HAVE_ZLIB
    if (out->gz != NULL) {
        if (gzwrite(out->gz, out->buf, (unsigned)out->len) != (int)out->len) {
            int saved = errno;
            out_fail(out, out_gz_errno(out->gz, saved));
        }
        out->len = 0;
        return;
    }
#endif
    if (fwrite(out->buf, 1, out->len, out->fp) != out->len) {
        out_fail(out, errno);
    }
    out->len = 0;
}

static inline void
out_bytes(out_t *out, const char *s, size_t n)
{
    if (out->len + n > out->cap) {
        out_flush(out);
        if (n > out->cap) {
            /* Larger than the buffer: straight through. */
            size_t saved_len = out->len;
            char *saved = out->buf;
            out->buf = (char *)s;
            out->len = n;
            out_flush(out);
            out->buf = saved;
            out->len = saved_len;
            return;
        }
    }
    memcpy(out->buf + out->len, s, n);
    out->len += n;
}

#define OUT_LIT(out, lit) out_bytes((out), (lit), sizeof(lit) - 1)

/* Room for n more bytes (flushing, or growing the buffer for a record
 * larger than it): where to write them, then out_commit() at their end.
 * NULL when out of memory (the output is failed). */
static inline char *
out_reserve(out_t *out, size_t n)
{
    if (out->len + n > out->cap) {
        out_flush(out);
        if (n > out->cap) {
            char *grown = realloc(out->buf, n);
            if (grown == NULL) {
                out_fail(out, ENOMEM);
                return NULL;
            }
            out->buf = grown;
            out->cap = n;
        }
    }
    return out->buf + out->len;
}

static inline void
out_commit(out_t *out, const char *end)
{
    out->len = (size_t)(end - out->buf);
}

/* Decimal digits of v at p, two at a time; returns their end. */
static inline char *
put_u64(char *p, uint64_t v)
{
    static const char pairs[] =
        "00010203040506070809101112131415161718192021222324"
        "25262728293031323334353637383940414243444546474849"
        "50515253545556575859606162636465666768697071727374"
        "75767778798081828384858687888990919293949596979899";
    char tmp[20];
    char *t = tmp + sizeof(tmp);
    while (v >= 100) {
        t -= 2;
        memcpy(t, pairs + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) {
        t -= 2;
        memcpy(t, pairs + 2 * v, 2);
    }
    else {
        *--t = (char)('0' + v);
    }
    size_t n = (size_t)(tmp + sizeof(tmp) - t);
    memcpy(p, t, n);
    return p + n;
}

/* Literal bytes at p; returns their end. */
#define PUT_LIT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) + sizeof(lit) - 1)

/* Opens path for writing (gzip-compressed if compress and zlib is there);
 * 0, or -1 with errno set (EINVAL: compression asked without zlib). */
static inline int
out_open(out_t *out, const char *path, int compress, size_t cap)
{
    memset(out, 0, sizeof(*out));
    out->buf = malloc(cap);
    if (out->buf == NULL) {
        return -1;
    }
    out->cap = cap;
    if (compress) {
#ifdef FT_HAVE_ZLIB
        /* Level 1: most of the size gain at a fraction of the time. */
        out->gz = gzopen(path, "wb1");
        return out->gz ? 0 : -1;
#else
        errno = EINVAL;
        return -1;
#endif
    }
    out->fp = fopen(path, "wb");
    return out->fp ? 0 : -1;
}

/* out_open() with the Python exception set on failure; name_bytes: the
 * path the messages show (the target, when path is its temporary). */
static inline int
out_open_or_raise(out_t *out, PyObject *path_bytes, PyObject *name_bytes,
                  int compress, size_t cap)
{
    if (out_open(out, PyBytes_AS_STRING(path_bytes), compress, cap) == 0) {
        return 0;
    }
    if (compress && errno == EINVAL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "built without zlib: cannot compress in C");
    }
    else {
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name_bytes);
    }
    return -1;
}

/* Flushes (unless discard: the output is abandoned, its pending bytes
 * dropped) and closes; 0, or the errno of the first failure to write. */
static inline int
out_end(out_t *out, int discard)
{
    if (discard) {
        out->len = 0;
    }
    out_flush(out);
#ifdef FT_HAVE_ZLIB
    if (out->gz != NULL) {
        int rc = gzclose(out->gz);
        if (rc != Z_OK) {
            out_fail(out, rc == Z_ERRNO ? errno : (rc == Z_MEM_ERROR ? ENOMEM : EIO));
        }
    }
#endif
    if (out->fp != NULL && fclose(out->fp) != 0) {
        out_fail(out, errno);
    }
    int err = out->failed ? out->err : 0;
    free(out->buf);
    memset(out, 0, sizeof(*out));
    return err;
}

static inline int
out_close(out_t *out)
{
    return out_end(out, 0);
}

/* Sets OSError(err, "could not write NAME: <errno text>"), NAME the
 * file-system path (bytes) the user gave. */
static inline void
out_raise(int err, PyObject *name_bytes)
{
    PyObject *name = PyUnicode_DecodeFSDefaultAndSize(
        PyBytes_AS_STRING(name_bytes), PyBytes_GET_SIZE(name_bytes));
    if (name == NULL) {
        return;
    }
    PyObject *args = Py_BuildValue("(iN)", err, PyUnicode_FromFormat(
        "could not write %U: %s", name, strerror(err)));
    Py_DECREF(name);
    if (args != NULL) {
        /* OSError(errno, text): the errno's subclass, as PyErr_SetFromErrno. */
        PyErr_SetObject(PyExc_OSError, args);
        Py_DECREF(args);
    }
}

/* Every FT_PROGRESS_EVERY events, from a loop that let the GIL go: takes
 * it back to run the signal handlers (Ctrl-C stops a long write) and to
 * call progress(done, total) if not NULL/None.  Returns -1 if either
 * raised, or if they forked and this is the child (pid: the writer's
 * process; the child's clear() may have freed the records it reads).  The
 * exception is set once the GIL is held again by the caller's
 * Py_END_ALLOW_THREADS: the caller stops writing. */
#define FT_PROGRESS_EVERY ((size_t)1 << 20)

static inline int
out_progress(PyObject *progress, size_t done, size_t total, long pid,
             PyThreadState **save)
{
    if (done == 0 || done % FT_PROGRESS_EVERY != 0) {
        return 0;
    }
    PyEval_RestoreThread(*save);
    int rc = PyErr_CheckSignals();
    if (rc == 0 && progress != NULL && progress != Py_None) {
        PyObject *res = PyObject_CallFunction(progress, "nn", (Py_ssize_t)done,
                                              (Py_ssize_t)total);
        Py_XDECREF(res);
        rc = res == NULL ? -1 : 0;
    }
    if (rc == 0 && (long)getpid() != pid) {
        PyErr_SetString(PyExc_RuntimeError, "the process forked during a "
                        "write: the child does not go on with it");
        rc = -1;
    }
    *save = PyEval_SaveThread();
    return rc;
}

#endif /* FT_EXPORT_OUT_H */
