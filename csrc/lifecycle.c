/* The tracer's lifecycle, in the order one start() runs it:
 *
 * - arm (arm(), or the first half of start() on a new tracer): refuse over
 *   another profiler (find_conflict(), or the monitoring tool id), swap
 *   threading's profile hook for our bootstrap, fault the caller's ring
 *   in, install the hook on every thread (setprofile) or take the tool id
 *   (monitoring), recording off: CPython (3.12+) instruments the code as
 *   it runs from here, not in the first recorded step;
 * - start (begin_recording()): pure C, the flip: start the clock, register
 *   every thread that has the hook (its stack at start);
 * - thread registration: threads alive at start() are registered there,
 *   later ones at their first event (ft_thread_of_caller(), through the
 *   thread-local cache and its generations) or through threading's
 *   bootstrap (thread_bootstrap()); each thread's ring, one page to begin
 *   with (budget.c grows it), comes at its first record
 *   (ft_thread_first_ring());
 * - stop, the latch: stop_ns taken once, the stacks still running taken,
 *   the hook removed from every thread, threading's hook restored;
 * - fork: the child's tracer stops as of the moment before the fork.
 *
 * Also the hook object type, what the profile function and the monitoring
 * callbacks are installed with: this file makes, installs and silences hook
 * objects (the hot paths only read them), so their type is here rather than
 * with the Tracer type in tracer.c.  Not here: the hot paths that record
 * (hook.c, monitor.c), naming C functions (cnames.c), the Tracer type's
 * methods and attributes (tracer.c). */
#include "state.h"
#include "audit_aside.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- OS threads ----------------------------------------------------- */

/* The calling OS thread's ft_os_thread, made at its first ring: the key's
 * value holds one reference, dropped by os_thread_exit() when the thread
 * exits.  (Never on the main thread, which exits with the process; nor,
 * in a forked child, on the threads the fork left behind: their few bytes
 * stay.) */
static pthread_key_t os_thread_key;
static int os_thread_key_made;  /* guarded by the GIL */

static void
os_thread_release(ft_os_thread *os)
{
    /* acq_rel: the last to let go sees every other's writes before it
     * frees. */
    if (os != NULL
        && atomic_fetch_sub_explicit(&os->refs, 1, memory_order_acq_rel) == 1) {
        free(os);
    }
}

/* The key's destructor, as the OS thread exits (no GIL): the threads that
 * recorded on it read alive under the GIL, with acquire. */
static void
os_thread_exit(void *value)
{
    ft_os_thread *os = value;
    atomic_store_explicit(&os->alive, 0, memory_order_release);
    os_thread_release(os);
}

/* A new reference to the calling OS thread's ft_os_thread, or NULL when
 * out of memory (then its ring is taken for ended with its thread state,
 * as before).  Holds the GIL. */
static ft_os_thread *
os_thread_current(void)
{
    if (!os_thread_key_made) {
        if (pthread_key_create(&os_thread_key, os_thread_exit) != 0) {
            return NULL;
        }
        os_thread_key_made = 1;
    }
    ft_os_thread *os = pthread_getspecific(os_thread_key);
    if (os == NULL) {
        os = malloc(sizeof(*os));
        if (os == NULL) {
            return NULL;
        }
        atomic_init(&os->refs, 1);
        atomic_init(&os->alive, 1);
        if (pthread_setspecific(os_thread_key, os) != 0) {
            free(os);
            return NULL;
        }
    }
    atomic_fetch_add_explicit(&os->refs, 1, memory_order_relaxed);
    return os;
}

/* ---- threads: registration, stacks, names --------------------------- */

/* Frees a thread and what it owns (its ring, stacks and name). */
static void
thread_free(ft_thread *thread)
{
    if (thread == NULL) {
        return;
    }
    ft_ring_free(&thread->ring);
    os_thread_release(thread->os_thread);
    Py_CLEAR(thread->name);
    free(thread->base_stack);
    free(thread->stop_stack);
    free(thread);
}

/* Ids of the Python frames from top (borrowed, may be NULL) down,
 * outermost first, into a malloc'd array.  0, or -1 with an exception. */
static int
capture_stack(ft_tracer *tracer, PyFrameObject *top, uint32_t **stack,
                 Py_ssize_t *depth)
{
    Py_ssize_t n = 0, cap = 0;
    uint32_t *ids = NULL;
    PyFrameObject *frame = top;
    Py_XINCREF(frame);
    while (frame != NULL) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            uint32_t *grown = realloc(ids, (size_t)cap * sizeof(uint32_t));
            if (grown == NULL) {
                Py_DECREF(frame);
                free(ids);
                PyErr_NoMemory();
                return -1;
            }
            ids = grown;
        }
        uint32_t id = ft_intern_code(tracer, ft_frame_code(frame), frame);
        if (id == FT_NO_ID) {
            Py_DECREF(frame);
            free(ids);
            PyErr_NoMemory();
            return -1;
        }
        /* Frames the hook ignores have no records to match them. */
        if (!(id & FT_ID_IGNORED)) {
            ids[n++] = id;
        }
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
        if (frame == NULL && PyErr_Occurred()) {
            free(ids);  /* 3.11+ may fail to create the caller's frame */
            return -1;
        }
    }
    /* Collected innermost first; store outermost first. */
    for (Py_ssize_t i = 0; i < n / 2; i++) {
        uint32_t tmp = ids[i];
        ids[i] = ids[n - 1 - i];
        ids[n - 1 - i] = tmp;
    }
    *stack = ids;
    *depth = n;
    return 0;
}

ft_thread *
ft_find_thread(const ft_tracer *tracer, PyThreadState *ts)
{
    uint64_t tstate_id = PyThreadState_GetID(ts);
    /* A thread state newer than every registered one (ids grow): the
     * common miss, a new thread's first event, without a walk over
     * thousands of ended threads. */
    if (tstate_id > tracer->max_tstate_id) {
        return NULL;
    }
    /* Newest first: the later a thread registered, the likelier it is
     * still running. */
    for (Py_ssize_t i = tracer->nthreads - 1; i >= 0; i--) {
        if (tracer->threads[i]->tstate_id == tstate_id) {
            return tracer->threads[i];
        }
    }
    return NULL;
}

ft_thread *
ft_find_thread_of(ft_tracer *tracer, PyThreadState *ts)
{
    ft_thread *th = ft_find_thread(tracer, ts);
    if (th != NULL) {
        return th;
    }
    /* Two OS threads alive at once never share an ident. */
    unsigned long ident = ft_tstate_thread_id(ts);
    for (Py_ssize_t i = tracer->nthreads - 1; i >= 0; i--) {
        th = tracer->threads[i];
        if (th->thread_id == ident && ft_thread_os_alive(th)) {
            th->tstate_id = PyThreadState_GetID(ts);
            if (th->tstate_id > tracer->max_tstate_id) {
                tracer->max_tstate_id = th->tstate_id;
            }
            return th;
        }
    }
    return NULL;
}

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
        || tracer->unhooked != FT_UNHOOKED_NO
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
        tracer->unhooked = FT_UNHOOKED_SEEN;
    }
    Py_XDECREF(frame);
    PyErr_Clear();
    FT_RESTORE_EXC(saved);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}

/* Registers (or finds, by thread state) the thread ts with tracer, capturing
 * its Python stack (from top, borrowed, may be NULL) as the base stack at
 * base_ticks.  Returns the thread (owned by tracer), or NULL with an
 * exception set. */
