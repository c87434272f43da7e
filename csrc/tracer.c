/* The Tracer heap type: argument checking, start/stop and the latched stop
 * time.  Recording is in hook.c, replay in replay.c/events.c. */
#include "state.h"

#include <stdlib.h>
#include <string.h>

#define FT_DEFAULT_BUFFER_SIZE ((long long)1 << 20)
/* 2**28 records are 4 GiB per thread: anything larger is a mistake. */
#define FT_MAX_BUFFER_SIZE ((long long)1 << 28)

static const char *const backend_names[] = {"setprofile", "monitoring"};

/* The backend "auto" picks: sys.monitoring where there is one (cheaper per
 * event, see benchmarks/README.md), unless FRAMETRACE_BACKEND names one. */
static int
default_backend(void)
{
    const char *env = getenv("FRAMETRACE_BACKEND");
    if (env != NULL && strcmp(env, "setprofile") == 0) {
        return FT_BACKEND_SETPROFILE;
    }
    return FT_HAVE_MONITORING ? FT_BACKEND_MONITORING : FT_BACKEND_SETPROFILE;
}

/* FT_BACKEND_* of the backend argument (NULL: "auto"), or -1 with an
 * exception. */
static int
parse_backend(PyObject *obj)
{
    if (obj == NULL || obj == Py_None) {
        return default_backend();
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "backend must be a str (\"auto\", "
                     "\"setprofile\" or \"monitoring\"), not %.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (PyUnicode_CompareWithASCIIString(obj, "auto") == 0) {
        return default_backend();
    }
    if (PyUnicode_CompareWithASCIIString(obj, "setprofile") == 0) {
        return FT_BACKEND_SETPROFILE;
    }
    if (PyUnicode_CompareWithASCIIString(obj, "monitoring") == 0) {
        if (!FT_HAVE_MONITORING) {
            PyErr_SetString(PyExc_ValueError, "backend=\"monitoring\" needs "
                            "sys.monitoring (CPython 3.12+); this Python has "
                            "only \"setprofile\"");
            return -1;
        }
        return FT_BACKEND_MONITORING;
    }
    PyErr_Format(PyExc_ValueError, "backend must be \"auto\", \"setprofile\" "
                 "or \"monitoring\", got %R", obj);
    return -1;
}

static PyObject *
tracer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"buffer_size", "c_calls", "backend", NULL};
    PyObject *size_obj = NULL;
    PyObject *c_calls_obj = Py_True;
    PyObject *backend_obj = NULL;
    long long buffer_size = FT_DEFAULT_BUFFER_SIZE;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$OO:Tracer", kwlist,
                                     &size_obj, &c_calls_obj, &backend_obj)) {
        return NULL;
    }
    int backend = parse_backend(backend_obj);
    if (backend < 0) {
        return NULL;
    }
    if (size_obj != NULL) {
        if (!PyLong_Check(size_obj) || PyBool_Check(size_obj)) {
            PyErr_Format(PyExc_TypeError,
                         "buffer_size must be an int (events per thread), "
                         "not %.100s", Py_TYPE(size_obj)->tp_name);
            return NULL;
        }
        int overflow;
        buffer_size = PyLong_AsLongLongAndOverflow(size_obj, &overflow);
        if (buffer_size == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (overflow || buffer_size < 1 || buffer_size > FT_MAX_BUFFER_SIZE) {
            PyErr_Format(PyExc_ValueError,
                         "buffer_size must be between 1 and %lld events per "
                         "thread, got %R", FT_MAX_BUFFER_SIZE, size_obj);
            return NULL;
        }
    }
    if (!PyBool_Check(c_calls_obj)) {
        PyErr_Format(PyExc_TypeError, "c_calls must be a bool, not %.100s",
                     Py_TYPE(c_calls_obj)->tp_name);
        return NULL;
    }
    ft_state *state = ft_state_of_type(type);
    if (state == NULL) {
        return NULL;
    }
    ft_tracer *self = (ft_tracer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->state = state;
    self->buffer_size = (uint64_t)buffer_size;
    self->c_calls = c_calls_obj == Py_True;
    self->backend = backend;
    self->phase = FT_PHASE_NEW;
    self->clock.use_cycles = ft_clock_cycles_usable();
    if (ft_functable_init(&self->funcs) < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

/* ---- installing and removing the hook -------------------------------- */

/* Whether a thread's profile function is the hook of a stopped tracer: inert,
 * it goes at the thread's next event (3.12+) or with the next start(). */
static int
is_inert(Py_tracefunc func, PyObject *obj)
{
    return func == ft_hook && ((ft_hookobject *)obj)->tracer == NULL;
}

/* The first thread (other than through our own hook or bootstrap) with a
 * profile function installed, described in a new string; NULL if none. */
static PyObject *
find_conflict(ft_tracer *self)
{
    unsigned long thread_id = 0;
    PyObject *other = NULL;
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        Py_tracefunc func = ft_tstate_profile_func(ts);
        PyObject *obj = ft_tstate_profile_obj(ts);
        if (func == NULL || obj == self->state->thread_bootstrap
            || is_inert(func, obj)) {
            continue;
        }
        thread_id = ft_tstate_thread_id(ts);
        other = Py_NewRef(obj ? obj : Py_None);
        break;
    }
    if (other != NULL) {
        PyObject *msg = PyUnicode_FromFormat(
            "another profiler is installed on thread %lu: %R (cProfile, "
            "sys.setprofile() or another PyEval_SetProfile() hook); stop it "
            "before starting frametrace", thread_id, other);
        Py_DECREF(other);
        return msg;
    }
#if PY_VERSION_HEX >= 0x030C0000
    /* cProfile uses sys.monitoring's profiler tool id on 3.12+. */
    PyObject *monitoring = PyImport_ImportModule("sys");
    PyObject *tool = NULL;
    if (monitoring != NULL) {
        Py_SETREF(monitoring, PyObject_GetAttrString(monitoring, "monitoring"));
    }
    if (monitoring != NULL) {
        PyObject *id = PyObject_GetAttrString(monitoring, "PROFILER_ID");
        if (id != NULL) {
            tool = PyObject_CallMethod(monitoring, "get_tool", "O", id);
            Py_DECREF(id);
        }
        Py_DECREF(monitoring);
    }
    if (tool == NULL) {
        return NULL;  /* exception set */
    }
    if (tool != Py_None) {
        PyObject *msg = PyUnicode_FromFormat(
            "another profiler holds sys.monitoring.PROFILER_ID: %R (cProfile "
            "uses it on Python 3.12+); stop it before starting frametrace",
            tool);
        Py_DECREF(tool);
        return msg;
    }
    Py_DECREF(tool);
#endif
    return NULL;
}

/* Sets threading's profile hook (for threads started from now on) to hook,
 * returning the previous one (new reference) or NULL on error. */
static PyObject *
swap_threading_profile(PyObject *hook)
{
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL) {
        return NULL;
    }
    PyObject *prev = PyObject_CallMethod(threading, "getprofile", NULL);
    if (prev != NULL) {
        PyObject *res = PyObject_CallMethod(threading, "setprofile", "O",
                                            hook);
        if (res == NULL) {
            Py_CLEAR(prev);
        }
        Py_XDECREF(res);
    }
    Py_DECREF(threading);
    return prev;
}

/* A thread state seen in a walk of the thread list.  Setting a profile
 * function runs audit hooks, which are Python code that may let a thread
 * exit: such entries are checked again before each use. */
typedef struct {
    PyThreadState *ts;
    uint64_t id;
    ft_hookobject *hook;  /* borrowed: held by self->hooks (3.10/3.11) */
} thread_entry;

#if FT_NEED_CHECKED_WALK
/* Whether ts (seen with this id) is still a live thread state. */
static int
tstate_alive(PyThreadState *ts, uint64_t id)
{
    PyThreadState *p = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; p != NULL; p = PyThreadState_Next(p)) {
        if (p == ts) {
            return PyThreadState_GetID(p) == id;
        }
    }
    return 0;
}
#endif

