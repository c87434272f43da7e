/* Threads whose recording ended before stop(), "displaced": another tool
 * replaced or removed frametrace's profile function on them
 * (sys.setprofile(), cProfile on 3.10/3.11, torch.profiler's Python
 * tracer), or freed or changed the sys.monitoring tool id.  CPython tells
 * nobody when a thread's profile function is replaced, so stop() finds
 * them afterwards, from what lifecycle.c noted before removing the hook
 * (ft_thread.at_stop):
 *
 * - a thread alive at stop with another profile function, or none;
 * - a thread that ended before stop with Python frames its records never
 *   saw return: with the hook in place, every frame returns before its
 *   thread ends;
 * - a thread whose hook came back after a gap through sys.setprofile() (a
 *   tool that saved sys.getprofile() and restores it): the hook object is
 *   then called as a Python profile function, which installs the C hook
 *   again and notes the gap (ft_hook_call());
 * - with the monitoring backend, every thread when the tool id was not as
 *   frametrace left it.
 *
 * A displaced thread's recording ends at its last record: its frames still
 * open then end there, flagged open_at_loss (loss_ticks, events.c).  The
 * caller of stop() warns, once per thread; and once if a thread ran Python
 * code the setprofile backend could not hook (ft_note_unhooked()).  Not
 * here: noting each thread's state at stop and removing the hook
 * (lifecycle.c, install.c). */
#include "state.h"
#include "bootstrap.h"
#include "threads.h"
#include "replay.h"

/* The time of th's last record, its loss_ticks: never 0 (0 is "not
 * lost"). */
static int64_t
last_record(const ft_thread *th)
{
    /* A ring the memory bound discarded keeps the time of its newest
     * record. */
    int64_t ticks = ft_ring_holds(&th->ring) || th->ring.discarded != 0
                    ? th->ring.last : th->base_ticks;
    return ticks != 0 ? ticks : 1;
}

/* The number of Python frames th's records leave open (its ticks as they
 * are: only the order counts), or -1 when out of memory. */
static int64_t
open_python(const ft_thread *th)
{
    ft_replay_input in = {
        .ring = &th->ring,
        .clock = NULL,
        .base_ticks = th->base_ticks,
        .base_stack = th->base_stack,
        .base_depth = (size_t)th->base_depth,
        .base_known = 1,
        .stop_ns = INT64_MAX,
    };
    return ft_replay_open_python(&in);
}

/* Changes whenever th's ring takes a record, is packed or discarded. */
static uint64_t
ring_words(const ft_thread *th)
{
    const ft_ring *ring = &th->ring;
    return ring->wraps * ring->capacity + ring->pos + ring->packed_records
           + ring->discarded + ring->escapes;
}

int64_t
ft_thread_open_python(ft_thread *th)
{
    if (th->open_known && th->open_words == ring_words(th)) {
        return th->open_at_end;
    }
    int64_t n = open_python(th);
    /* An ended thread's records rarely change (C code entering it again
     * through PyGILState_Ensure() adds some: then counted again), and each
     * snapshot and the stop ask. */
    ft_thread_note_open(th, n);
    return n;
}

void
ft_thread_note_open(ft_thread *th, int64_t n)
{
    th->open_known = n >= 0;
    th->open_at_end = n;
    th->open_words = ring_words(th);
}