static ft_thread *
register_thread(ft_tracer *tracer, PyThreadState *ts, PyFrameObject *top,
                   int64_t base_ticks)
{
    ft_thread *thread = ft_find_thread(tracer, ts);
    if (thread != NULL) {
        /* The thread was registered already (threading's bootstrap
         * replaced the hook start() had installed): go on recording into
         * the same buffer. */
        return thread;
    }
    thread = calloc(1, sizeof(ft_thread));
    if (thread == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    thread->capacity = tracer->buffer_size;
    thread->thread_id = ft_tstate_thread_id(ts);
    thread->native_id = ft_tstate_native_id(ts);
    thread->tstate_id = PyThreadState_GetID(ts);
    thread->base_ticks = base_ticks;
    if (capture_stack(tracer, top, &thread->base_stack,
                         &thread->base_depth) < 0) {
        goto error;
    }
    /* Grow and append last, with no call in between that could run Python
     * code and let another thread register meanwhile. */
    if (tracer->nthreads == tracer->threads_cap) {
        Py_ssize_t cap = tracer->threads_cap ? tracer->threads_cap * 2 : 8;
        ft_thread **grown = realloc(tracer->threads,
                                    (size_t)cap * sizeof(ft_thread *));
        if (grown == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        tracer->threads = grown;
        tracer->threads_cap = cap;
    }
    tracer->threads[tracer->nthreads++] = thread;
    if (thread->tstate_id > tracer->max_tstate_id) {
        tracer->max_tstate_id = thread->tstate_id;
    }
    return thread;

error:
    thread_free(thread);
    return NULL;
}

void
ft_free_thread_array(ft_thread **threads, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        thread_free(threads[i]);
    }
    free(threads);
}

void
ft_free_threads(ft_tracer *self)
{
    ft_free_thread_array(self->threads, self->nthreads);
    self->threads = NULL;
    self->nthreads = 0;
    self->threads_cap = 0;
    self->max_tstate_id = 0;
    self->ring_bytes = 0;
    self->rings_since_sweep = 0;
    self->to_pack = 0;
    self->pack_from = 0;
}

/* An interrupt met in the Python code start() and stop() run (threading,
 * thread names, audit hooks): an exception that is no Exception, such as
 * the KeyboardInterrupt a signal handler raises there.  Kept (the first
 * one) and raised once the tracer's state is whole, never reported as
 * unraisable. */
typedef struct {
    int held;
    ft_saved_exc exc;
} ft_interrupt;

/* Whether the exception set is an interrupt, now kept in *kept (or
 * cleared: one is kept).  kept NULL (no caller to raise it to): never. */
static int
keep_interrupt(ft_interrupt *kept)
{
    if (kept == NULL || !PyErr_Occurred()
        || PyErr_ExceptionMatches(PyExc_Exception)) {
        return 0;
    }
    if (kept->held) {
        PyErr_Clear();
    }
    else {
        FT_SAVE_EXC(kept->exc);
        kept->held = 1;
    }
    return 1;
}

/* rc, or -1 with the interrupt kept (preferred to another error). */
static int
raise_kept(ft_interrupt *kept, int rc)
{
    if (!kept->held) {
        return rc;
    }
    PyErr_Clear();
    kept->held = 0;
    FT_RESTORE_EXC(kept->exc);
    return -1;
}

/* Adds thread's {ident: name} to names, when it has both.  Leaves no
 * exception (an interrupt goes to kept). */
static void
add_thread_name(PyObject *names, PyObject *thread, ft_interrupt *kept)
{
    PyObject *ident = PyObject_GetAttrString(thread, "ident");
    PyObject *name = ident && PyLong_Check(ident)
        ? PyObject_GetAttrString(thread, "name") : NULL;
    if (name != NULL && PyUnicode_Check(name)) {
        PyDict_SetItem(names, ident, name);
    }
    Py_XDECREF(name);
    Py_XDECREF(ident);
    if (!keep_interrupt(kept)) {
        PyErr_Clear();
    }
}

/* {ident: name} of the threads threading knows, or of the calling thread
 * only (caller_only: a thread that starts pays for itself, not for every
 * thread alive; threading has put it in its table before its profile
 * function runs).  New reference; NULL when even that failed.  Runs Python
 * code (the name properties); never raises: names are best effort, and an
 * interrupt goes to kept. */
static PyObject *
names_of_threads(int caller_only, ft_interrupt *kept)
{
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    PyObject *names = PyDict_New();
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *found = NULL;
    if (threading != NULL && caller_only) {
        found = PyObject_CallMethod(threading, "current_thread", NULL);
    }
    else if (threading != NULL) {
        /* threading._active, {ident: Thread} of the threads started (dummy
         * ones for foreign threads included), copied in C: not through
         * enumerate(), which holds threading's _active_limbo_lock, and
         * leaves it held where an interrupt lands just after the lock's
         * __enter__ (CPython 3.14's `with`). */
        PyObject *active = PyObject_GetAttrString(threading, "_active");
        found = active != NULL && PyDict_Check(active)
            ? PyDict_Values(active) : NULL;
        Py_XDECREF(active);
    }
    if (names != NULL && found != NULL) {
        if (caller_only) {
            add_thread_name(names, found, kept);
        }
        else {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(found); i++) {
                add_thread_name(names, PyList_GET_ITEM(found, i), kept);
            }
        }
    }
    Py_XDECREF(found);
    Py_XDECREF(threading);
    if (!keep_interrupt(kept)) {
        PyErr_Clear();
    }
    FT_RESTORE_EXC(saved);
    return names;
}

static PyObject *
thread_names(ft_interrupt *kept)
{
    return names_of_threads(0, kept);
}

static PyObject *
caller_thread_names(void)
{
    return names_of_threads(1, NULL);
}

/* Whether a thread state with this id (unique in the process) is alive. */
static int
tstate_id_alive(uint64_t id)
{
    PyThreadState *p = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; p != NULL; p = PyThreadState_Next(p)) {
        if (PyThreadState_GetID(p) == id) {
            return 1;
        }
    }
    return 0;
}

/* Gives thread its name from such a dict.  Runs no Python code. */
static void
name_thread(ft_thread *thread, PyObject *names)
{
    if (names == NULL) {
        return;
    }
    PyObject *ident = PyLong_FromUnsignedLong(thread->thread_id);
    PyObject *name = ident ? PyDict_GetItemWithError(names, ident) : NULL;
    if (name != NULL) {
        Py_XSETREF(thread->name, Py_NewRef(name));
    }
    Py_XDECREF(ident);
    PyErr_Clear();
}

/* ---- a thread's ring ------------------------------------------------ */

/* ft_ring_alloc(), holding the GIL: a new ring commits one page
 * (microseconds), less than releasing the GIL and taking it back could
 * cost while other threads run.  Callers still check their state after. */
static int
alloc_ring(ft_ring *ring, uint64_t capacity, int64_t origin)
{
    return ft_ring_alloc(ring, capacity, origin);
}

/* Gives th, the calling thread's, its ring, counted in the tracer's memory,
 * and its ids from the thread itself.  Runs no Python code. */
static void
adopt_ring(ft_tracer *tracer, ft_thread *th, const ft_ring *ring)
{
    /* A ring the memory bound discarded stays counted (the thread went on
     * recording, later, in a new one).  So does a packed one, discarded
     * here: a thread taken for ended that records again (C code entering
     * it through PyGILState_Ensure(): see budget.c) cannot append to it. */
    if (th->ring.packed != NULL) {
        tracer->ring_bytes -= ft_ring_bytes(&th->ring);
        ft_ring_discard(&th->ring);
    }
    uint64_t discarded = th->ring.discarded;
    th->ring = *ring;
    th->ring.discarded += discarded;
    th->ended = 0;
    /* Its OS thread, before any sweep looks (a new ring may start one):
     * while it runs, the ring is not taken for ended. */
    if (th->os_thread == NULL) {
        th->os_thread = os_thread_current();
    }
    th->tstate_id = PyThreadState_GetID(PyThreadState_Get());
    if (th->tstate_id > tracer->max_tstate_id) {
        tracer->max_tstate_id = th->tstate_id;
    }
    ft_budget_adopted(tracer, th);
    /* A thread state registered before its OS thread bound it had no ids
     * yet (3.12+: 0), or its creator's (3.10/3.11). */
    th->thread_id = PyThread_get_thread_ident();
    th->native_id = PyThread_get_thread_native_id();
}

int
ft_thread_first_ring(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
                     int64_t *ts)
{
    /* A thread's first record: allocate its ring now, so idle threads cost
     * nothing.  The checks after are for a stop meanwhile (none can happen
     * while the GIL is held, but they cost nothing). */
    ft_ring ring;
    PyObject *holder = hook != NULL ? (PyObject *)hook : (PyObject *)tracer;
    Py_INCREF(holder);
    int rc = alloc_ring(&ring, th->capacity, *ts);
    tracer->state->count_rings++;
    int stopped = hook != NULL ? hook->thread == NULL
                               : tracer->phase != FT_PHASE_ACTIVE;
    if (stopped) {
        if (rc == 0) {
            ft_ring_free(&ring);
        }
    }
    else if (rc < 0) {
        th->lost++;
    }
    else {
        adopt_ring(tracer, th, &ring);
    }
    /* All references but ours may have gone meanwhile: then releasing it
     * frees the tracer (the monitoring backend's holder) or stops it. */
    int last = Py_REFCNT(holder) == 1;
    Py_DECREF(holder);
    if (stopped || rc < 0 || last) {
        return -1;
    }
    /* Leave the allocation out of the event. */
    *ts = ft_clock_ticks(&tracer->clock);
    return 0;
}

/* ---- the caller's thread, through thread-local storage -------------- */

FT_TLS ft_thread_cache ft_tls_cache;
/* Guarded by the GIL. */
static uint64_t last_generation;

/* A new generation, for a tracer that starts. */
static uint64_t
next_generation(void)
{
    return ++last_generation;
}

ft_thread *
ft_thread_of_caller(ft_tracer *tracer, int starting)
{
    PyThreadState *ts = PyThreadState_Get();
    ft_thread *th = ft_find_thread(tracer, ts);
    if (th == NULL) {
        /* Threads alive at start() were registered then; later ones
         * register here. */
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        int64_t base = ft_clock_ticks(&tracer->clock);
        PyFrameObject *top = PyThreadState_GetFrame(ts);
        if (starting && top != NULL) {
            /* A call event's frame is the callee: its call is this event. */
            Py_SETREF(top, PyFrame_GetBack(top));
        }
        Py_INCREF(tracer);
        th = register_thread(tracer, ts, top, base);
        Py_XDECREF(top);
        PyErr_Clear();  /* never raise from a hook */
        FT_RESTORE_EXC(saved);
        if (th != NULL && tracer->phase == FT_PHASE_ACTIVE) {
            PyObject *names = thread_names(NULL);  /* Python code */
            if (tracer->phase == FT_PHASE_ACTIVE) {
                name_thread(th, names);
            }
            Py_XDECREF(names);
        }
        /* Ours may be the last reference now: releasing it frees the
         * tracer, and th with it. */
        int gone = th == NULL || tracer->phase != FT_PHASE_ACTIVE
                   || Py_REFCNT(tracer) == 1;
        Py_DECREF(tracer);
        if (gone) {
            return NULL;
        }
    }
    ft_cache_thread(tracer, th);
    return th;
}

/* ---- hook objects --------------------------------------------------- */