static int
is_ours(ft_tracer *self, PyThreadState *ts)
{
    PyObject *obj = ft_tstate_profile_obj(ts);
    if (obj == self->state->thread_bootstrap) {
        return 1;
    }
    if (ft_tstate_profile_func(ts) != ft_hook) {
        return 0;
    }
#if FT_SHARED_HOOK
    /* Still ours once stop() has silenced it. */
    return obj == self->hook;
#else
    return ((ft_hookobject *)obj)->tracer == self;
#endif
}

/* Takes the stack of thread th (running as ts) at stop. */
static void
take_stop_stack(ft_tracer *self, ft_thread *th, PyThreadState *ts)
{
    if (th == NULL || th->stop_stack != NULL) {
        return;
    }
    PyFrameObject *top = PyThreadState_GetFrame(ts);
    if (ft_capture_stack(self, top, &th->stop_stack, &th->stop_depth) < 0) {
        /* Replay then goes without it: only frames lost to overflow are
         * affected. */
        PyErr_Clear();
        th->stop_stack = NULL;
    }
    else if (th->stop_stack == NULL) {
        th->stop_stack = malloc(sizeof(uint32_t));  /* empty */
    }
    Py_XDECREF(top);
}

#if FT_SHARED_HOOK
#if FT_NEED_CHECKED_WALK
/* What PyEval_SetProfileAllThreads(func, arg) does, where it is unsafe
 * (FT_ALL_THREADS_CALL_SAFE): the thread states are listed in pure C
 * first, and each is checked to be alive before its call, whose audit
 * hooks may let threads exit.  With func NULL, only threads where this
 * tracer's hook still is.  0, or -1 with an exception (installing only: a
 * refused removal leaves the hook, silenced, and is reported). */