/* Why th's recording ended early (FT_DISPLACED_*), or FT_DISPLACED_NO. */
static int
displaced_why(ft_thread *th, int tool_lost)
{
    /* Events lost to memory leave frames open too: counted as dropped,
     * not taken for a displaced hook. */
    int checkable = th->lost == 0 && th->ring.discarded == 0;
    switch (th->at_stop) {
    case FT_AT_STOP_OTHER:
        return FT_DISPLACED_REPLACED;
    case FT_AT_STOP_OURS:
        if (tool_lost) {
            return FT_DISPLACED_TOOL_ID;
        }
        /* A hook put back from C, saved from the thread state, goes
         * unseen: comparing the frames the records leave open with the
         * stack at stop would tell, but a thread that start() caught
         * between a frame's push and its call event (3.12+) has one frame
         * too many on its records all the same. */
        return th->hook_restored ? FT_DISPLACED_RESTORED : FT_DISPLACED_NO;
    default:  /* FT_AT_STOP_GONE: the thread ended before stop */
        if (checkable && ft_thread_open_python(th) > 0) {
            return tool_lost ? FT_DISPLACED_TOOL_ID : FT_DISPLACED_ENDED;
        }
        return th->hook_restored ? FT_DISPLACED_RESTORED : FT_DISPLACED_NO;
    }
}

void
ft_find_displaced(ft_tracer *self, int tool_lost)
{
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        ft_thread *th = self->threads[i];
        int why = displaced_why(th, tool_lost);
        if (why != FT_DISPLACED_NO) {
            th->displaced = (uint8_t)why;
            th->loss_ticks = last_record(th);
            self->loss.unwarned = 1;
        }
    }
}

/* ---- telling the user ------------------------------------------------ */

static const char *
cause_of(int why)
{
    switch (why) {
    case FT_DISPLACED_ENDED:
        return "ended after its recording had stopped: sys.setprofile() or "
               "another profiler replaced frametrace's hook on it";
    case FT_DISPLACED_RESTORED:
        return "was not recorded for a while: sys.setprofile() or another "
               "profiler replaced frametrace's hook on it and put it back "
               "later; the events in between are missing";
    case FT_DISPLACED_TOOL_ID:
        return "was not recorded to the end: another tool freed or changed "
               "sys.monitoring tool id 2 while frametrace held it "
               "(free_tool_id(), set_events() or register_callback())";
    default:
        return "stopped being recorded before stop(): sys.setprofile() or "
               "another profiler replaced frametrace's hook on it";
    }
}

int
ft_tracer_warn_displaced(ft_tracer *self)
{
    if (self->loss.unhooked == FT_UNHOOKED_SEEN) {
        self->loss.unhooked = FT_UNHOOKED_WARNED;
        if (PyErr_WarnEx(
                PyExc_RuntimeWarning,
                "frametrace: a thread ran Python code that the setprofile "
                "backend could not record: threads that C code starts and "
                "that call Python (ctypes, cffi and pybind11 callbacks, "
                "such as torch's autograd and data threads) and threads "
                "started with _thread rather than threading are not "
                "recorded by it; backend=\"monitoring\" (CPython 3.12+) "
                "records them", 1) < 0) {
            return -1;
        }
    }
    if (!self->loss.unwarned) {
        return 0;
    }
    self->loss.unwarned = 0;
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        const ft_thread *th = self->threads[i];
        if (th->displaced == FT_DISPLACED_NO) {
            continue;
        }
        if (PyErr_WarnFormat(
                PyExc_RuntimeWarning, 1,
                "frametrace: thread %R (thread_serial %zd, id %lu, native id "
                "%lu) %s; its frames still open then end at its last record, "
                "flagged open_at_loss (see Tracer.displaced)",
                th->name != NULL ? th->name : Py_None, i + 1, th->thread_id,
                th->native_id, cause_of(th->displaced)) < 0) {
            return -1;
        }
    }
    return 0;
}

PyObject *
ft_displaced_list(ft_tracer *self)
{
    PyObject *result = PyList_New(0);
    for (Py_ssize_t i = 0; result != NULL && i < self->nthreads; i++) {
        const ft_thread *th = self->threads[i];
        if (th->displaced == FT_DISPLACED_NO) {
            continue;
        }
        PyObject *item = ft_thread_info(self, i, NULL);
        if (item == NULL || PyList_Append(result, item) < 0) {
            Py_CLEAR(result);
        }
        Py_XDECREF(item);
    }
    return result;
}