static void
hook_dealloc(ft_hookobject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyType_Slot hook_slots[] = {
    {Py_tp_doc, "The argument frametrace's profile function and monitoring "
                "callbacks find their tracer through (internal).  Called "
                "as a profile function when sys.setprofile() puts it back "
                "(displaced.c)."},
    {Py_tp_dealloc, hook_dealloc},
    {Py_tp_call, ft_hook_call},
    {0, NULL},
};

PyType_Spec ft_hook_spec = {
    .name = "frametrace._tracer._ThreadHook",
    .basicsize = sizeof(ft_hookobject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = hook_slots,
};

/* A new hook object for thread th (a new reference; tracer->hooks holds
 * another), or NULL with an exception set. */
#if !FT_SHARED_HOOK
static ft_hookobject *
new_thread_hook(ft_tracer *tracer, ft_thread *thread)
{
    ft_hookobject *hook = PyObject_New(ft_hookobject,
                                       tracer->state->hook_type);
    if (hook == NULL) {
        return NULL;
    }
    hook->tracer = tracer;
    hook->thread = thread;
    hook->generation = tracer->generation;
    if (PyList_Append(tracer->hooks, (PyObject *)hook) < 0) {
        hook->tracer = NULL;
        hook->thread = NULL;
        Py_DECREF(hook);
        return NULL;
    }
    return hook;
}
#endif

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
#endif

/* ---- installing and removing the hook ------------------------------- */

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
            "sys.setprofile(), torch.profiler with with_stack=True, or "
            "another PyEval_SetProfile() hook); stop it before starting "
            "frametrace", thread_id, other);
        Py_DECREF(other);
        return msg;
    }
#if FT_HAVE_MONITORING
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

/* threading.getprofile() (arg NULL) or threading.setprofile(arg): Python
 * functions of one assignment at most, holding no lock, so an interrupt
 * raised into one (before or after its assignment) is kept and the call
 * made again.  New reference, or NULL with an exception. */
static PyObject *
call_threading_profile(PyObject *threading, PyObject *arg,
                       ft_interrupt *kept)
{
    for (int tries = 0;; tries++) {
        PyObject *res = arg == NULL
            ? PyObject_CallMethod(threading, "getprofile", NULL)
            : PyObject_CallMethod(threading, "setprofile", "O", arg);
        if (res != NULL || tries == 16 || !keep_interrupt(kept)) {
            return res;
        }
    }
}

/* Sets threading's profile hook (for threads started from now on) to hook,
 * returning the previous one (new reference) or NULL on error. */
static PyObject *
swap_threading_profile(PyObject *hook, ft_interrupt *kept)
{
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL) {
        return NULL;
    }
    PyObject *prev = call_threading_profile(threading, NULL, kept);
    if (prev != NULL) {
        PyObject *res = call_threading_profile(threading, hook, kept);
        if (res == NULL) {
            Py_CLEAR(prev);
        }
        Py_XDECREF(res);
    }
    Py_DECREF(threading);
    return prev;
}

static void
restore_threading_profile(ft_tracer *self, ft_interrupt *kept)
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
        ? call_threading_profile(threading, NULL, kept) : NULL;
    /* Someone may have set their own hook meanwhile: leave it. */
    if (current == self->state->thread_bootstrap) {
        PyObject *res = call_threading_profile(threading, prev, kept);
        Py_XDECREF(res);
    }
    if (PyErr_Occurred() && !keep_interrupt(kept)) {
        PyErr_WriteUnraisable(NULL);
    }
    Py_XDECREF(current);
    Py_XDECREF(threading);
    Py_DECREF(prev);
}

#if !FT_SHARED_HOOK || FT_NEED_CHECKED_WALK
/* Where the threads are set one by one: CPython before 3.14.1 (3.12+:
 * where PyEval_SetProfileAllThreads() is unsafe), and the per-thread hooks
 * of 3.10/3.11. */
#  define FT_SET_ONE_BY_ONE 1
#else
#  define FT_SET_ONE_BY_ONE 0
#endif

#if FT_SET_ONE_BY_ONE
/* A thread state seen in a walk of the thread list.  Setting a profile
 * function runs audit hooks, which are Python code that may let a thread
 * exit: such entries are checked again before each use. */
typedef struct {
    PyThreadState *ts;
    uint64_t id;
    ft_hookobject *hook;  /* borrowed: held by self->hooks (3.10/3.11) */
} thread_entry;

/* The thread states of one walk, collected in pure C before any is set. */
typedef struct {
    thread_entry *items;  /* malloc'd; the caller frees it */
    size_t n;
    size_t cap;
} thread_list;

/* Appends ts (hook NULL), doubling the array when full.  The new entry, or
 * NULL when out of memory, with no exception set: a removal must not
 * raise. */
static thread_entry *
thread_list_append(thread_list *list, PyThreadState *ts)
{
    if (list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 16;
        thread_entry *grown = realloc(list->items, cap * sizeof(thread_entry));
        if (grown == NULL) {
            return NULL;
        }
        list->items = grown;
        list->cap = cap;
    }
    thread_entry *entry = &list->items[list->n++];
    entry->ts = ts;
    entry->id = PyThreadState_GetID(ts);
    entry->hook = NULL;
    return entry;
}
#endif

/* Setting the profile function of every thread, as one audited act
 * (audit_aside.c): "sys.setprofile" is audited once, here, where Python code
 * may run; then, from set_aside() to put_back(), the threads are set with
 * the Python audit hooks off the interpreter, so that nothing runs between
 * one thread being set and the next, nor between their stacks being taken
 * and their hooks going on. */
typedef struct {
    PyObject *hooks;  /* what was set aside (NULL: none) */
    int taken;        /* whether they were (1), or could not be (0) */
} audit_hooks_aside;

/* 0, or -1 with the exception of an audit hook that refused. */
static int
audit_setprofile_once(void)
{
    return PySys_Audit("sys.setprofile", NULL);
}

/* Pure C, like everything until put_back(). */
static void
set_aside(audit_hooks_aside *aside)
{
    aside->hooks = NULL;
    aside->taken = ft_audit_hooks_set_aside(&aside->hooks) == 0;
}

static void
put_back(audit_hooks_aside *aside)
{
    if (aside->taken) {
        ft_audit_hooks_put_back(aside->hooks);
        aside->taken = 0;
        aside->hooks = NULL;
    }
}


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

#if FT_RESUME_WAITS_BEFORE_EVENT
/* Whether frame, the innermost of another thread, was pushed and has not
 * started: 3.13+ checks the eval breaker in RESUME before PY_START (and
 * PY_RESUME after a yield; 3.12 after them), so a thread can wait for the
 * GIL there, its frame on its stack and no call recorded.  Its RESUME is
 * then where the frame is. */
static int
frame_not_started(PyFrameObject *frame)
{
    int lasti = PyFrame_GetLasti(frame);
    if (lasti < 0) {
        return 1;  /* not even at its first instruction */
    }
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *bytes = PyCode_GetCode(code);  /* cached by the code object */
    Py_DECREF(code);
    if (bytes == NULL) {
        PyErr_Clear();
        return 0;
    }
    int pending = 0;
    if (PyBytes_Check(bytes) && lasti + 1 < PyBytes_GET_SIZE(bytes)) {
        const unsigned char *at = (const unsigned char *)PyBytes_AS_STRING(bytes) + lasti;
        /* oparg 0: the function's start; 1: after a yield.  (After
         * `yield from` or `await` RESUME does not wait.) */
        pending = at[0] == RESUME && (at[1] & 3) <= 1;
    }
    Py_DECREF(bytes);
    return pending;
}
#endif

/* Takes the stack of thread th (running as ts) at stop. */
static void
take_stop_stack(ft_tracer *self, ft_thread *th, PyThreadState *ts)
{
    if (th == NULL || th->stop_stack != NULL) {
        return;
    }
    PyFrameObject *top = PyThreadState_GetFrame(ts);
#if FT_RESUME_WAITS_BEFORE_EVENT
    if (top != NULL && ts != PyThreadState_Get() && frame_not_started(top)) {
        PyFrameObject *back = PyFrame_GetBack(top);
        Py_DECREF(top);
        top = back;
        PyErr_Clear();  /* the caller's frame could not be made: none */
    }
#endif
    if (capture_stack(self, top, &th->stop_stack, &th->stop_depth) < 0) {
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
 * hooks may let threads exit when they could not be set aside.  With func
 * NULL, only threads where this tracer's hook still is.  0, or -1 with an
 * exception (installing only: a refused removal leaves the hook, silenced,
 * and is reported). */
static int
set_profile_checked(ft_tracer *self, Py_tracefunc func, PyObject *arg)
{
    int gc_was_enabled = PyGC_Disable();
    thread_list todo = {NULL, 0, 0};
    int rc = 0;
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (func == NULL && !is_ours(self, ts)) {
            continue;
        }
        if (thread_list_append(&todo, ts) == NULL) {
            PyErr_NoMemory();
            rc = -1;
            break;
        }
    }
    for (size_t i = 0; rc == 0 && i < todo.n; i++) {
        thread_entry *entry = &todo.items[i];
        if (func != NULL && self->phase != FT_PHASE_ARMED) {
            break;  /* an audit hook disarmed the tracer */
        }
        if (!tstate_id_alive(entry->id)
            || (func == NULL && !is_ours(self, entry->ts))) {
            continue;
        }
        if (_PyEval_SetProfile(entry->ts, func, arg) < 0) {
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
    free(todo.items);
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
     * audit hook may disarm it). */
    if (self->phase == FT_PHASE_ARMED
        && !is_ours(self, PyThreadState_Get())) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the profile function could not be installed: an "
                        "audit hook refused sys.setprofile (see the "
                        "exception reported above)");
        return -1;
    }
    return 0;
}