static int
set_profile_checked(ft_tracer *self, Py_tracefunc func, PyObject *arg)
{
    int gc_was_enabled = PyGC_Disable();
    thread_entry *todo = NULL;
    size_t ntodo = 0, cap = 0;
    int rc = 0;
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (func == NULL && !is_ours(self, ts)) {
            continue;
        }
        if (ntodo == cap) {
            cap = cap ? cap * 2 : 16;
            thread_entry *grown = realloc(todo, cap * sizeof(thread_entry));
            if (grown == NULL) {
                PyErr_NoMemory();
                rc = -1;
                break;
            }
            todo = grown;
        }
        todo[ntodo].ts = ts;
        todo[ntodo].id = PyThreadState_GetID(ts);
        todo[ntodo].hook = NULL;
        ntodo++;
    }
    for (size_t i = 0; rc == 0 && i < ntodo; i++) {
        if (func != NULL && self->phase != FT_PHASE_ACTIVE) {
            break;  /* an audit hook stopped the tracer */
        }
        if (!tstate_alive(todo[i].ts, todo[i].id)
            || (func == NULL && !is_ours(self, todo[i].ts))) {
            continue;
        }
        if (_PyEval_SetProfile(todo[i].ts, func, arg) < 0) {
            if (func != NULL) {
                rc = -1;
            }
            else {
                PyErr_WriteUnraisable(NULL);
            }
        }
    }
    if (rc < 0 && func == NULL) {
        PyErr_WriteUnraisable(NULL);  /* never raise from a removal */
        rc = 0;
    }
    free(todo);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    return rc;
}
#endif

/* PyEval_SetProfileAllThreads(func, arg) where it is safe, else the same
 * done by hand.  0, or -1 with an exception (installing only). */
static int
set_profile_all(ft_tracer *self, Py_tracefunc func, PyObject *arg)
{
#if FT_NEED_CHECKED_WALK
    if (!FT_ALL_THREADS_CALL_SAFE()) {
        return set_profile_checked(self, func, arg);
    }
#endif
    (void)self;
    PyEval_SetProfileAllThreads(func, arg);
    return 0;
}

/* Removes this tracer's hook from every thread, taking each hooked thread's
 * stack first if take_stacks.
 *
 * No public call removes the profile function of one other thread:
 * PyEval_SetProfile() acts on the caller, PyEval_SetProfileAllThreads() on
 * all.  When every thread has our hook or none, the latter does it.  When
 * another tool has installed its own on some thread meanwhile, it is left
 * alone: the caller's thread drops ours now, and every other thread drops
 * ours itself at its next event (hook_off() in hook.c), silenced until then.
 * Those threads then pay for a profile function a while longer, but only
 * while another tool's keeps CPython's profiling layer on anyway.
 *
 * Setting the profile function runs the audit hooks of "sys.setprofile"
 * once per thread (Python code): a thread that sets its own profile
 * function while they run, with the GIL released, can lose it. */
static void
uninstall_hooks(ft_tracer *self, int take_stacks)
{
    ft_hookobject *hook = (ft_hookobject *)self->hook;
    if (hook == NULL) {
        return;  /* not installed, or removed already */
    }
    /* Pure C first, GC off so that allocations run no finalizer. */
    int gc_was_enabled = PyGC_Disable();
    int any_ours = 0, all_ours = 1;
    PyInterpreterState *interp = PyInterpreterState_Get();
    PyThreadState *ts = PyInterpreterState_ThreadHead(interp);
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        Py_tracefunc func = ft_tstate_profile_func(ts);
        if (is_ours(self, ts)) {
            any_ours = 1;
            if (take_stacks && func == ft_hook) {
                take_stop_stack(self, ft_find_thread(self, ts), ts);
            }
        }
        else if (func != NULL && !is_inert(func, ft_tstate_profile_obj(ts))) {
            all_ours = 0;
        }
    }
    /* Silenced first: events from here on record nothing. */
    hook->tracer = NULL;
    if (any_ours) {
        if (all_ours) {
            (void)set_profile_all(self, NULL, NULL);
        }
        else if (is_ours(self, PyThreadState_Get())) {
            PyEval_SetProfile(NULL, NULL);
        }
    }
    Py_CLEAR(self->hook);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}
#else
/* Removes this tracer's hook from every thread, taking each hooked thread's
 * stack first if take_stacks. */
static void
uninstall_hooks(ft_tracer *self, int take_stacks)
{
    /* Pure C first, GC off so that allocations run no finalizer: the
     * stacks, the list of threads to visit, and silencing every hook. */
    int gc_was_enabled = PyGC_Disable();
    thread_entry *todo = NULL;
    size_t ntodo = 0, cap = 0;
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (!is_ours(self, ts)) {
            continue;
        }
        if (take_stacks && ft_tstate_profile_func(ts) == ft_hook) {
            ft_hookobject *hook = (ft_hookobject *)ft_tstate_profile_obj(ts);
            take_stop_stack(self, hook->thread, ts);
        }
        if (ntodo == cap) {
            cap = cap ? cap * 2 : 16;
            thread_entry *grown = realloc(todo, cap * sizeof(thread_entry));
            if (grown == NULL) {
                break;  /* the rest stay installed, silenced below */
            }
            todo = grown;
        }
        todo[ntodo].ts = ts;
        todo[ntodo].id = PyThreadState_GetID(ts);
        todo[ntodo].hook = NULL;
        ntodo++;
    }
    if (self->hooks != NULL) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->hooks); i++) {
            ((ft_hookobject *)PyList_GET_ITEM(self->hooks, i))->thread = NULL;
        }
    }
    for (size_t i = 0; i < ntodo; i++) {
        if (tstate_alive(todo[i].ts, todo[i].id) && is_ours(self, todo[i].ts)
            && _PyEval_SetProfile(todo[i].ts, NULL, NULL) < 0) {
            /* An audit hook refused: the hook stays, inert. */
            PyErr_WriteUnraisable(NULL);
        }
    }
    free(todo);
    /* Hooks registered meanwhile (a thread's bootstrap, while an audit hook
     * ran) are silenced here too.  thread is cleared first, always: the hot
     * path reads the tracer only when its thread is set. */
    if (self->hooks != NULL) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->hooks); i++) {
            ft_hookobject *hook = (ft_hookobject *)PyList_GET_ITEM(self->hooks, i);
            hook->thread = NULL;
            hook->tracer = NULL;
        }
    }
    Py_CLEAR(self->hooks);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}

