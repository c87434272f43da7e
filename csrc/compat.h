/* Every CPython-version difference frametrace depends on, in one place. */
#ifndef FT_COMPAT_H
#define FT_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

#if PY_VERSION_HEX < 0x030A0000
#  error "frametrace needs CPython 3.10 or newer"
#endif

/* _PyEval_SetProfile() installs a profile function on one given thread.
 * It is what PyEval_SetProfileAllThreads() loops over on 3.12+, and the only
 * way on 3.10/3.11 to reach other threads.  We call it per thread because each
 * thread gets its own profile object (its ring buffer) and because stop() must
 * leave alone threads where another tool has replaced our hook.  3.13 moved the
 * declaration to the internal headers but still exports the symbol. */
#if PY_VERSION_HEX >= 0x030D0000
PyAPI_FUNC(int) _PyEval_SetProfile(PyThreadState *tstate, Py_tracefunc func,
                                   PyObject *arg);
#endif

/* Borrowed code object of a frame: the frame keeps it alive. */
static inline PyCodeObject *
ft_frame_code(PyFrameObject *frame)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyCodeObject *code = PyFrame_GetCode(frame);
    Py_DECREF(code);
    return code;
#else
    return frame->f_code;
#endif
}

/* Strong reference to the name shown for a code object. */
static inline PyObject *
ft_code_name(PyCodeObject *code)
{
#if PY_VERSION_HEX >= 0x030B0000
    return Py_NewRef(code->co_qualname);
#else
    Py_INCREF(code->co_name);
    return code->co_name;
#endif
}

/* Native id of a thread state's OS thread, or 0 where CPython does not keep
 * it (3.10: filled in from the thread itself at its first event). */
static inline unsigned long
ft_tstate_native_id(PyThreadState *ts)
{
#if PY_VERSION_HEX >= 0x030B0000
    return ts->native_thread_id;
#else
    (void)ts;
    return 0;
#endif
}

/* Pending-exception save/restore around work inside the hook. */
#if PY_VERSION_HEX >= 0x030C0000
typedef struct { PyObject *exc; } ft_saved_exc;
#  define FT_SAVE_EXC(s) ((s).exc = PyErr_GetRaisedException())
#  define FT_RESTORE_EXC(s) PyErr_SetRaisedException((s).exc)
#else
typedef struct { PyObject *type, *value, *tb; } ft_saved_exc;
#  define FT_SAVE_EXC(s) PyErr_Fetch(&(s).type, &(s).value, &(s).tb)
#  define FT_RESTORE_EXC(s) PyErr_Restore((s).type, (s).value, (s).tb)
#endif

/* Whether the interpreter is shutting down: a tracer freed then must not
 * import modules (which fails, and would print). */
#if PY_VERSION_HEX >= 0x030D0000
#  define FT_FINALIZING() Py_IsFinalizing()
#else
#  define FT_FINALIZING() _Py_IsFinalizing()
#endif

/* sys.monitoring (PEP 669). */
#define FT_HAVE_MONITORING (PY_VERSION_HEX >= 0x030C0000)

/* Whether CPython's profile layer reports a CALL event of a bound method
 * wrapping a C function (types.MethodType(len, x)) as a call of that
 * function: 3.13 only.  3.12 ignores such a CALL; 3.14 ignores it again,
 * because its CALL instruction unwraps the method before the event, and the
 * one CALL event still naming the bound method (CALL_FUNCTION_EX,
 * `m(*args)`) gets no C_RETURN, so that a call recorded there would enclose
 * everything up to its caller's return. */
#define FT_PROFILE_UNWRAPS_BOUND_C \
    (PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000)

#if defined(__GNUC__) || defined(__clang__)
#  define FT_LIKELY(x) __builtin_expect(!!(x), 1)
#  define FT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#  define FT_NOINLINE __attribute__((noinline))
#else
#  define FT_LIKELY(x) (x)
#  define FT_UNLIKELY(x) (x)
#  define FT_NOINLINE
#endif

#endif /* FT_COMPAT_H */