/* Removes this tracer's hook from every thread, taking each hooked thread's
 * stack first if take_stacks.
 *
 * The stacks are taken and the hook silenced at once, in pure C; then
 * "sys.setprofile" is audited (Python code: threads run meanwhile, but
 * record nothing), and the hook removed as one act (audit_hooks_aside).
 *
 * No public call removes the profile function of some threads only:
 * PyEval_SetProfile() acts on the caller, PyEval_SetProfileAllThreads() on
 * all.  Where frametrace walks the threads itself (before 3.14.1), it
 * removes its hook wherever it is.  Elsewhere, when another tool has
 * installed its own on some thread meanwhile, that one is left alone: the
 * caller's thread drops ours now, and every other thread drops ours itself
 * at its next event (hook_off() in hook.c), silenced until then.  Those
 * threads then pay for a profile function a while longer, but only while
 * another tool's keeps CPython's profiling layer on anyway.  So do all
 * threads when an audit hook refuses the removal. */
static void
uninstall_hooks(ft_tracer *self, int take_stacks, ft_interrupt *kept)
{
    ft_hookobject *hook = (ft_hookobject *)self->hook;
    if (hook == NULL) {
        return;  /* not installed, or removed already */
    }
    /* Pure C first, GC off so that allocations run no finalizer. */
    int gc_was_enabled = PyGC_Disable();
    PyInterpreterState *interp = PyInterpreterState_Get();
    int installed = 0;
    PyThreadState *ts = PyInterpreterState_ThreadHead(interp);
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (is_ours(self, ts)) {
            installed = 1;
            if (take_stacks && ft_tstate_profile_func(ts) == ft_hook) {
                take_stop_stack(self, ft_find_thread_of(self, ts), ts);
            }
        }
    }
    /* Silenced first: events from here on record nothing. */
    hook->tracer = NULL;
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (!installed) {
        Py_CLEAR(self->hook);  /* nothing to remove, nothing to audit */
        return;
    }
    if (audit_setprofile_once() < 0) {
        if (!keep_interrupt(kept)) {
            PyErr_WriteUnraisable(NULL);  /* never raise from a removal */
        }
        Py_CLEAR(self->hook);
        return;
    }
    gc_was_enabled = PyGC_Disable();
    audit_hooks_aside aside;
    set_aside(&aside);
    int any_ours = 0, all_ours = 1;
    for (ts = PyInterpreterState_ThreadHead(interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        Py_tracefunc func = ft_tstate_profile_func(ts);
        if (is_ours(self, ts)) {
            any_ours = 1;
        }
        else if (func != NULL && !is_inert(func, ft_tstate_profile_obj(ts))) {
            all_ours = 0;
        }
    }
#if FT_NEED_CHECKED_WALK
    /* The walk by hand sets only the threads that have our hook; without
     * the audit hooks set aside, they may let that very thread exit first
     * (CPython gh-137400): then each thread removes it itself. */
    if (!FT_ALL_THREADS_CALL_SAFE()) {
        all_ours = aside.taken;
    }
#endif
    if (any_ours) {
        if (all_ours) {
            (void)set_profile_all(self, NULL, NULL);
        }
        else if (is_ours(self, PyThreadState_Get())) {
            PyEval_SetProfile(NULL, NULL);
        }
    }
    put_back(&aside);
    Py_CLEAR(self->hook);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}
#else
/* Removes this tracer's hook from every thread, taking each hooked thread's
 * stack first if take_stacks: the stacks are taken and the hooks silenced
 * at once, in pure C, then "sys.setprofile" is audited and the hooks
 * removed as one act (audit_hooks_aside). */
static void
uninstall_hooks(ft_tracer *self, int take_stacks, ft_interrupt *kept)
{
    /* Pure C first, GC off so that allocations run no finalizer. */
    int gc_was_enabled = PyGC_Disable();
    PyInterpreterState *interp = PyInterpreterState_Get();
    int installed = 0;
    PyThreadState *ts = PyInterpreterState_ThreadHead(interp);
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (!is_ours(self, ts)) {
            continue;
        }
        installed = 1;
        if (take_stacks && ft_tstate_profile_func(ts) == ft_hook) {
            ft_hookobject *hook = (ft_hookobject *)ft_tstate_profile_obj(ts);
            take_stop_stack(self, hook->thread, ts);
        }
    }
    if (self->hooks != NULL) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->hooks); i++) {
            ((ft_hookobject *)PyList_GET_ITEM(self->hooks, i))->thread = NULL;
        }
    }
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    /* Nothing to remove: nothing to audit. */
    int refused = !installed || audit_setprofile_once() < 0;
    if (refused && installed && !keep_interrupt(kept)) {
        /* The hooks stay, inert. */
        PyErr_WriteUnraisable(NULL);
    }
    gc_was_enabled = PyGC_Disable();
    audit_hooks_aside aside;
    thread_list todo = {NULL, 0, 0};
    if (!refused) {
        set_aside(&aside);
        for (ts = PyInterpreterState_ThreadHead(interp); ts != NULL;
             ts = PyThreadState_Next(ts)) {
            if (is_ours(self, ts) && thread_list_append(&todo, ts) == NULL) {
                break;  /* the rest stay installed, silenced below */
            }
        }
    }
    /* Checked again before each call: where the audit hooks could not be
     * set aside, they run for each and may let threads exit. */
    for (size_t i = 0; i < todo.n; i++) {
        thread_entry *entry = &todo.items[i];
        if (tstate_id_alive(entry->id) && is_ours(self, entry->ts)
            && _PyEval_SetProfile(entry->ts, NULL, NULL) < 0) {
            /* A C audit hook refused: the hook stays, inert. */
            PyErr_WriteUnraisable(NULL);
        }
    }
    free(todo.items);
    if (!refused) {
        put_back(&aside);
    }
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
        ft_thread *th = ft_find_thread_of(self, ts);
        if (th != NULL) {
            take_stop_stack(self, th, ts);
        }
    }
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}
#endif

/* ---- start ---------------------------------------------------------- */

static int arm_claimed(ft_tracer *self, ft_interrupt *kept);
static int begin_recording(ft_tracer *self);
static void disarm_claimed(ft_tracer *self, ft_interrupt *kept);
static void latch_stop_at(ft_tracer *self, const ft_anchor *at,
                          int in_child, ft_interrupt *kept);

/* Why arm() (arming) or start() cannot run now: -1 with a RuntimeError (a
 * ConflictError where another tracer holds the hook), or 0. */
static int
refuse_start(ft_tracer *self, int arming)
{
    ft_state *state = self->state;
    const char *what = arming ? "arm()" : "start()";
    switch (self->phase) {
    case FT_PHASE_ARMED:
        if (arming) {
            PyErr_SetString(PyExc_RuntimeError,
                            "arm() called twice: this Tracer is already armed");
            return -1;
        }
        break;
    case FT_PHASE_ACTIVE:
        PyErr_Format(PyExc_RuntimeError,
                     "%s called twice: this Tracer is already active", what);
        return -1;
    case FT_PHASE_STOPPED:
    case FT_PHASE_CLEARED:
        PyErr_SetString(PyExc_RuntimeError,
                        "this Tracer has already run and stopped; a Tracer "
                        "records once: create a new one");
        return -1;
    }
    if (state->active != NULL && state->active != self) {
        PyErr_SetString(state->conflict_error,
                        state->active->phase == FT_PHASE_ARMED
                        ? "another frametrace Tracer is armed in this "
                          "interpreter; disarm or stop it first"
                        : "another frametrace Tracer is already active in this "
                          "interpreter; stop it first");
        return -1;
    }
    /* start() and arm() run Python code before the tracer is armed
     * (conflict checks, thread names, threading's hook, audit hooks), which
     * may let another thread, or that code itself, start a tracer: one at
     * a time. */
    if (state->starting != NULL) {
        if (state->starting == self) {
            PyErr_Format(PyExc_RuntimeError, "%s called twice: this Tracer "
                         "is already starting", what);
        }
        else {
            PyErr_SetString(state->conflict_error,
                            "another frametrace Tracer is starting in this "
                            "interpreter; stop it first");
        }
        return -1;
    }
    if (state->stopping != NULL) {
        PyErr_Format(state->conflict_error,
                     "%s called while another frametrace Tracer is "
                     "stopping (from code its stop() runs, such as an "
                     "audit hook, or from another thread meanwhile); "
                     "start once its stop() has returned", what);
        return -1;
    }
    return 0;
}

/* start() (arming: arm()) once refuse_start() has let it through. */
static int
start_or_arm(ft_tracer *self, int arming)
{
    ft_state *state = self->state;
    /* Held to the end: the code arming runs may drop every other
     * reference. */
    Py_INCREF(self);
    state->starting = self;
    state->starting_thread = PyThread_get_thread_ident();
    self->in_call = FT_IN_START;
    int was_new = self->phase == FT_PHASE_NEW;
    ft_interrupt kept = {0};
    int rc = was_new ? arm_claimed(self, &kept) : 0;
    if (rc == 0 && kept.held && self->phase == FT_PHASE_ARMED) {
        /* Interrupted while arming (which did finish): new again, and the
         * interrupt raised below, as if it had come before the call. */
        disarm_claimed(self, &kept);
    }
    else if (rc == 0 && !arming) {
        /* An audit hook may have disarmed it meanwhile. */
        rc = self->phase == FT_PHASE_ARMED ? begin_recording(self) : 0;
        if (rc < 0 && was_new) {
            ft_saved_exc saved;
            FT_SAVE_EXC(saved);
            disarm_claimed(self, &kept);
            FT_RESTORE_EXC(saved);
        }
    }
    self->in_call = FT_IN_NONE;
    if (state->starting == self) {
        state->starting = NULL;
    }
    if (self->stop_pending) {
        /* This process is a child forked by code start() ran: it stops as
         * of the fork (an armed tracer disarms), now that start() is done
         * with the hooks. */
        self->stop_pending = 0;
        latch_stop_at(self, self->fork_anchored ? &self->fork_anchor : NULL,
                      1, &kept);
        self->fork_anchored = 0;
    }
    Py_DECREF(self);
    return raise_kept(&kept, rc);
}