#endif

#if FT_HAVE_MONITORING
/* The monitoring backend's threads are found by thread state, not hook. */
static void
take_stop_stacks(ft_tracer *self)
{
    int gc_was_enabled = PyGC_Disable();
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        ft_thread *th = ft_find_thread(self, ts);
        if (th != NULL) {
            take_stop_stack(self, th, ts);
        }
    }
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}
#endif

static void
restore_threading_profile(ft_tracer *self)
{
    PyObject *prev = self->prev_thread_hook;
    self->prev_thread_hook = NULL;
    if (prev == NULL) {
        return;
    }
    if (FT_FINALIZING()) {
        Py_DECREF(prev);  /* threading is going away with everything else */
        return;
    }
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *current = threading
        ? PyObject_CallMethod(threading, "getprofile", NULL) : NULL;
    /* Someone may have set their own hook meanwhile: leave it. */
    if (current == self->state->thread_bootstrap) {
        PyObject *res = PyObject_CallMethod(threading, "setprofile", "O", prev);
        Py_XDECREF(res);
    }
    if (PyErr_Occurred()) {
        PyErr_WriteUnraisable(NULL);
    }
    Py_XDECREF(current);
    Py_XDECREF(threading);
    Py_DECREF(prev);
}

static void
free_threads(ft_tracer *self)
{
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        ft_thread_free(self->threads[i]);
    }
    free(self->threads);
    self->threads = NULL;
    self->nthreads = 0;
    self->threads_cap = 0;
}

/* Registers thread ts (its stack) without installing the hook yet; the
 * caller's thread gets the ring given in caller_ring.  Runs no Python code.
 * Returns the thread, or NULL with an exception. */
static ft_thread *
register_existing(ft_tracer *self, PyThreadState *ts, PyObject *names,
                  ft_ring *caller_ring)
{
    PyFrameObject *top = PyThreadState_GetFrame(ts);
    ft_thread *th = ft_register_thread(self, ts, top, 0);
    Py_XDECREF(top);
    if (th == NULL) {
        return NULL;
    }
    if (ts == PyThreadState_Get()) {
        ft_thread_adopt_ring(th, caller_ring);
        th->ring.last = self->clock.anchors[0].ticks;  /* start() */
        memset(caller_ring, 0, sizeof(*caller_ring));
    }
    ft_name_thread(th, names);
    return th;
}

#if FT_SHARED_HOOK
/* The hook object of every thread, for start(): a new reference, or NULL
 * with an exception. */
static PyObject *
new_shared_hook(ft_tracer *self)
{
    ft_hookobject *hook = PyObject_New(ft_hookobject, self->state->hook_type);
    if (hook == NULL) {
        return NULL;
    }
    hook->tracer = self;  /* borrowed: cleared by uninstall_hooks() */
    hook->thread = NULL;
    hook->generation = self->generation;
    return (PyObject *)hook;
}

/* Installs the shared hook on every thread.  0, or -1 with an exception. */
static int
install_shared_hook(ft_tracer *self)
{
    /* Held: an audit hook may stop the tracer, which drops its own, before
     * any thread holds one. */
    PyObject *hook = Py_NewRef(self->hook);
    int rc = set_profile_all(self, ft_hook, hook);
    Py_DECREF(hook);
    if (rc < 0) {
        return -1;
    }
    /* It reports a refusal (an audit hook's exception) as unraisable only:
     * the caller's thread tells.  Unless the tracer stopped meanwhile (an
     * audit hook may stop it). */
    if (self->phase == FT_PHASE_ACTIVE
        && !is_ours(self, PyThreadState_Get())) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the profile function could not be installed: an "
                        "audit hook refused sys.setprofile (see the "
                        "exception reported above)");
        return -1;
    }
    return 0;
}
#endif

static PyObject *start_claimed(ft_tracer *self);

