/* Every CPython-version difference frametrace depends on, in one place. */
#ifndef FT_COMPAT_H
#define FT_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
/* 3.13+: RESUME checks the eval breaker before it fires PY_START or
 * PY_RESUME (3.12 after), so another thread's stack can hold a frame whose
 * call event has not fired (threads.c, frame_not_started()).  RESUME's
 * opcode comes from opcode.h, installed with the headers, its number
 * per version. */
#define FT_RESUME_WAITS_BEFORE_EVENT (PY_VERSION_HEX >= 0x030D0000)
#if FT_RESUME_WAITS_BEFORE_EVENT
#  include <opcode.h>
#endif

#if PY_VERSION_HEX < 0x030A0000
#  error "frametrace needs CPython 3.10 or newer"
#endif

/* Private CPython API: every use on a line of its own, "private: NAME
 * VERSIONS — reason".  NAME is a symbol the built extension imports (what
 * `nm -D` lists) or a PyThreadState field read directly
 * (PyThreadState.FIELD, only in the ft_tstate_*() functions below).
 * VERSIONS: 3.N-3.M, or 3.N+ for all from 3.N on.
 * tests/unit/test_private_api.py checks this list against the built extension,
 * the running interpreter and csrc/: keep it exact.
 *
 * private: _PyEval_SetProfile 3.10-3.14 — installs and removes the profile
 *     function on another thread; PyEval_SetProfileAllThreads() is 3.12+,
 *     and until 3.14.1 reads a freed thread state when a thread exits while
 *     its audit hooks run (CPython gh-137400; FT_ALL_THREADS_CALL_SAFE)
 * private: PyInterpreterState.audit_hooks 3.10+ — the Python audit hooks,
 *     set aside while every thread's profile function is set, after one
 *     "sys.setprofile" audit: run per thread, they may let that thread exit
 *     first, or others run unrecorded (audit_aside.c); no call does it
 * private: _Py_IsFinalizing 3.10-3.12 — whether the interpreter is shutting
 *     down; Py_IsFinalizing() is public from 3.13
 * private: PyThreadState.c_profilefunc 3.10+ — which profile function a
 *     thread has (conflicts at start(); at stop(), whether another tool
 *     displaced ours, displaced.c); no getter exists for another thread
 * private: PyThreadState.c_profileobj 3.10+ — the same, its argument
 *     (sys.getprofile() reads only the caller's, through Python)
 * private: PyThreadState.thread_id 3.10+ — threading.get_ident() of another
 *     thread, registered at start(); no getter exists
 * private: PyThreadState.native_thread_id 3.11+ — the native id of
 *     another thread; no getter exists
 *
 * The rest of what `nm -D` lists is what public macros expand to:
 *   implied: _Py_Dealloc 3.10+ — Py_DECREF()
 *   implied: _Py_NoneStruct 3.10+ — Py_None
 *   implied: _Py_TrueStruct 3.10+ — Py_True
 *   implied: _Py_FalseStruct 3.10+ — Py_False
 *   implied: _Py_NotImplementedStruct 3.10+ — Py_NotImplemented
 *   implied: _PyObject_New 3.10+ — PyObject_New()
 *   implied: _PyObject_GC_New 3.10+ — PyObject_GC_New()
 *   implied: _PyArg_ParseTupleAndKeywords_SizeT 3.10-3.12 — its public
 *       name under PY_SSIZE_T_CLEAN
 *   implied: _PyObject_CallFunction_SizeT 3.10-3.12 — the same, of
 *       PyObject_CallFunction()
 *   implied: _PyObject_CallMethod_SizeT 3.10-3.12 — PyObject_CallMethod()
 *       under PY_SSIZE_T_CLEAN
 *   implied: _Py_BuildValue_SizeT 3.10-3.12 — Py_BuildValue() under
 *       PY_SSIZE_T_CLEAN
 * and, only in the tests' extension frametrace._testing (csrc/testing/):
 *   testing: _PyArg_ParseTuple_SizeT 3.10-3.12 — PyArg_ParseTuple() under
 *       PY_SSIZE_T_CLEAN
 */

/* 3.12+: one hook object for all threads, installed with the public
 * PyEval_SetProfileAllThreads(); before, one per thread, installed with
 * _PyEval_SetProfile() (see install_perthread.c). */
#define FT_SHARED_HOOK (PY_VERSION_HEX >= 0x030C0000)

/* Whether PyEval_SetProfileAllThreads() may be called: it runs the
 * "sys.setprofile" audit hooks once per thread while it walks the thread
 * states, and until CPython 3.14.1 (gh-137400) a thread that exits while a
 * hook lets it run (one that releases the GIL) leaves the walk on a freed
 * thread state.  Before that, frametrace walks them itself with
 * _PyEval_SetProfile(), checking each is still alive (install.c).  3.14.0
 * is told apart at run time: an extension built on 3.14.x runs on it. */