int
ft_tracer_start(ft_tracer *self)
{
    if (refuse_start(self, 0) < 0) {
        return -1;
    }
    return start_or_arm(self, 0);
}

int
ft_tracer_arm(ft_tracer *self)
{
    if (refuse_start(self, 1) < 0) {
        return -1;
    }
    return start_or_arm(self, 1);
}

/* arm() once this tracer is the only one starting: everything that runs
 * Python code or takes a while, so that start() then runs neither. */
static int
arm_claimed(ft_tracer *self, ft_interrupt *kept)
{
    ft_state *state = self->state;
#if FT_HAVE_MONITORING
    int monitoring = self->backend == FT_BACKEND_MONITORING;
    PyObject *conflict = monitoring ? ft_monitor_conflict() : find_conflict(self);
#else
    int monitoring = 0;
    PyObject *conflict = find_conflict(self);
#endif
    if (ft_refuse_conflict(state->conflict_error, conflict) < 0) {
        return -1;
    }
    /* Installing the hook on every thread is audited once, here (an audit
     * hook may refuse), and done below with the audit hooks set aside. */
    if (!monitoring && audit_setprofile_once() < 0) {
        return -1;
    }
    /* The caller's ring (one page: budget.c grows it); its origin is set
     * when recording starts. */
    if (ft_ring_alloc(&self->armed_ring, self->buffer_size, 0) < 0) {
        memset(&self->armed_ring, 0, sizeof(self->armed_ring));
        PyErr_Format(PyExc_MemoryError, "cannot allocate a ring of %llu "
                     "events (buffer_size)",
                     (unsigned long long)self->buffer_size);
        return -1;
    }
    state->count_rings++;
    PyObject *names = thread_names(kept);
    self->generation = next_generation();
#if FT_SHARED_HOOK
    if (!monitoring) {
        self->hook = new_shared_hook(self);
    }
    int made = monitoring || self->hook != NULL;
#else
    self->hooks = PyList_New(0);
    int made = self->hooks != NULL;
#endif
    /* Threads started from now on install the hook themselves (with the
     * monitoring backend, which sees every thread, they only get named). */
    if (made) {
        self->prev_thread_hook = swap_threading_profile(
            state->thread_bootstrap, kept);
    }
    /* The monitoring tool id is taken before any thread is registered: its
     * audit hooks run Python code, and its callbacks record nothing until
     * the tracer is active. */
    int failed = !made || self->prev_thread_hook == NULL;
#if FT_HAVE_MONITORING
    if (!failed && monitoring) {
        failed = ft_monitor_start(self) < 0;
        if (!failed) {
            state->count_tool_takes++;
        }
    }
#endif
    if (failed) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        /* Both run Python code: the exception is kept meanwhile. */
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
#if FT_HAVE_MONITORING
        ft_monitor_stop(self);
#endif
        restore_threading_profile(self, kept);
        FT_RESTORE_EXC(saved);
        Py_CLEAR(self->hooks);
        Py_CLEAR(self->hook);
        Py_XDECREF(names);
        ft_ring_free(&self->armed_ring);
        memset(&self->armed_ring, 0, sizeof(self->armed_ring));
        return -1;
    }
    self->armed_names = names;
    state->active = self;
    self->phase = FT_PHASE_ARMED;
    if (monitoring) {
        return 0;  /* armed with the tool id's events */
    }

    /* The hook on every thread in pure C, with the GC off so that
     * allocations run no finalizer and the audit hooks set aside. */
    int gc_was_enabled = PyGC_Disable();
    audit_hooks_aside aside = {NULL, 0};
    set_aside(&aside);
    int rc = 0;
#if FT_SHARED_HOOK
    rc = install_shared_hook(self);
#else
    /* One hook object per thread, with no ft_thread until start(). */
    thread_list entries = {NULL, 0, 0};
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; rc == 0 && ts != NULL; ts = PyThreadState_Next(ts)) {
        thread_entry *entry = thread_list_append(&entries, ts);
        if (entry == NULL) {
            PyErr_NoMemory();
            rc = -1;
            break;
        }
        entry->hook = new_thread_hook(self, NULL);
        if (entry->hook == NULL) {
            rc = -1;
            break;
        }
        Py_DECREF(entry->hook);  /* self->hooks holds it */
    }
    /* Where the audit hooks could not be set aside, installing runs them
     * (Python code): check each thread state is still alive first.  They
     * may stop the tracer, which drops its list of hooks: held meanwhile. */
    PyObject *hooks = Py_XNewRef(self->hooks);
    for (size_t i = 0; rc == 0 && i < entries.n
                       && self->phase == FT_PHASE_ARMED; i++) {
        thread_entry *entry = &entries.items[i];
        if (tstate_id_alive(entry->id)) {
            rc = _PyEval_SetProfile(entry->ts, ft_hook,
                                    (PyObject *)entry->hook);
        }
    }
    Py_XDECREF(hooks);
    free(entries.items);
#endif
    put_back(&aside);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (rc == 0) {
        state->count_hook_installs++;
    }
    else {
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        disarm_claimed(self, kept);
        FT_RESTORE_EXC(saved);
        return -1;
    }
    return 0;
}

/* Registers thread ts (its stack) with an armed tracer; the caller's thread
 * gets the armed ring.  Runs no Python code.  Returns the thread, or NULL
 * with an exception. */
static ft_thread *
register_existing(ft_tracer *self, PyThreadState *ts)
{
    PyFrameObject *top = PyThreadState_GetFrame(ts);
    ft_thread *th = register_thread(self, ts, top, 0);
    Py_XDECREF(top);
    if (th == NULL) {
        return NULL;
    }
    if (ts == PyThreadState_Get() && self->armed_ring.buf != NULL) {
        adopt_ring(self, th, &self->armed_ring);
        th->ring.last = self->clock.anchors[0].ticks;  /* start() */
        memset(&self->armed_ring, 0, sizeof(self->armed_ring));
    }
    name_thread(th, self->armed_names);
    return th;
}

/* start() of an armed tracer: recording goes on.  Pure C, GC off: nothing
 * else runs meanwhile, so each thread's stack is the one its first record
 * follows.  Only the threads with this tracer's hook (or threading's
 * bootstrap, still to run) are registered: with the monitoring backend,
 * all.  0, or -1 with an exception, still armed. */