static PyObject *
tracer_start(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    ft_state *state = self->state;
    switch (self->phase) {
    case FT_PHASE_ACTIVE:
        PyErr_SetString(PyExc_RuntimeError,
                        "start() called twice: this Tracer is already active");
        return NULL;
    case FT_PHASE_STOPPED:
    case FT_PHASE_CLEARED:
        PyErr_SetString(PyExc_RuntimeError,
                        "this Tracer has already run and stopped; a Tracer "
                        "records once: create a new one");
        return NULL;
    }
    if (state->active != NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "another frametrace Tracer is already active in this "
                        "interpreter; stop it first");
        return NULL;
    }
    /* start() runs Python code before the tracer is active (conflict checks,
     * thread names, threading's hook, audit hooks), which may let another
     * thread, or that code itself, start a tracer: one start() at a time. */
    if (state->starting != NULL) {
        PyErr_SetString(PyExc_RuntimeError, state->starting == self
                        ? "start() called twice: this Tracer is already starting"
                        : "another frametrace Tracer is starting in this "
                          "interpreter; stop it first");
        return NULL;
    }
    state->starting = self;
    state->starting_thread = PyThread_get_thread_ident();
    PyObject *res = start_claimed(self);
    state->starting = NULL;
    return res;
}

/* start() once this tracer is the only one starting. */
static PyObject *
start_claimed(ft_tracer *self)
{
    ft_state *state = self->state;
#if FT_HAVE_MONITORING
    int monitoring = self->backend == FT_BACKEND_MONITORING;
    PyObject *conflict = monitoring ? ft_monitor_conflict() : find_conflict(self);
#else
    int monitoring = 0;
    PyObject *conflict = find_conflict(self);
#endif
    if (ft_refuse_conflict(conflict) < 0) {
        return NULL;
    }
    /* Everything that runs Python code comes before the tracer is active:
     * threads' names, threading's hook, and faulting the caller's ring in
     * (which takes a while, and is no part of the trace). */
    ft_ring caller_ring;
    /* Its origin is set once the clock has started. */
    if (ft_ring_alloc(&caller_ring, self->buffer_size, 0) < 0) {
        PyErr_Format(PyExc_MemoryError, "cannot allocate a ring of %llu "
                     "events (buffer_size)",
                     (unsigned long long)self->buffer_size);
        return NULL;
    }
    PyObject *names = ft_thread_names();
    self->generation = ft_next_generation();
#if FT_SHARED_HOOK
    if (!monitoring) {
        self->hook = new_shared_hook(self);
    }
    if (!monitoring && self->hook == NULL) {
#else
    self->hooks = PyList_New(0);
    if (self->hooks == NULL) {
#endif
        Py_XDECREF(names);
        ft_ring_free(&caller_ring);
        return NULL;
    }
    /* Threads started from now on install the hook themselves (with the
     * monitoring backend, which sees every thread, they only get named). */
    self->prev_thread_hook = swap_threading_profile(state->thread_bootstrap);
    if (self->prev_thread_hook == NULL
        || ft_clock_start(&self->clock, self->clock.use_cycles) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        restore_threading_profile(self);
        Py_CLEAR(self->hooks);
        Py_CLEAR(self->hook);
        Py_XDECREF(names);
        ft_ring_free(&caller_ring);
        return NULL;
    }
    ft_anchor start = self->clock.anchors[0];
    self->start_ns = start.ns;
    state->active = self;
    self->phase = FT_PHASE_ACTIVE;

    /* Register every thread in pure C, with the GC off so that allocations
     * run no finalizer: nothing else runs while the list is walked. */
    int gc_was_enabled = PyGC_Disable();
    PyThreadState *current = PyThreadState_Get();
    thread_entry *entries = NULL;
    size_t nentries = 0, cap = 0;
    int rc = 0;
    /* The caller first: its events come first in getEvents(). */
    PyThreadState *ts = current;
    PyThreadState *next = PyInterpreterState_ThreadHead(
        PyThreadState_GetInterpreter(current));
    while (rc == 0 && ts != NULL) {
        if (nentries == cap) {
            cap = cap ? cap * 2 : 16;
            thread_entry *grown = realloc(entries, cap * sizeof(thread_entry));
            if (grown == NULL) {
                PyErr_NoMemory();
                rc = -1;
                break;
            }
            entries = grown;
        }
        ft_thread *th = register_existing(self, ts, names, &caller_ring);
        if (th == NULL) {
            rc = -1;
            break;
        }
        th->base_ticks = start.ticks;
        entries[nentries].ts = ts;
        entries[nentries].id = th->tstate_id;
        entries[nentries].hook = NULL;
#if !FT_SHARED_HOOK
        if (!monitoring) {
            entries[nentries].hook = ft_new_hook(self, th);
            if (entries[nentries].hook == NULL) {
                rc = -1;
                break;
            }
            Py_DECREF(entries[nentries].hook);  /* self->hooks holds it */
        }
#endif
        nentries++;
        if (next == current) {
            next = PyThreadState_Next(next);
        }
        ts = next;
        next = next ? PyThreadState_Next(next) : NULL;
        if (ts == current) {
            ts = next;
            next = next ? PyThreadState_Next(next) : NULL;
        }
    }
#if FT_SHARED_HOOK
    if (rc == 0 && !monitoring) {
        rc = install_shared_hook(self);
    }
#else
    /* Installing runs audit hooks (Python code): check each thread state
     * is still alive first.  They may stop the tracer, which drops its list
     * of hooks: held meanwhile. */
    PyObject *hooks = Py_XNewRef(self->hooks);
    for (size_t i = 0; rc == 0 && !monitoring && i < nentries
                       && self->phase == FT_PHASE_ACTIVE; i++) {
        if (tstate_alive(entries[i].ts, entries[i].id)) {
            rc = _PyEval_SetProfile(entries[i].ts, ft_hook,
                                    (PyObject *)entries[i].hook);
        }
    }
    Py_XDECREF(hooks);
#endif
    free(entries);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    Py_XDECREF(names);
    ft_ring_free(&caller_ring);  /* if it was not handed over */
#if FT_HAVE_MONITORING
    if (rc == 0 && monitoring) {
        rc = ft_monitor_start(self);
    }
#endif
    if (rc < 0) {
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        state->active = NULL;
        self->phase = FT_PHASE_NEW;
#if FT_HAVE_MONITORING
        ft_monitor_stop(self);
#endif
        uninstall_hooks(self, 0);
        restore_threading_profile(self);
        free_threads(self);
        self->start_ns = 0;
        FT_RESTORE_EXC(saved);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The latched stop: the first call records stop_ns (now, or at the anchor
 * `at` taken earlier) and removes the hook; every later call does nothing.
 * Never fails. */
static void
latch_stop_at(ft_tracer *self, const ft_anchor *at)
{
    if (self->phase != FT_PHASE_ACTIVE) {
        return;
    }
    /* Every record was written before this anchor: converted, none can
     * end after stop_ns.  With an earlier anchor, the records after it
     * are past stop_ns: the replay drops them. */
    self->stop_ns = at != NULL ? at->ns : ft_clock_anchor(&self->clock).ns;
    self->phase = FT_PHASE_STOPPED;
    /* Before uninstalling, which may run Python code: threads starting
     * meanwhile must not register with a stopping tracer. */
    if (self->state->active == self) {
        self->state->active = NULL;
    }
#if FT_HAVE_MONITORING
    if (self->backend == FT_BACKEND_MONITORING) {
        take_stop_stacks(self);
        ft_monitor_stop(self);
    }
#endif
    uninstall_hooks(self, 1);
    restore_threading_profile(self);
    /* Threads may have been renamed while traced. */
    PyObject *names = ft_thread_names();
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        ft_name_thread(self->threads[i], names);
    }
    Py_XDECREF(names);
}

static void
latch_stop(ft_tracer *self)
{
    latch_stop_at(self, NULL);
}

void
ft_tracer_before_fork(ft_tracer *self)
{
    if (self->phase == FT_PHASE_ACTIVE) {
        self->fork_anchor = ft_clock_anchor(&self->clock);
        self->fork_anchored = 1;
    }
}

void
ft_tracer_after_fork_child(ft_tracer *self)
{
    /* The other threads are gone, and the child's at-fork callbacks have
     * run since the anchor: the trace ends where the fork began.  The
     * child traces nothing unless it starts a tracer of its own. */
    latch_stop_at(self, self->fork_anchored ? &self->fork_anchor : NULL);
    self->fork_anchored = 0;
}

static PyObject *
tracer_stop(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    latch_stop(self);
    Py_RETURN_NONE;
}

static PyObject *
tracer_enter(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *res = tracer_start(self, NULL);
    if (res == NULL) {
        return NULL;
    }
    Py_DECREF(res);
    return Py_NewRef(self);
}

static PyObject *
tracer_exit(ft_tracer *self, PyObject *const *Py_UNUSED(args),
            Py_ssize_t Py_UNUSED(nargs))
{
    latch_stop(self);
    Py_RETURN_FALSE;
}

static int
check_stopped(ft_tracer *self, const char *what)
{
    switch (self->phase) {
    case FT_PHASE_NEW:
        PyErr_Format(PyExc_RuntimeError,
                     "%s called before start(): nothing was recorded", what);
        return -1;
    case FT_PHASE_ACTIVE:
        PyErr_Format(PyExc_RuntimeError,
                     "%s called while the tracer is active: call stop() "
                     "first", what);
        return -1;
    case FT_PHASE_CLEARED:
        PyErr_Format(PyExc_RuntimeError,
                     "%s called after clear(): the records are gone", what);
        return -1;
    }
    return 0;
}

static PyObject *
tracer_get_events(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    if (check_stopped(self, "getEvents()") < 0) {
        return NULL;
    }
    return ft_build_events(self);
}

static void
tracer_release(ft_tracer *self)
{
    free_threads(self);
    ft_functable_clear(&self->funcs);
    ft_clock_free(&self->clock);
}

static PyObject *
tracer_clear_method(ft_tracer *self, PyObject *Py_UNUSED(ignored))
{
    if (self->phase == FT_PHASE_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError,
                        "clear() called while the tracer is active: call "
                        "stop() first");
        return NULL;
    }
    if (self->phase == FT_PHASE_STOPPED) {
        tracer_release(self);
        self->phase = FT_PHASE_CLEARED;
    }
    Py_RETURN_NONE;
}

/* ---- attributes -------------------------------------------------------- */

static uint64_t
thread_dropped(const ft_thread *th)
{
    return ft_ring_overwritten(&th->ring) + th->lost;
}

static PyObject *
tracer_get_backend(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(backend_names[self->backend]);
}

static PyObject *
tracer_get_start_ns(ft_tracer *self, void *Py_UNUSED(closure))
{
    if (self->phase == FT_PHASE_NEW) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(self->start_ns);
}

static PyObject *
tracer_get_stop_ns(ft_tracer *self, void *Py_UNUSED(closure))
{
    if (self->phase == FT_PHASE_NEW || self->phase == FT_PHASE_ACTIVE) {
        Py_RETURN_NONE;
    }
    return PyLong_FromLongLong(self->stop_ns);
}

static PyObject *
tracer_get_active(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->phase == FT_PHASE_ACTIVE);
}

