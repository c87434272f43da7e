/* The PyEval_SetProfile backend's hot path: the profile function ft_hook()
 * and the out-of-line paths it falls into (record(), hook_general(), and on
 * 3.12+ hook_off() for a stopped tracer's hook).  An event becomes one
 * record in the thread's ring: its kind, its function's id, its time.
 *
 * ft_record_id_slow(), the out-of-line half of ft_record_id() (state.h),
 * is here too although the monitoring callbacks use it as well: it is the
 * end of the recording path, and this backend is the one every supported
 * CPython has.  Not here: registering threads and their rings
 * (threads.c), naming C functions (cnames.c), the sys.monitoring
 * callbacks (monitor.c). */
#include "state.h"
#include "threads.h"

/* The key of the C function called through arg in the function table: its
 * method definition, or for anything else reported as a C call, its type. */
static inline const void *
c_function_key(PyObject *arg)
{
    /* Bound builtin methods are created per attribute access; their method
     * definition is what stays the same. */
    return PyCFunction_Check(arg) ? (const void *)((PyCFunctionObject *)arg)->m_ml
                                  : (const void *)Py_TYPE(arg);
}

/* Whether the tracer of hook stopped.  On 3.10/3.11 a stop clears each
 * per-thread hook's thread first; the shared hook of 3.12+ has none. */
static inline int
hook_stopped(const ft_hookobject *hook)
{
#if FT_SHARED_HOOK
    return hook->tracer == NULL;
#else
    return hook->thread == NULL;
#endif
}

/* What the ring code gets as the holder of a thread's first ring: the
 * per-thread hook, or with the shared hook the tracer (NULL). */
#if FT_SHARED_HOOK
#  define RING_HOOK(hook) NULL
#else
#  define RING_HOOK(hook) (hook)
#endif

void
ft_record_id_slow(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
                  int64_t ts, uint32_t id, uint32_t kind)
{
    if (id == FT_NO_ID) {
        th->lost++;
        return;
    }
    if (id & FT_ID_IGNORED) {
        return;
    }
    if (th->ring.buf == NULL
        && ft_thread_first_ring(tracer, th, hook, &ts) < 0) {
        return;
    }
    /* Full (the inline push leaves the last word to this path; an escape
     * takes two): grow first, if it may. */
    if (th->ring.capacity - th->ring.pos <= 2
        && ft_ring_can_grow(&th->ring)) {
        ft_budget_grow(tracer, th);
    }
    if (ft_ring_push(&th->ring, ts, id, kind)) {
        ft_clock_maybe_anchor(&tracer->clock, ts);
    }
}

/* The record kind of each profile event (PyTrace_*); -1: not recorded. */
static const int8_t record_kind[] = {
    [PyTrace_CALL] = FT_REC_CALL,
    [PyTrace_EXCEPTION] = -1,
    [PyTrace_LINE] = -1,
    [PyTrace_RETURN] = FT_REC_RETURN,
    [PyTrace_C_CALL] = FT_REC_C_CALL,
    [PyTrace_C_EXCEPTION] = FT_REC_C_EXCEPTION,
    [PyTrace_C_RETURN] = FT_REC_C_RETURN,
    [PyTrace_OPCODE] = -1,
};

/* Any event, a function seen for the first time included; th NULL (3.12+):
 * found here.  Out of line:
 * inlined, its calls would give the hook's common case a stack frame. */
static FT_NOINLINE int
record(ft_hookobject *hook, ft_thread *th, int64_t ts, PyFrameObject *frame,
       int what, PyObject *arg)
{
    ft_tracer *tracer = hook->tracer;
    const void *key;
    uint32_t id;

    if (what < 0 || (size_t)what >= Py_ARRAY_LENGTH(record_kind)
        || record_kind[what] < 0) {
        return 0;
    }
    if (what == PyTrace_CALL || what == PyTrace_RETURN) {
        key = ft_frame_code(frame);
        id = ft_functable_find(&tracer->funcs, key);
        if (FT_UNLIKELY(id == FT_NO_ID)) {
            id = ft_intern_code(tracer, (PyCodeObject *)key, frame);
        }
    }
    else {
        if (!tracer->c_calls) {
            return 0;
        }
        key = c_function_key(arg);
        id = ft_functable_find(&tracer->funcs, key);
        if (FT_UNLIKELY(id == FT_NO_ID)) {
            /* The slow path may let other threads run, even one that stops
             * this tracer: hold it, and look again at the hook after. */
            Py_INCREF(hook);
            Py_INCREF(tracer);
            id = ft_intern_c_function(tracer, arg, key);
            /* The tracer's last reference may be ours now: its release
             * stops it (hook_stopped() then) and frees it. */
            Py_DECREF(tracer);
            int stopped = hook_stopped(hook);
            Py_DECREF(hook);
            if (stopped) {
                return 0;
            }
        }
    }
    if (th == NULL) {
        th = ft_cached_thread(tracer);
    }
    if (th == NULL) {
        th = ft_thread_of_caller(tracer, what == PyTrace_CALL);
        if (th == NULL) {
            return 0;
        }
    }
    ft_record_id(tracer, th, RING_HOOK(hook), ts, id,
                 (uint32_t)record_kind[what]);
    return 0;
}