static int
begin_recording(ft_tracer *self)
{
    int monitoring = self->backend == FT_BACKEND_MONITORING;
    if (ft_clock_start(&self->clock, self->clock.use_cycles) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    ft_anchor start = self->clock.anchors[0];
    self->start_ns = start.ns;
    self->phase = FT_PHASE_ACTIVE;
    int gc_was_enabled = PyGC_Disable();
    PyThreadState *current = PyThreadState_Get();
    int rc = 0;
    /* The caller first: its events come first in getEvents(). */
    PyThreadState *ts = current;
    PyThreadState *next = PyInterpreterState_ThreadHead(
        PyThreadState_GetInterpreter(current));
    while (ts != NULL) {
        if (monitoring || is_ours(self, ts)) {
            ft_thread *th = register_existing(self, ts);
            if (th == NULL) {
                rc = -1;
                break;
            }
            th->base_ticks = start.ticks;
#if !FT_SHARED_HOOK
            if (ft_tstate_profile_func(ts) == ft_hook) {
                ((ft_hookobject *)ft_tstate_profile_obj(ts))->thread = th;
            }
#endif
        }
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
    if (rc < 0) {
        /* Back to armed: nothing recorded yet. */
        self->phase = FT_PHASE_ARMED;
        for (Py_ssize_t i = 0; self->hooks && i < PyList_GET_SIZE(self->hooks);
             i++) {
            ((ft_hookobject *)PyList_GET_ITEM(self->hooks, i))->thread = NULL;
        }
        ft_free_threads(self);
        self->start_ns = 0;
    }
    else {
        /* Holds only ints and strs: no finalizer runs. */
        Py_CLEAR(self->armed_names);
        ft_ring_free(&self->armed_ring);  /* if it was not handed over */
        memset(&self->armed_ring, 0, sizeof(self->armed_ring));
    }
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    return rc;
}

/* An armed tracer (or one arm() is undoing) is new again: its hook
 * removed, or the tool id freed, threading's hook restored.  Runs Python
 * code (audit hooks, threading); marked new first, so that nothing
 * records and no stop() acts meanwhile. */
static void
disarm_claimed(ft_tracer *self, ft_interrupt *kept)
{
    ft_state *state = self->state;
    self->phase = FT_PHASE_NEW;
    if (state->active == self) {
        state->active = NULL;
    }
#if FT_HAVE_MONITORING
    ft_monitor_stop(self);
#endif
    uninstall_hooks(self, 0, kept);
    restore_threading_profile(self, kept);
    Py_CLEAR(self->hooks);
    Py_CLEAR(self->hook);
    Py_CLEAR(self->armed_names);
    ft_ring_free(&self->armed_ring);
    memset(&self->armed_ring, 0, sizeof(self->armed_ring));
}

/* disarm_claimed(), marked as stopping like the latched stop. */
static void
disarm_marked(ft_tracer *self, ft_interrupt *kept)
{
    ft_state *state = self->state;
    Py_INCREF(self);
    int was = self->in_call;
    self->in_call = FT_IN_STOP;
    state->stopping = self;
    state->stopping_thread = PyThread_get_thread_ident();
    disarm_claimed(self, kept);
    if (state->stopping == self) {
        state->stopping = NULL;
    }
    self->in_call = was;
    Py_DECREF(self);
}

int
ft_tracer_disarm(ft_tracer *self)
{
    if (self->in_call != FT_IN_NONE) {
        PyErr_Format(PyExc_RuntimeError, "disarm() called while %s is "
                     "running: call it once that has returned",
                     self->in_call == FT_IN_START ? "start() or arm()"
                                                  : "stop()");
        return -1;
    }
    if (self->phase == FT_PHASE_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError,
                        "disarm() called while the tracer records: stop() "
                        "ends recording");
        return -1;
    }
    ft_interrupt kept = {0};
    if (self->phase == FT_PHASE_ARMED) {
        disarm_marked(self, &kept);
    }
    return raise_kept(&kept, 0);
}

/* ---- snapshot: the records so far, while recording goes on ---------- */

/* A mark (bytes): a header, then where each thread's ring was. */
typedef struct {
    uint64_t generation;  /* the tracer's: a mark of another is refused */
    int64_t ticks;
    uint64_t nthreads;
} mark_head;

typedef struct {
    uint64_t written;     /* ft_ring_written() */
    uint64_t discarded;   /* ring.discarded: changes if the ring was */
    uint64_t packed;      /* whether it was packed */
} mark_thread;

PyObject *
ft_tracer_mark(ft_tracer *self)
{
    if (self->phase != FT_PHASE_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError, "mark() needs a tracer that is "
                        "recording");
        return NULL;
    }
    Py_ssize_t n = self->nthreads;
    PyObject *mark = PyBytes_FromStringAndSize(
        NULL, (Py_ssize_t)sizeof(mark_head) + n * (Py_ssize_t)sizeof(mark_thread));
    if (mark == NULL) {
        return NULL;
    }
    char *buf = PyBytes_AS_STRING(mark);
    mark_head head = {self->generation, ft_clock_ticks(&self->clock),
                      (uint64_t)n};
    memcpy(buf, &head, sizeof(head));
    for (Py_ssize_t i = 0; i < n; i++) {
        const ft_ring *ring = &self->threads[i]->ring;
        mark_thread at = {ft_ring_written(ring), ring->discarded,
                          ring->packed != NULL};
        memcpy(buf + sizeof(head) + (size_t)i * sizeof(at), &at, sizeof(at));
    }
    /* A step: the safe point where the function table is swept when it
     * has grown enough (release.c). */
    if (self->funcs.used >= self->release_at && ft_release_functions(self) < 0) {
        Py_DECREF(mark);
        return NULL;
    }
    return mark;
}

/* since: a mark of self's, checked; *head and *threads (into since's
 * bytes) set.  0, or -1 with ValueError or TypeError. */
static int
read_mark(ft_tracer *self, PyObject *since, mark_head *head,
          const char **threads)
{
    if (!PyBytes_Check(since)) {
        PyErr_Format(PyExc_TypeError, "snapshot() since must be a mark "
                     "(what Tracer.mark() returns), not %.100s",
                     Py_TYPE(since)->tp_name);
        return -1;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(since);
    const char *buf = PyBytes_AS_STRING(since);
    if ((size_t)size >= sizeof(*head)) {
        memcpy(head, buf, sizeof(*head));
    }
    if ((size_t)size < sizeof(*head)
        || (size_t)size != sizeof(*head) + head->nthreads * sizeof(mark_thread)
        || head->generation != self->generation
        || head->nthreads > (uint64_t)self->nthreads) {
        PyErr_SetString(PyExc_ValueError, "snapshot() since is not a mark of "
                        "this tracer (what its mark() returned while it "
                        "recorded)");
        return -1;
    }
    *threads = buf + sizeof(*head);
    return 0;
}

/* Copies the live thread's ring into th: all of it, or (since: a mark's
 * entry for it) only what it recorded since the mark when that is all
 * there: the copy then costs what the window holds, not the ring.  0, or
 * -1 (no memory). */
static int
copy_ring(ft_thread *th, const ft_thread *live, const mark_thread *since)
{
    if (since != NULL && !since->packed && live->ring.packed == NULL) {
        int rc = ft_ring_copy_since(&th->ring, &live->ring, since->written,
                                    since->discarded);
        if (rc <= 0) {
            return rc;
        }
    }
    /* The replay leaves out what came before the window. */
    return ft_ring_copy(&th->ring, &live->ring);
}

/* A copy of th for a snapshot: its records, base stack and name; its state
 * at the snapshot is the caller's to fill in.  since: NULL, or the entry
 * of a mark taken at mark_ticks (the window's start) for a thread
 * registered then.  NULL when out of memory. */
static ft_thread *
snapshot_thread(const ft_thread *src, const mark_thread *since,
                int64_t mark_ticks)
{
    ft_thread *th = malloc(sizeof(ft_thread));
    if (th == NULL) {
        return NULL;
    }
    *th = *src;
    th->os_thread = NULL;  /* a stopped copy: no sweep looks */
    th->base_stack = NULL;
    th->stop_stack = NULL;
    th->name = NULL;
    th->at_stop = FT_AT_STOP_GONE;
    th->displaced = FT_DISPLACED_NO;
    th->loss_ticks = 0;
    th->dropped_events = 0;
    th->dropped_counted = 0;
    th->queued = 0;
    th->window_ticks = 0;
    if (mark_ticks != 0 && src->base_ticks < mark_ticks) {
        th->window_ticks = mark_ticks;
    }
    if (copy_ring(th, src, since) < 0) {
        free(th);
        return NULL;
    }
    size_t depth = (size_t)src->base_depth;
    if (src->base_stack != NULL) {
        th->base_stack = malloc((depth ? depth : 1) * sizeof(uint32_t));
        if (th->base_stack == NULL) {
            thread_free(th);
            return NULL;
        }
        memcpy(th->base_stack, src->base_stack, depth * sizeof(uint32_t));
    }
    th->name = Py_XNewRef(src->name);
    return th;
}

/* Each thread of snap (a copy of self's, same order) alive now: whether it
 * records through self, and its stack (frames open at the snapshot, as at
 * a stop).  Python frames' ids are interned in self's table: snap copies it
 * after.  Pure C. */
static void
snapshot_stacks(ft_tracer *self, ft_tracer *snap)
{
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        ft_thread *live = ft_find_thread_of(self, ts);
        Py_ssize_t i = 0;
        while (live != NULL && i < snap->nthreads && self->threads[i] != live) {
            i++;
        }
        if (live == NULL || i == snap->nthreads) {
            continue;
        }
        ft_thread *th = snap->threads[i];
        th->at_stop = self->backend == FT_BACKEND_MONITORING || is_ours(self, ts)
            ? FT_AT_STOP_OURS : FT_AT_STOP_OTHER;
        take_stop_stack(self, th, ts);
    }
}