static PyObject *
tracer_get_dropped(ft_tracer *self, void *Py_UNUSED(closure))
{
    uint64_t total = 0;
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        total += thread_dropped(self->threads[i]);
    }
    return PyLong_FromUnsignedLongLong(total);
}

static PyObject *
tracer_get_dropped_by_thread(ft_tracer *self, void *Py_UNUSED(closure))
{
    PyObject *result = PyDict_New();
    if (result == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        const ft_thread *th = self->threads[i];
        PyObject *key = PyLong_FromUnsignedLong(th->thread_id);
        if (key == NULL) {
            goto error;
        }
        /* A thread id reused by a later thread adds up. */
        unsigned long long count = thread_dropped(th);
        PyObject *prev = PyDict_GetItemWithError(result, key);
        if (prev != NULL) {
            count += PyLong_AsUnsignedLongLong(prev);
        }
        PyObject *value = PyErr_Occurred()
            ? NULL : PyLong_FromUnsignedLongLong(count);
        int rc = value ? PyDict_SetItem(result, key, value) : -1;
        Py_DECREF(key);
        Py_XDECREF(value);
        if (rc < 0) {
            goto error;
        }
    }
    return result;

error:
    Py_DECREF(result);
    return NULL;
}

static PyObject *
tracer_get_thread_names(ft_tracer *self, void *Py_UNUSED(closure))
{
    PyObject *result = PyDict_New();
    for (Py_ssize_t i = 0; result && i < self->nthreads; i++) {
        const ft_thread *th = self->threads[i];
        if (th->name == NULL) {
            continue;
        }
        PyObject *key = PyLong_FromUnsignedLong(th->thread_id);
        if (key == NULL || PyDict_SetItem(result, key, th->name) < 0) {
            Py_CLEAR(result);
        }
        Py_XDECREF(key);
    }
    return result;
}