/* ft_hook() for what its common case leaves: reads the clock itself. */
static FT_NOINLINE int
hook_general(ft_hookobject *hook, ft_thread *th, PyFrameObject *frame,
             int what, PyObject *arg)
{
    ft_tracer *tracer = hook->tracer;
    if (what >= PyTrace_C_CALL && !tracer->c_calls) {
        return 0;  /* before reading the clock */
    }
    return record(hook, th, ft_clock_ticks(&tracer->clock), frame, what, arg);
}

#if FT_SHARED_HOOK
/* The hook of a stopped tracer, on a thread stop() left it on (another
 * tool held the hook elsewhere: see ft_uninstall_hooks() in install.c): the
 * thread removes it itself, with the public call that acts on the caller.
 * Once per thread and tracer, even if an audit hook refuses. */
static FT_TLS uint64_t tls_unhooked;

static FT_NOINLINE int
hook_off(ft_hookobject *hook)
{
    if (tls_unhooked != hook->generation) {
        tls_unhooked = hook->generation;
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        Py_INCREF(hook);  /* the thread's reference goes: ours to return */
        PyEval_SetProfile(NULL, NULL);
        Py_DECREF(hook);
        FT_RESTORE_EXC(saved);
    }
    return 0;
}
#endif

int
ft_hook(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    ft_hookobject *hook = (ft_hookobject *)obj;
#if FT_SHARED_HOOK
    ft_tracer *tracer = hook->tracer;
    if (FT_UNLIKELY(tracer == NULL)) {
        return hook_off(hook);  /* the tracer stopped */
    }
    if (FT_UNLIKELY(tracer->phase != FT_PHASE_ACTIVE)) {
        return 0;  /* armed, not recording yet: the hook stays */
    }
    ft_thread *th = NULL;  /* read last, when no call follows */
#else
    ft_thread *th = hook->thread;
    if (FT_UNLIKELY(th == NULL)) {
        return 0;  /* the tracer stopped */
    }
    ft_tracer *tracer = hook->tracer;
#endif
    /* The common case inline, with no call that would need a stack frame
     * (3.10; 3.11+ must call PyFrame_GetCode()): the cycle counter, the
     * thread seen before, a Python function or an exact builtin function
     * seen before, a one-word record, a ring with room.  Anything else goes
     * out of line. */
    const void *key;
    if (what == PyTrace_CALL || what == PyTrace_RETURN) {
        key = ft_frame_code(frame);
    }
    else if (what >= PyTrace_C_CALL && what <= PyTrace_C_RETURN
             && Py_IS_TYPE(arg, &PyCFunction_Type) && tracer->c_calls) {
        key = ((PyCFunctionObject *)arg)->m_ml;
    }
    else {
        return hook_general(hook, th, frame, what, arg);
    }
    if (FT_UNLIKELY(!tracer->clock.use_cycles)) {
        return hook_general(hook, th, frame, what, arg);
    }
    int64_t ts = ft_cycles();
    uint32_t id = ft_functable_find(&tracer->funcs, key);
#if FT_SHARED_HOOK
    /* A miss: the thread's first event under this tracer, which record()
     * finds. */
    if (FT_UNLIKELY(!ft_cache_hit(tracer))) {
        return ft_id_ignored(id) ? 0 : record(hook, NULL, ts, frame, what, arg);
    }
    th = ft_tls_cache.thread;
#endif
    if (FT_LIKELY(ft_ring_try_push(&th->ring, ts, id,
                                   (uint32_t)record_kind[what]))) {
        return 0;
    }
    /* Ignored (filters, the tracer's own: an id no push takes): nothing to
     * record.  Checked only here, off the recorded events' path. */
    if (ft_id_ignored(id)) {
        return 0;
    }
    return record(hook, th, ts, frame, what, arg);
}

void
ft_hook_record(ft_hookobject *hook, ft_thread *th, int64_t ticks,
               PyFrameObject *frame, int what, PyObject *arg)
{
    if (!hook_stopped(hook)) {
        (void)record(hook, th, ticks, frame, what, arg);
    }
}