PyObject *
ft_tracer_snapshot(ft_tracer *self, PyObject *since)
{
    if (self->phase != FT_PHASE_ACTIVE || self->in_call != FT_IN_NONE) {
        PyErr_SetString(PyExc_RuntimeError,
                        self->phase == FT_PHASE_STOPPED
                        ? "snapshot() of a stopped tracer: its records no "
                          "longer change, use the tracer itself"
                        : "snapshot() needs a tracer that is recording "
                          "(started, not inside start() or stop())");
        return NULL;
    }
    mark_head head = {0, 0, 0};
    const char *marks = NULL;
    if (since != NULL && since != Py_None
        && read_mark(self, since, &head, &marks) < 0) {
        return NULL;
    }
    ft_tracer *snap = ft_tracer_like(self);
    if (snap == NULL) {
        return NULL;
    }
    /* From the anchor to the copies nothing runs that could record (no
     * Python code, no collection): every record copied is before it. */
    int gc_was_enabled = PyGC_Disable();
    ft_anchor at = ft_clock_anchor(&self->clock);
    int failed = 0;
    snap->threads = malloc((size_t)(self->nthreads ? self->nthreads : 1)
                           * sizeof(ft_thread *));
    failed = snap->threads == NULL;
    if (!failed) {
        snap->threads_cap = self->nthreads ? self->nthreads : 1;
        for (Py_ssize_t i = 0; i < self->nthreads && !failed; i++) {
            mark_thread entry;
            const mark_thread *at_mark = NULL;
            if (marks != NULL && (uint64_t)i < head.nthreads) {
                memcpy(&entry, marks + (size_t)i * sizeof(entry),
                       sizeof(entry));
                at_mark = &entry;
            }
            ft_thread *th = snapshot_thread(self->threads[i], at_mark,
                                            head.ticks);
            if (th == NULL) {
                failed = 1;
                break;
            }
            snap->threads[snap->nthreads++] = th;
            snap->ring_bytes += ft_ring_bytes(&th->ring);
        }
    }
    if (!failed) {
        snap->max_tstate_id = self->max_tstate_id;
        snapshot_stacks(self, snap);
        /* The frames left open by the threads that ended (for
         * ft_find_displaced()): a replay of each, counted on the live
         * thread, which keeps it for the next snapshot and the stop. */
        for (Py_ssize_t i = 0; i < snap->nthreads; i++) {
            ft_thread *th = snap->threads[i], *live = self->threads[i];
            if (th->at_stop == FT_AT_STOP_GONE) {
                ft_thread_note_open(th, ft_thread_open_python(live));
            }
        }
        failed = ft_functable_copy(&snap->funcs, &self->funcs) < 0
                 || ft_clock_copy(&snap->clock, &self->clock) < 0;
    }
    if (!failed) {
        ft_clock_note_boottime(&snap->clock, 1);
        snap->start_ns = self->start_ns;
        if (head.ticks != 0) {
            ft_clock_cursor cursor = {0};
            int64_t mark_ns = ft_clock_convert(&snap->clock, head.ticks,
                                               &cursor);
            snap->start_ns = mark_ns > snap->start_ns ? mark_ns
                                                      : snap->start_ns;
        }
        snap->stop_ns = at.ns;
        snap->intern_failures = self->intern_failures;
        snap->phase = FT_PHASE_STOPPED;
        ft_find_displaced(snap, 0);
    }
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (failed) {
        Py_DECREF(snap);
        return PyErr_NoMemory();
    }
    /* Threads may have been renamed.  Python code (threading): after the
     * snapshot time, so that its calls are not in the snapshot. */
    ft_interrupt kept = {0};
    PyObject *names = thread_names(&kept);
    if (raise_kept(&kept, 0) < 0) {
        Py_XDECREF(names);
        Py_DECREF(snap);
        return NULL;
    }
    if (names == NULL) {
        PyErr_Clear();  /* they keep the names they were registered with */
    }
    else {
        for (Py_ssize_t i = 0; i < snap->nthreads; i++) {
            if (tstate_id_alive(snap->threads[i]->tstate_id)) {
                name_thread(snap->threads[i], names);
            }
        }
        Py_DECREF(names);
    }
    return (PyObject *)snap;
}

/* ---- stop: the latch ------------------------------------------------ */

/* Notes which registered threads are alive at stop, and whether this
 * tracer's hook is still theirs (ft_thread.at_stop), before the hook is
 * removed.  Pure C: nothing runs meanwhile. */
static void
mark_threads_at_stop(ft_tracer *self)
{
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        ft_note_unhooked(self, ts);
        ft_thread *th = ft_find_thread_of(self, ts);
        if (th == NULL) {
            continue;
        }
        th->at_stop = self->backend == FT_BACKEND_MONITORING || is_ours(self, ts)
            ? FT_AT_STOP_OURS : FT_AT_STOP_OTHER;
    }
}

/* The latched stop: the first call records stop_ns (now, or at the anchor
 * `at` taken earlier), removes the hook and, unless in a forked child
 * (whose other threads vanished with the fork), finds the threads whose
 * recording ended early (displaced.c); every later call does nothing.
 * Never fails. */
static void
latch_stop_at(ft_tracer *self, const ft_anchor *at, int in_child,
              ft_interrupt *kept)
{
    if (self->phase == FT_PHASE_ARMED) {
        disarm_marked(self, kept);  /* nothing recorded: nothing to latch */
        return;
    }
    if (self->phase != FT_PHASE_ACTIVE) {
        return;
    }
    /* Python code runs below (audit hooks, threading, thread names): held,
     * and marked as stopping, so that a stop() from there does nothing, and
     * a clear() or another tracer's start() is refused. */
    Py_INCREF(self);
    ft_state *state = self->state;
    self->in_call = FT_IN_STOP;
    state->stopping = self;
    state->stopping_thread = PyThread_get_thread_ident();
    /* Every record was written before this anchor: converted, none can
     * end after stop_ns.  With an earlier anchor, the records after it
     * are past stop_ns: the replay drops them. */
    self->stop_ns = at != NULL ? at->ns : ft_clock_anchor(&self->clock).ns;
    if (at == NULL) {
        ft_clock_note_boottime(&self->clock, 1);
    }
    self->phase = FT_PHASE_STOPPED;
    /* Before uninstalling, which may run Python code: threads starting
     * meanwhile must not register with a stopping tracer. */
    if (self->state->active == self) {
        self->state->active = NULL;
    }
    mark_threads_at_stop(self);
    /* Ended threads' rings give back their rest (none records now). */
    ft_budget_sweep(self, NULL);
    int tool_lost = 0;
#if FT_HAVE_MONITORING
    if (self->backend == FT_BACKEND_MONITORING) {
        take_stop_stacks(self);
        tool_lost = !ft_monitor_stop(self);
    }
#endif
    uninstall_hooks(self, 1, kept);
    if (!in_child) {
        ft_find_displaced(self, tool_lost);  /* pure C */
    }
    restore_threading_profile(self, kept);
    /* Threads may have been renamed while traced.  Only those still
     * running: an ended thread's ident may be a later thread's now. */
    PyObject *names = thread_names(kept);
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        if (tstate_id_alive(self->threads[i]->tstate_id)) {
            name_thread(self->threads[i], names);
        }
    }
    Py_XDECREF(names);
    if (state->stopping == self) {
        state->stopping = NULL;
    }
    self->in_call = FT_IN_NONE;
    Py_DECREF(self);
}

int
ft_tracer_stop(ft_tracer *self)
{
    if (self->in_call == FT_IN_START) {
        /* The hooks are half installed: start() finishes first. */
        PyErr_SetString(PyExc_RuntimeError,
                        "stop() called while start() is running (from code "
                        "start() runs, such as an audit hook, or from another "
                        "thread meanwhile); call stop() once start() has "
                        "returned");
        return -1;
    }
    /* Inside stop(): the stop is latched already, and finishing.  An
     * interrupt met on the way is raised once it is stopped. */
    ft_interrupt kept = {0};
    latch_stop_at(self, NULL, 0, &kept);
    return raise_kept(&kept, 0);
}

int
ft_check_not_in_call(ft_tracer *self, const char *what)
{
    if (self->in_call != FT_IN_NONE) {
        PyErr_Format(PyExc_RuntimeError, "%s called while %s is running: "
                     "call it once that has returned", what,
                     self->in_call == FT_IN_START ? "start()" : "stop()");
        return -1;
    }
    return 0;
}

void
ft_tracer_finalize(ft_tracer *self)
{
    /* Inside start() or stop() their callers hold the tracer: not here. */
    if ((self->phase != FT_PHASE_ACTIVE && self->phase != FT_PHASE_ARMED)
        || self->in_call != FT_IN_NONE) {
        return;
    }
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    latch_stop_at(self, NULL, 0, NULL);
    FT_RESTORE_EXC(saved);
}

void
ft_tracer_silence(ft_tracer *self)
{
    if (self->phase == FT_PHASE_ARMED) {
        self->phase = FT_PHASE_NEW;  /* nothing recorded */
        ft_ring_free(&self->armed_ring);
        memset(&self->armed_ring, 0, sizeof(self->armed_ring));
    }
    else if (self->phase == FT_PHASE_ACTIVE) {
        self->stop_ns = ft_clock_anchor(&self->clock).ns;
        ft_clock_note_boottime(&self->clock, 1);
        self->phase = FT_PHASE_STOPPED;
    }
    else {
        return;
    }
    if (self->state->active == self) {
        self->state->active = NULL;
    }
    if (self->hook != NULL) {
        ((ft_hookobject *)self->hook)->tracer = NULL;
    }
    for (Py_ssize_t i = 0; self->hooks && i < PyList_GET_SIZE(self->hooks);
         i++) {
        ft_hookobject *hook = (ft_hookobject *)PyList_GET_ITEM(self->hooks, i);
        hook->thread = NULL;
        hook->tracer = NULL;
    }
    if (self->monitor != NULL) {
        ((ft_hookobject *)self->monitor)->tracer = NULL;
    }
}

/* ---- threads started while a tracer is active ----------------------- */

/* A thread started while a tracer is armed: with the setprofile backend
 * it gets the hook, inert until start() registers it (or its first event
 * after start(), through the cache, 3.12+); with the monitoring backend,
 * nothing. */
static PyObject *
arm_thread(ft_tracer *tracer)
{
    /* Its name, for start(), which runs no Python code.  Names run Python
     * code (untraced: this is a profile function), during which the tracer
     * may be disarmed or started: look again after. */
    Py_INCREF(tracer);
    PyObject *names = thread_names(NULL);
    int armed = tracer->phase == FT_PHASE_ARMED;
    if (armed && names != NULL) {
        Py_XSETREF(tracer->armed_names, names);
    }
    else {
        Py_XDECREF(names);
    }
    PyObject *hook = NULL;
    if (armed && tracer->backend == FT_BACKEND_SETPROFILE) {
#if FT_SHARED_HOOK
        hook = Py_XNewRef(tracer->hook);
#else
        hook = (PyObject *)new_thread_hook(tracer, NULL);
        if (hook == NULL) {
            /* Never raise into the thread: it runs untraced, and says so. */
            PyErr_WriteUnraisable(NULL);
        }
#endif
    }
    if (hook == NULL) {
        PyEval_SetProfile(NULL, NULL);
    }
    else {
        tracer->state->count_hook_installs++;
        PyEval_SetProfile(ft_hook, hook);  /* audited: may disarm it */
        Py_DECREF(hook);
    }
    Py_DECREF(tracer);
    Py_RETURN_NONE;
}