static PyObject *
tracer_get_threads(ft_tracer *self, void *Py_UNUSED(closure))
{
    PyObject *result = PyList_New(self->nthreads);
    for (Py_ssize_t i = 0; result && i < self->nthreads; i++) {
        const ft_thread *th = self->threads[i];
        PyObject *item = Py_BuildValue("(kk)", th->thread_id, th->native_id);
        if (item == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, item);
    }
    return result;
}

static PyObject *
tracer_ignore(ft_tracer *self, PyObject *obj)
{
    PyObject *code = obj;
    if (PyFunction_Check(obj)) {
        code = PyFunction_GET_CODE(obj);
    }
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "_ignore() takes a function or a code "
                     "object, not %.100s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (self->phase == FT_PHASE_CLEARED) {
        PyErr_SetString(PyExc_RuntimeError, "_ignore() called after clear()");
        return NULL;
    }
    if (ft_functable_ignore_code(&self->funcs, (PyCodeObject *)code) < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

static PyObject *
tracer_get_buffer_size(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->buffer_size);
}

static PyObject *
tracer_get_clock(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(self->clock.use_cycles ? "cycles" : "monotonic");
}

static PyObject *
tracer_get_c_calls(ft_tracer *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->c_calls);
}

/* ---- type slots -------------------------------------------------------- */

static int
tracer_traverse(ft_tracer *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->hooks);
    Py_VISIT(self->hook);
    Py_VISIT(self->prev_thread_hook);
    Py_VISIT(self->monitor);
    return ft_functable_traverse(&self->funcs, visit, arg);
}

static int
tracer_clear(ft_tracer *self)
{
    if (self->phase == FT_PHASE_ACTIVE) {
        /* Unreachable while tracing (state->active and the hooks point at
         * it without owning it): stop first, or the hooks would dangle. */
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        latch_stop(self);
        FT_RESTORE_EXC(saved);
    }
    Py_CLEAR(self->hooks);
    Py_CLEAR(self->hook);
    Py_CLEAR(self->prev_thread_hook);
    Py_CLEAR(self->monitor);
    /* The function table may hold a reference back to this tracer (a code
     * object whose constants reach it): release it to break the cycle. */
    if (self->phase == FT_PHASE_STOPPED) {
        self->phase = FT_PHASE_CLEARED;
    }
    tracer_release(self);
    return 0;
}