#if PY_VERSION_HEX >= 0x030F0000
#  define FT_ALL_THREADS_CALL_SAFE() 1
#  define FT_NEED_CHECKED_WALK 0
#elif PY_VERSION_HEX >= 0x030E0000
#  define FT_ALL_THREADS_CALL_SAFE() (Py_Version >= 0x030E01F0)
#  define FT_NEED_CHECKED_WALK 1
#else
#  define FT_ALL_THREADS_CALL_SAFE() 0
#  define FT_NEED_CHECKED_WALK 1
#endif
/* Declared in the internal headers from 3.13, still exported. */
#if FT_NEED_CHECKED_WALK && PY_VERSION_HEX >= 0x030D0000
PyAPI_FUNC(int) _PyEval_SetProfile(PyThreadState *tstate, Py_tracefunc func,
                                   PyObject *arg);
#endif

/* The profile function of thread ts and its argument (borrowed). */
static inline Py_tracefunc
ft_tstate_profile_func(PyThreadState *ts)
{
    return ts->c_profilefunc;
}

static inline PyObject *
ft_tstate_profile_obj(PyThreadState *ts)
{
    return ts->c_profileobj;
}

/* threading.get_ident() of thread ts. */
static inline unsigned long
ft_tstate_thread_id(PyThreadState *ts)
{
    return ts->thread_id;
}

/* Thread-local storage.  Initial-exec: a plain %fs-relative load instead of
 * a __tls_get_addr() call per event; the few bytes fit the static TLS space
 * left for dlopen().  ELF only: macOS has its own TLS scheme. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__linux__)
#  define FT_TLS _Thread_local __attribute__((tls_model("initial-exec")))
#else
#  define FT_TLS _Thread_local
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

/* Strong reference to a frame's globals, or NULL. */
static inline PyObject *
ft_frame_globals(PyFrameObject *frame)
{
#if PY_VERSION_HEX >= 0x030B0000
    return PyFrame_GetGlobals(frame);
#else
    Py_XINCREF(frame->f_globals);
    return frame->f_globals;
#endif
}

/* Strong reference to the value of a frame's first argument (the self of
 * a method), or NULL (no exception): with no argument, or unbound.  3.10
 * and 3.11 copy the fast locals into the frame's locals dict first, as
 * reading frame.f_locals does; 3.12+ read the one variable. */
static inline PyObject *
ft_frame_first_arg(PyFrameObject *frame)
{
    PyCodeObject *code = ft_frame_code(frame);
    if (code->co_argcount < 1) {
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *names = PyCode_GetVarnames(code);
#else
    PyObject *names = Py_XNewRef(code->co_varnames);
#endif
    PyObject *value = NULL;
    if (names != NULL && PyTuple_Check(names) && PyTuple_GET_SIZE(names) > 0) {
        PyObject *name = PyTuple_GET_ITEM(names, 0);
#if PY_VERSION_HEX >= 0x030C0000
        value = PyFrame_GetVar(frame, name);
#elif PY_VERSION_HEX >= 0x030B0000
        PyObject *locals = PyFrame_GetLocals(frame);
        if (locals != NULL && PyDict_Check(locals)) {
            value = Py_XNewRef(PyDict_GetItemWithError(locals, name));
        }
        Py_XDECREF(locals);
#else
        if (PyFrame_FastToLocalsWithError(frame) == 0 && frame->f_locals != NULL
            && PyDict_Check(frame->f_locals)) {
            value = Py_XNewRef(PyDict_GetItemWithError(frame->f_locals, name));
        }
#endif
    }
    Py_XDECREF(names);
    if (value == NULL) {
        PyErr_Clear();
    }
    return value;
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

/* PyType_GetModuleByDef(), 3.11+ (3.10: walk the MRO by hand). */
#define FT_HAVE_TYPE_GETMODULEBYDEF (PY_VERSION_HEX >= 0x030B0000)

/* Module slots: Py_mod_multiple_interpreters (3.12+), Py_mod_gil (3.13+). */
#define FT_HAVE_MOD_MULTIPLE_INTERPRETERS (PY_VERSION_HEX >= 0x030C0000)
#define FT_HAVE_MOD_GIL (PY_VERSION_HEX >= 0x030D0000)

/* The slots both extensions end their table with: one interpreter (one
 * tracer per process, thread states walked directly) and the GIL (the
 * hook, the rings, the function table and start/stop rely on it, see
 * docs/free-threading.md; a free-threaded build never reads it:
 * PyInit__tracer() refuses first). */
#if FT_HAVE_MOD_MULTIPLE_INTERPRETERS
#  define FT_SLOT_ONE_INTERPRETER \
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#else
#  define FT_SLOT_ONE_INTERPRETER
#endif
#if FT_HAVE_MOD_GIL
#  define FT_SLOT_GIL_USED {Py_mod_gil, Py_MOD_GIL_USED},
#else
#  define FT_SLOT_GIL_USED
#endif
#define FT_MODULE_SLOTS_END FT_SLOT_ONE_INTERPRETER FT_SLOT_GIL_USED {0, NULL}

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