/* Profile function given to threading.setprofile(): each thread started
 * while a tracer is active calls it at its first event, and it replaces
 * itself with the C hook on that thread. */
PyObject *
ft_bootstrap_thread(ft_state *state, PyObject *const *args, Py_ssize_t nargs)
{
    ft_tracer *tracer = state->active;

    if (tracer == NULL) {
        /* Tracing ended before this thread ran. */
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    if (nargs != 3 || !PyFrame_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "_thread_bootstrap(frame, event, arg) is called by "
                        "the interpreter as a profile function");
        return NULL;
    }
    if (tracer->phase == FT_PHASE_ARMED) {
        return arm_thread(tracer);
    }
    /* Its name runs Python code (untraced: this is a profile function),
     * during which the tracer may stop: look again after. */
    PyObject *names = caller_thread_names();
    tracer = state->active;
    if (tracer == NULL || tracer->phase != FT_PHASE_ACTIVE) {
        Py_XDECREF(names);
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    if (tracer->backend == FT_BACKEND_MONITORING) {
        /* sys.monitoring records this thread already; threading calls this
         * once the thread is in threading._active: only its name is new. */
        ft_thread *th = ft_find_thread(tracer, PyThreadState_Get());
        if (th != NULL) {
            name_thread(th, names);
            th->of_threading = 1;
        }
        Py_XDECREF(names);
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    /* The thread's ring first, so that its allocation is no part of the
     * thread's trace. */
    ft_ring ring;
    Py_INCREF(tracer);
    int ring_rc = alloc_ring(&ring, tracer->buffer_size,
                             ft_clock_ticks(&tracer->clock));
    state->count_rings++;
    if (state->active != tracer || tracer->phase != FT_PHASE_ACTIVE) {
        if (ring_rc == 0) {
            ft_ring_free(&ring);
        }
        Py_DECREF(tracer);
        Py_XDECREF(names);
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    /* Held to the end: the last reference may be dropped meanwhile (by
     * Python code run below), and then its release frees the tracer. */
    int64_t ts = ft_clock_ticks(&tracer->clock);
    PyFrameObject *frame = (PyFrameObject *)args[0];
    PyObject *event = args[1];
    int what;
    if (PyUnicode_CompareWithASCIIString(event, "call") == 0) {
        what = PyTrace_CALL;
    }
    else if (PyUnicode_CompareWithASCIIString(event, "return") == 0) {
        what = PyTrace_RETURN;
    }
    else if (PyUnicode_CompareWithASCIIString(event, "c_call") == 0) {
        what = PyTrace_C_CALL;
    }
    else {
        /* c_return/c_exception: the return of the very call that installed
         * this function (sys.setprofile), whose call was never seen. */
        what = -1;
    }
    /* A "call" event's frame is the callee: the stack before it starts at
     * its caller. */
    PyFrameObject *top = what == PyTrace_CALL ? PyFrame_GetBack(frame)
                                              : (PyFrameObject *)Py_NewRef(frame);
    /* GC off: registering allocates, and a collection could run Python
     * code and let another thread in while the tracer is being updated. */
    int gc_was_enabled = PyGC_Disable();
    ft_thread *th = register_thread(tracer, PyThreadState_Get(), top, ts);
    ft_hookobject *hook = NULL;
#if FT_SHARED_HOOK
    if (th != NULL) {
        /* The same object as every other thread's; the next events find
         * th through the cache. */
        hook = (ft_hookobject *)Py_NewRef(tracer->hook);
        ft_cache_thread(tracer, th);
    }
#else
    hook = th != NULL ? new_thread_hook(tracer, th) : NULL;
#endif
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    Py_XDECREF(top);
    if (hook == NULL) {
        /* Never raise into the thread: it runs untraced, and says so. */
        PyErr_WriteUnraisable(NULL);
        PyEval_SetProfile(NULL, NULL);
    }
    else {
        th->of_threading = 1;
        if (ring_rc == 0 && th->ring.buf == NULL) {
            adopt_ring(tracer, th, &ring);
            ring_rc = -1;  /* handed over */
        }
        name_thread(th, names);  /* by the ident it may just have got */
        /* Runs audit hooks, which may stop the tracer: ft_hook_record()
         * looks at the hook first, and records nothing then. */
        state->count_hook_installs++;
        PyEval_SetProfile(ft_hook, (PyObject *)hook);
        if (what >= 0) {
            ft_hook_record(hook, th, ts, frame, what, args[2]);
        }
        Py_DECREF(hook);
    }
    if (ring_rc == 0) {
        ft_ring_free(&ring);  /* not handed over */
    }
    Py_XDECREF(names);
    Py_DECREF(tracer);
    Py_RETURN_NONE;
}

static PyObject *
thread_bootstrap(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return ft_bootstrap_thread(ft_get_state(module), args, nargs);
}

PyMethodDef ft_thread_bootstrap_def = {
    "_thread_bootstrap", (PyCFunction)(void (*)(void))thread_bootstrap,
    METH_FASTCALL,
    "_thread_bootstrap($module, frame, event, arg, /)\n--\n\n"
    "Installs the active tracer's hook on a new thread (internal).",
};

/* ---- fork ----------------------------------------------------------- */

static void
tracer_before_fork(ft_tracer *self)
{
    if (self->phase == FT_PHASE_ACTIVE) {
        self->fork_anchor = ft_clock_anchor(&self->clock);
        self->fork_anchored = 1;
    }
}

static void
tracer_after_fork_child(ft_tracer *self)
{
    /* The other threads are gone, and the child's at-fork callbacks have
     * run since the anchor: the trace ends where the fork began.  The
     * child traces nothing unless it starts a tracer of its own. */
    latch_stop_at(self, self->fork_anchored ? &self->fork_anchor : NULL, 1,
                  NULL);
    self->fork_anchored = 0;
}

/* os.register_at_fork() callbacks.  Called from C inside os.fork(): no
 * profile event, so never recorded. */
static PyObject *
before_fork(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_tracer *tracer = ft_get_state(module)->active;
    if (tracer != NULL) {
        tracer_before_fork(tracer);
    }
    Py_RETURN_NONE;
}

static PyObject *
after_fork_in_parent(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_tracer *tracer = ft_get_state(module)->active;
    if (tracer != NULL) {
        tracer->fork_anchored = 0;  /* the parent goes on: the anchor stays */
    }
    Py_RETURN_NONE;
}

static PyObject *
after_fork_in_child(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ft_state *state = ft_get_state(module);
    unsigned long me = PyThread_get_thread_ident();
    /* A start() or stop() another thread was running is not the child's:
     * that thread is gone, and its call would never end there. */
    ft_tracer *abandoned = NULL;
    if (state->starting != NULL && state->starting_thread != me) {
        abandoned = state->starting;
        state->starting = NULL;
        abandoned->in_call = FT_IN_NONE;
    }
    if (state->stopping != NULL && state->stopping_thread != me) {
        /* Its hooks were silenced before any Python code ran. */
        state->stopping->in_call = FT_IN_NONE;
        state->stopping = NULL;
    }
    if (abandoned != NULL && abandoned->phase == FT_PHASE_NEW) {
        /* Not active yet: what that start() had made goes, so that the
         * tracer can start in the child. */
        Py_INCREF(abandoned);
        restore_threading_profile(abandoned, NULL);
        Py_CLEAR(abandoned->hooks);
        Py_CLEAR(abandoned->hook);
        Py_CLEAR(abandoned->armed_names);
        ft_ring_free(&abandoned->armed_ring);
        memset(&abandoned->armed_ring, 0, sizeof(abandoned->armed_ring));
        Py_DECREF(abandoned);
    }
    ft_tracer *tracer = state->active;
    if (state->starting != NULL) {
        /* Forked by code this thread's start() runs: that start() goes on
         * in the child, and stops the tracer when done with the hooks. */
        state->starting->stop_pending = 1;
    }
    else if (tracer != NULL) {
        Py_INCREF(tracer);
        tracer_after_fork_child(tracer);
        Py_DECREF(tracer);
    }
    Py_RETURN_NONE;
}

static PyMethodDef fork_defs[] = {
    {"_before_fork", before_fork, METH_NOARGS, NULL},
    {"_after_fork_in_parent", after_fork_in_parent, METH_NOARGS, NULL},
    {"_after_fork_in_child", after_fork_in_child, METH_NOARGS, NULL},
};

int
ft_register_at_fork(PyObject *module)
{
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL) {
        return -1;
    }
    PyObject *reg = PyObject_GetAttrString(os, "register_at_fork");
    Py_DECREF(os);
    if (reg == NULL) {
        /* No fork on this platform. */
        PyErr_Clear();
        return 0;
    }
    static const char *const keys[] = {
        "before", "after_in_parent", "after_in_child",
    };
    PyObject *kwargs = PyDict_New();
    int rc = kwargs == NULL ? -1 : 0;
    for (size_t i = 0; rc == 0 && i < 3; i++) {
        PyObject *func = PyCFunction_NewEx(&fork_defs[i], module, NULL);
        rc = func == NULL ? -1 : PyDict_SetItemString(kwargs, keys[i], func);
        Py_XDECREF(func);
    }
    if (rc == 0) {
        PyObject *empty = PyTuple_New(0);
        PyObject *res = empty ? PyObject_Call(reg, empty, kwargs) : NULL;
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
        Py_XDECREF(empty);
    }
    Py_XDECREF(kwargs);
    Py_DECREF(reg);
    return rc;
}