static void
tracer_dealloc(ft_tracer *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    /* Stop before weakref callbacks run Python code: until the hooks are
     * gone, they may touch this tracer. */
    tracer_clear(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    tracer_clear(self);
    tracer_release(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef tracer_methods[] = {
    {"start", (PyCFunction)tracer_start, METH_NOARGS,
     "start($self, /)\n--\n\n"
     "Install the hook on every thread and start recording."},
    {"stop", (PyCFunction)tracer_stop, METH_NOARGS,
     "stop($self, /)\n--\n\n"
     "Stop recording and latch stop_ns.  Later calls do nothing."},
    {"getEvents", (PyCFunction)tracer_get_events, METH_NOARGS,
     "getEvents($self, /)\n--\n\n"
     "The recorded events, complete and nested; none ends after stop_ns."},
    {"get_events", (PyCFunction)tracer_get_events, METH_NOARGS,
     "get_events($self, /)\n--\n\nAlias of getEvents()."},
    {"clear", (PyCFunction)tracer_clear_method, METH_NOARGS,
     "clear($self, /)\n--\n\n"
     "Free the records and the references held to traced functions."},
    {"_write_chrome", (PyCFunction)(void (*)(void))ft_write_chrome,
     METH_VARARGS | METH_KEYWORDS,
     "_write_chrome($self, path, *, pid, origin_ns, prelude, trailer, "
     "compress=False)\n--\n\n"
     "Write the events as Chrome trace JSON, straight from the records; "
     "returns how many.  prelude and trailer are JSON the caller renders: "
     "see frametrace.export.write_chrome()."},
    {"_write_perfetto", (PyCFunction)(void (*)(void))ft_write_perfetto,
     METH_VARARGS | METH_KEYWORDS,
     "_write_perfetto($self, path, *, pid, process_name, thread_names, "
     "tracks, compress=False)\n--\n\n"
     "Write the events as a Perfetto protobuf trace, straight from the "
     "records; returns how many.  See frametrace.export.write_perfetto()."},
    {"_ignore", (PyCFunction)tracer_ignore, METH_O,
     "_ignore($self, func, /)\n--\n\n"
     "Never record frames of this function or code object (frametrace's own "
     "session code).  Its callees are still recorded."},
    {"__enter__", (PyCFunction)tracer_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nStart tracing; return the tracer."},
    {"__exit__", (PyCFunction)(void (*)(void))tracer_exit, METH_FASTCALL,
     "__exit__($self, *exc_info, /)\n--\n\nStop tracing (a no-op if stopped)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef tracer_getset[] = {
    {"start_ns", (getter)tracer_get_start_ns, NULL,
     "time.monotonic_ns() when tracing started, or None", NULL},
    {"stop_ns", (getter)tracer_get_stop_ns, NULL,
     "time.monotonic_ns() latched by the first stop(), or None", NULL},
    {"active", (getter)tracer_get_active, NULL, "True while tracing", NULL},
    {"dropped", (getter)tracer_get_dropped, NULL,
     "events lost, all threads: overwritten by the ring or not recorded",
     NULL},
    {"dropped_by_thread", (getter)tracer_get_dropped_by_thread, NULL,
     "{thread_id: events lost} for every traced thread", NULL},
    {"_threads", (getter)tracer_get_threads, NULL,
     "[(thread_id, native_thread_id)] of the traced threads, in the order "
     "of their events", NULL},
    {"thread_names", (getter)tracer_get_thread_names, NULL,
     "{thread_id: name} of the traced threads threading knows", NULL},
    {"buffer_size", (getter)tracer_get_buffer_size, NULL,
     "ring capacity, in events per thread", NULL},
    {"clock", (getter)tracer_get_clock, NULL,
     "\"cycles\" (the CPU counter, converted to monotonic ns) or "
     "\"monotonic\" (CLOCK_MONOTONIC read directly); FRAMETRACE_CLOCK="
     "monotonic forces the latter", NULL},
    {"backend", (getter)tracer_get_backend, NULL,
     "\"setprofile\" (the PyEval_SetProfile hook) or \"monitoring\" "
     "(sys.monitoring, CPython 3.12+).", NULL},
    {"c_calls", (getter)tracer_get_c_calls, NULL,
     "whether C function calls are recorded", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef tracer_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ft_tracer, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot tracer_slots[] = {
    {Py_tp_doc,
     "Tracer(buffer_size=1048576, *, c_calls=True)\n--\n\n"
     "Records every Python and C function entry and exit of every thread\n"
     "into per-thread ring buffers of buffer_size events."},
    {Py_tp_new, tracer_new},
    {Py_tp_dealloc, tracer_dealloc},
    {Py_tp_traverse, tracer_traverse},
    {Py_tp_clear, tracer_clear},
    {Py_tp_methods, tracer_methods},
    {Py_tp_getset, tracer_getset},
    {Py_tp_members, tracer_members},
    {0, NULL},
};

PyType_Spec ft_tracer_spec = {
    .name = "frametrace._tracer.Tracer",
    .basicsize = sizeof(ft_tracer),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = tracer_slots,
};

/* ---- the hook object: one per thread (3.10/3.11) or per tracer (3.12+),
 * and the monitoring backend's callbacks' owner ------------------------ */

static void
hook_dealloc(ft_hookobject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyType_Slot hook_slots[] = {
    {Py_tp_doc, "The argument frametrace's profile function and monitoring "
                "callbacks find their tracer through (internal)."},
    {Py_tp_dealloc, hook_dealloc},
    {0, NULL},
};

PyType_Spec ft_hook_spec = {
    .name = "frametrace._tracer._ThreadHook",
    .basicsize = sizeof(ft_hookobject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = hook_slots,
};