/* ---- the hook put back through sys.setprofile() --------------------- */

PyObject *
ft_hook_call(PyObject *hook, PyObject *args, PyObject *kwargs)
{
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)
        || PyTuple_GET_SIZE(args) != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "_ThreadHook(frame, event, arg) is called by the "
                        "interpreter as a profile function");
        return NULL;
    }
    /* Installed as this thread's Python profile function: sys.setprofile()
     * put it back.  Anything else (a profiler that chains to the function
     * it replaced) records nothing through it: that thread is reported
     * displaced at stop. */
    PyThreadState *ts = PyThreadState_Get();
    if (ft_tstate_profile_obj(ts) != hook
        || ft_tstate_profile_func(ts) == ft_hook) {
        Py_RETURN_NONE;
    }
    ft_state *state = ft_state_of_type(Py_TYPE(hook));
    if (state == NULL) {
        return NULL;
    }
    /* The thread registered with the tracer that is active now (the hook
     * may be an earlier tracer's) lost what ran since its hook went.  A
     * monitoring tracer lost nothing: the profile function is not its. */
    ft_tracer *tracer = state->active;
    if (tracer != NULL && tracer->backend != FT_BACKEND_SETPROFILE) {
        tracer = NULL;
    }
    ft_thread *th = tracer != NULL ? ft_find_thread(tracer, ts) : NULL;
    if (th != NULL) {
        th->hook_restored = 1;
    }
    /* Then as a new thread's first event: the hook of the active tracer, if
     * any, goes back on the thread in C, and the event is recorded. */
    Py_INCREF(hook);  /* the thread's reference goes with its replacement */
    PyObject *res = ft_bootstrap_thread(state, PySequence_Fast_ITEMS(args), 3);
    Py_DECREF(hook);
    return res;
}

/* ---- threads that run Python code unhooked ------------------------- */

/* Whether code is threading's Thread._bootstrap or _bootstrap_inner: a
 * thread threading started, before its bootstrap hooks it. */
static int
is_threading_bootstrap(PyCodeObject *code)
{
    PyObject *file = code->co_filename, *name = code->co_name;
    if (!PyUnicode_Check(file) || !PyUnicode_Check(name)
        || (PyUnicode_CompareWithASCIIString(name, "_bootstrap") != 0
            && PyUnicode_CompareWithASCIIString(name, "_bootstrap_inner") != 0)) {
        return 0;
    }
    Py_ssize_t n = PyUnicode_GetLength(file);
    PyObject *tail = n >= 12 ? PyUnicode_Substring(file, n - 12, n) : NULL;
    int match = tail != NULL
                && PyUnicode_CompareWithASCIIString(tail, "threading.py") == 0;
    Py_XDECREF(tail);
    PyErr_Clear();
    return match;
}

void
ft_note_unhooked(ft_tracer *tracer, PyThreadState *ts)
{
    if (tracer->backend != FT_BACKEND_SETPROFILE
        || tracer->loss.unhooked != FT_UNHOOKED_NO
        || ft_tstate_profile_func(ts) != NULL
        || ft_find_thread(tracer, ts) != NULL) {
        return;  /* hooked, or registered (its hook replaced: displaced.c) */
    }
    /* Its outermost frame tells threading's threads; frame objects are
     * made (3.11+), with the GC off so that no finalizer runs. */
    int gc_was_enabled = PyGC_Disable();
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    PyFrameObject *frame = PyThreadState_GetFrame(ts);
    int running = frame != NULL;
    while (frame != NULL) {
        PyFrameObject *back = PyFrame_GetBack(frame);
        if (back == NULL) {
            break;
        }
        Py_SETREF(frame, back);
    }
    if (running && !is_threading_bootstrap(ft_frame_code(frame))) {
        tracer->loss.unhooked = FT_UNHOOKED_SEEN;
    }
    Py_XDECREF(frame);
    PyErr_Clear();
    FT_RESTORE_EXC(saved);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}
